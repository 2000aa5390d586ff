// relay_drain: the drain child of relay_bench. One drain of a backlog by the relay (public C API:
// outbox_relay_new, then outbox_relay_step until a step reads nothing), its DrainStats on stdout.
// A process of its own, so that its peak RSS (wait4's ru_maxrss in relay_bench) is the relay's.
//
//   relay_drain SCHEMA EXCHANGE CHANNEL BATCH WINDOW EXPECTED KEY STEPS_CSV PG_OPTIONS
//
// The URLs come from the environment, OUTBOX_PG_URL and OUTBOX_AMQP_URL (never on a command line,
// where any user could read the password); PG_OPTIONS are libpq session options, "-" for none;
// STEPS_CSV a file that every step's outbox_relay_stats are appended to, "-" for none.
#include "support/config.hpp"
#include "support/relay.hpp"
#include "support/util.hpp"

#include <outbox.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>

using namespace bench;

namespace {

// When the relay's connections are ready: the first step opens them, and the relay says so through
// its public log sink ("connected to RabbitMQ ...", "connected to PostgreSQL ..."). The drain is
// timed from the later of the two, as B is timed from its connection ready in confirm mode: both
// sides then time the pipeline, not the connects (which are in `connect_us`).
struct Connects {
    Clock::time_point amqp{}, pg{};
    bool amqp_seen = false, pg_seen = false;

    static void sink(outbox_log_level /*level*/, const char *message, void *self) {
        auto *c = static_cast<Connects *>(self);
        const std::string_view m(message);
        if (!c->amqp_seen && m.rfind("connected to RabbitMQ", 0) == 0) {
            c->amqp = Clock::now();
            c->amqp_seen = true;
        } else if (!c->pg_seen && m.rfind("connected to PostgreSQL", 0) == 0) {
            c->pg = Clock::now();
            c->pg_seen = true;
        }
    }
    [[nodiscard]] Clock::time_point ready(const std::string &key) const {
        if (!amqp_seen || !pg_seen) {
            die(key + ": the relay's first step did not log both of its connections (its log lines changed?)");
        }
        return std::max(amqp, pg);
    }
};

// The relay drain itself (public C API: outbox_relay_new, outbox_relay_step until a step reads
// nothing), timed from both connections ready (in the first step) to the end of the step that
// recorded the last event. (outbox_relay_stats and the CSV/JSON keys keep version 1's names:
// claimed = read, claim_us = reading, mark_us = recording.)
DrainStats drain(const Run &run, int batch, int window, const std::string &pg_url, long expected,
                 const std::string &key, const std::string &steps_csv) {
    outbox_config *cfg = relay_config(run, batch, window, pg_url);
    outbox_relay *relay = nullptr;
    outbox_status rc = outbox_relay_new(&relay, cfg);
    outbox_config_free(cfg);
    if (rc != OUTBOX_OK) {
        die(std::string("outbox_relay_new: ") + outbox_last_error());
    }
    struct Free {
        outbox_relay *r;
        ~Free() { outbox_relay_free(r); }
    } free_relay{relay};
    Connects connects;
    rc = outbox_relay_set_logger(relay, &Connects::sink, &connects);
    if (rc != OUTBOX_OK) {
        die(std::string("outbox_relay_set_logger: ") + outbox_last_error());
    }
    DrainStats d;
    std::ofstream csv;
    if (!steps_csv.empty() && steps_csv != "-") {
        csv.open(steps_csv, std::ios::app);
        csv << "scenario,step,claimed,published,held_back,claim_us,publish_us,mark_us,total_us\n";
    }
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    auto t_last = t0;
    while (true) {
        outbox_relay_stats st;
        outbox_relay_stats_init(&st);
        rc = outbox_relay_step(relay, &st);
        if (rc != OUTBOX_OK) {
            die(key + ": outbox_relay_step: " + outbox_status_name(rc) + ": " + outbox_last_error());
        }
        // Every step records its outcomes before it returns: its stats are everything it did.
        d.published += st.published;
        d.failed += st.failed;
        d.mark_us += st.mark_us;
        if (st.published > 0 || st.failed > 0) {
            t_last = Clock::now();
        }
        if (st.claimed == 0) {
            break;
        }
        if (csv.is_open()) {
            csv << key << ',' << d.steps << ',' << st.claimed << ',' << st.published << ',' << st.held_back << ','
                << st.claim_us << ',' << st.publish_us << ',' << st.mark_us << ',' << st.total_us << '\n';
        }
        if (d.steps == 0) {
            d.first_step_us = st.total_us;
        }
        ++d.steps;
        d.claimed += st.claimed;
        d.held_back += st.held_back;
        d.unconfirmed += st.unconfirmed;
        d.claim_us += st.claim_us;
        d.publish_us += st.publish_us;
        d.total_us += st.total_us;
        d.max_step_us = std::max<int64_t>(d.max_step_us, st.total_us);
        check_interrupt();
        if (d.steps > 10 * expected + 100) {
            die(key + ": the relay does not finish");
        }
    }
    const Clock::time_point ready = connects.ready(key);
    d.connect_us = static_cast<int64_t>(seconds_between(t0, ready) * 1e6);
    d.seconds = seconds_between(ready, t_last);
    d.cpu_s = cpu_seconds() - cpu0;
    return d;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 10) {
        std::fprintf(stderr, "relay_drain: expected 9 arguments\n");
        return 2;
    }
    try {
        Run run;
        run.schema = argv[1];
        run.exchange = argv[2];
        run.channel = argv[3];
        run.amqp_url = amqp_url_from_env();
        const int batch = static_cast<int>(parse_long("batch", argv[4], 1, 100000));
        const int window = static_cast<int>(parse_long("window", argv[5], 1, 65535));
        const long expected = parse_long("expected", argv[6], 0, 100000000);
        const std::string pg_url = pg_url_from_env();
        const std::string opts = argv[9];
        DrainStats d =
            drain(run, batch, window, opts == "-" ? pg_url : with_options(pg_url, opts), expected, argv[7], argv[8]);
        std::printf("%s\n", d.line().c_str());
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "relay_drain: %s\n", e.what());
        return 1;
    }
}
