// F: the other aggregates while one aggregate in 100 keeps failing (issue 31). Two sides, back to
// back, each a plain subscriber of its own (outbox_consumer_run on a thread of the bench, the
// library's parking with consumer.max_attempts 5, consumer.retry_initial_ms 100,
// consumer.retry_max_ms 1000, consumer.retry_poll_ms 100 on both sides; its session with
// synchronous_commit=off, as Q's) whose handler writes one effect row in the consumer's transaction:
//   clean    the handler never fails;
//   failing  the handler fails (transient: retried, then parked) for every event of the aggregates
//            whose index is a multiple of 100, so their later events are held behind the head.
// An attempt measures clean, failing, failing, clean (each a subscriber of its own), so that load
// that drifts over the attempt weighs on both kinds alike; a kind's throughput is its two sides'
// events over their seconds, its latencies the two sides' pooled. Each side: --fail-events events over
// --fail-aggregates aggregates published by the relay before the consumer starts, timed from its start to the last
// effect of the other aggregates (throughput); then, with an `outbox relay` daemon and the consumer running,
// --fail-rate events/s over the same aggregates for --latency-seconds, the latency of the other aggregates' events from
// their COMMIT to their handler (p50, p99). Checks: the other aggregates' effects exactly once and in
// seq order; the failing ones never applied, and held. Targets: throughput failing/clean >= 0.9,
// p99 failing/clean <= 1.2.
#include "../scenarios.hpp"

#include "../support/config.hpp"
#include "../support/proc.hpp"
#include "../support/relay.hpp"
#include "../support/writers.hpp"

#include <outbox.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace bench {

namespace {

constexpr long kFailEvery = 100; // aggregate index % 100 == 0: failing on the failing side

struct Side {
    bool failing = false;
    std::string name;   // the subscriber
    std::string insert; // the effect row
    unsigned code = 0;  // the latency phase's event ids: fa11<code>-...-<k>
    std::atomic<long> healthy{0};
    std::atomic<long> failures{0};
    std::mutex mu;
    std::vector<int64_t> handled_ns; // latency phase: event k -> steady clock of its handler
};

bool failing_aggregate(const char *agg) {
    // "f000000123": the aggregate's index after the prefix.
    return agg != nullptr && agg[0] == 'f' && std::strtol(agg + 1, nullptr, 10) % kFailEvery == 0;
}

int handle(outbox_db *tx, const outbox_message *m, void *user_data) {
    auto *s = static_cast<Side *>(user_data);
    const char *agg = outbox_message_field(m, "AGGREGATE_ID");
    if (s->failing && failing_aggregate(agg)) {
        ++s->failures;
        outbox_handler_error("bench F: this aggregate keeps failing");
        return 1;
    }
    const char *id = outbox_message_field(m, "OUTBOX_ID");
    const std::string seq = std::to_string(outbox_message_seq(m));
    const char *vals[] = {id, agg != nullptr ? agg : "", seq.c_str()};
    PGresult *r = PQexecParams(static_cast<PGconn *>(outbox_db_pgconn(tx)), s->insert.c_str(), 3, nullptr, vals,
                               nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) {
        outbox_handler_error(PQresultErrorMessage(r));
    }
    PQclear(r);
    if (!ok) {
        return 1;
    }
    // The latency phase's events: fa11CCCC-0000-7000-8000-<k, 12 hex digits>.
    unsigned code = 0;
    unsigned long long k = 0;
    if (id != nullptr && std::sscanf(id, "fa11%4x-0000-7000-8000-%12llx", &code, &k) == 2 && code == s->code) {
        std::lock_guard<std::mutex> lk(s->mu);
        if (k < s->handled_ns.size() && s->handled_ns[k] == 0) {
            s->handled_ns[k] = now_ns();
        }
    }
    ++s->healthy;
    return 0;
}

outbox_config *fail_config(const Run &run) {
    return consumer_config(run, {{"outbox.schema", run.schema},
                                 {"pg.url", with_options(run.pg_url, "-c synchronous_commit=off")},
                                 {"consumer.on_failure", "park"},
                                 {"consumer.max_attempts", "5"},
                                 {"consumer.retry_initial_ms", "100"},
                                 {"consumer.retry_max_ms", "1000"},
                                 {"consumer.retry_poll_ms", "100"}});
}

struct SideResult {
    Row tput;                // the other aggregates' events/s draining the backlog
    double p50 = 0, p99 = 0; // the latency phase, ms
    long latency_events = 0; // the other aggregates' events of the latency phase measured
    double steal = -1;       // around both phases
    long held = 0;           // aggregates held at the end
    std::vector<double> lat; // the latency phase's latencies, ms
    long failures = 0;       // handler runs that failed
};

// The row of a kind (its two sides pooled).
void describe(SideResult &r, bool failing, const Options &o) {
    r.tput.what = std::string("the other aggregates' events through a subscriber") +
                  (failing ? " while 1 aggregate in 100 keeps failing (retried, then parked)" : ", nothing failing") +
                  ", 2 sides (clean, failing, failing, clean): backlogs drained; then " + fixed(o.fail_rate, 0) +
                  " events/s for " + fixed(o.latency_seconds, 1) + " s, COMMIT -> handler p50 " + fixed(r.p50, 2) +
                  " ms, p99 " + fixed(r.p99, 2) + " ms";
    r.tput.extra = Json::object()
                       .num("p50_ms", r.p50, 3)
                       .num("p99_ms", r.p99, 3)
                       .integer("latency_events", r.latency_events)
                       .integer("handler_failures", r.failures)
                       .integer("held_aggregates", r.held)
                       .boolean("failing", failing);
}

// Two sides of one kind as one: events over seconds, latencies pooled, the noisier side's steal.
SideResult pooled(const SideResult &a, const SideResult &b) {
    SideResult r = a;
    r.tput.events = a.tput.events + b.tput.events;
    r.tput.seconds = a.tput.seconds + b.tput.seconds;
    r.lat.insert(r.lat.end(), b.lat.begin(), b.lat.end());
    r.latency_events = static_cast<long>(r.lat.size());
    r.p50 = percentile(r.lat, 50);
    r.p99 = percentile(r.lat, 99);
    r.steal = std::max(a.steal, b.steal);
    r.tput.steal = r.steal;
    r.held = std::max(a.held, b.held);
    r.failures = a.failures + b.failures;
    return r;
}

void aggregate_id(std::string &out, long index) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "f%09ld", index);
    out.assign(buf);
}

SideResult fail_side(Bench &b, bool failing, int attempt, int round) {
    Run &run = b.run;
    const Options &o = b.o;
    const std::string key = failing ? "F-failing" : "F-clean";
    Side s;
    s.failing = failing;
    s.name = std::string("bench-f-") + (failing ? "failing" : "clean") + "-a" + std::to_string(attempt) + "r" +
             std::to_string(round) + "-" + run.exchange;
    s.code = static_cast<unsigned>(attempt * 4 + round * 2 + (failing ? 1 : 0)) & 0xffffu;
    const std::string effects = table_of(run, "bench_fail_effects");
    s.insert = "INSERT INTO " + effects + " (consumer, outbox_id, aggregate, seq) VALUES ('" + s.name +
               "', $1, $2, CAST($3 AS bigint))";
    outbox_config *cfg = fail_config(run);
    outbox_consumer *c = nullptr;
    if (outbox_consumer_new(&c, cfg, s.name.c_str()) != OUTBOX_OK || outbox_consumer_connect(c) != OUTBOX_OK) {
        throw std::runtime_error("F: " + std::string(outbox_last_error()));
    }
    // The backlog, published by the relay into the subscriber's queue (declared by the connect).
    const Generator g = b.events(static_cast<uint16_t>(0x0300 + s.code), 'f', o.fail_events, o.fail_aggregates);
    long healthy_backlog = 0;
    for (long i = 0; i < g.count; ++i) {
        healthy_backlog += (failing && g.aggregate_of(i) % kFailEvery == 0) ? 0 : 1;
    }
    progress(key + ": " + std::to_string(g.count) + " events over " + std::to_string(g.aggregates) + " aggregates" +
             (failing ? " (1 in 100 failing)" : "") + ", published by the relay");
    b.load(g);
    (void)run_relay(run, o, g, b.pg, o.batch_size, o.window, key + "-relay");
    b.admin.purge(run.queue);

    SideResult res;
    const CpuTimes machine0 = cpu_times();
    const auto t0 = Clock::now();
    outbox_status st = OUTBOX_OK;
    std::string error;
    std::thread loop([&] {
        st = outbox_consumer_run(c, nullptr, handle, &s);
        if (st != OUTBOX_OK) {
            error = outbox_last_error();
        }
    });
    struct Stop {
        outbox_consumer *c;
        std::thread &t;
        ~Stop() {
            outbox_consumer_stop(c);
            if (t.joinable()) {
                t.join();
            }
        }
    } stop{c, loop};
    auto wait_for = [&](long want, const std::string &what) {
        long last = -1;
        auto progress_t = Clock::now();
        while (s.healthy.load() < want && !g_interrupted.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            const long now = s.healthy.load();
            if (now != last) {
                last = now;
                progress_t = Clock::now();
            } else if (seconds_between(progress_t, Clock::now()) > 30) {
                break;
            }
        }
        expect(run, s.healthy.load() >= want,
               key + ": " + what + ": every event of the other aggregates handled (" +
                   std::to_string(s.healthy.load()) + " of " + std::to_string(want) + ")");
    };
    wait_for(healthy_backlog, "backlog");
    res.tput.seconds = seconds_between(t0, Clock::now());
    res.tput.events = healthy_backlog;
    check_interrupt();

    // The latency phase: the relay daemon publishes what paced writers commit.
    const long cap = static_cast<long>(o.fail_rate * o.latency_seconds);
    s.handled_ns.assign(static_cast<size_t>(cap), 0);
    auto daemon = start_daemon(run, "bench-failing-" + std::to_string(s.code), {});
    std::this_thread::sleep_for(std::chrono::milliseconds(300)); // the relay connects
    const long aggs = o.fail_aggregates;
    const unsigned code = s.code;
    PacedWrites pw = paced_writes(
        run, o, false, o.fail_rate, o.latency_seconds, cap,
        [aggs](std::string &out, long k) { aggregate_id(out, k % aggs); },
        [code](std::string &out, long k) {
            char buf[48];
            std::snprintf(buf, sizeof buf, "fa11%04x-0000-7000-8000-%012lx", code, k);
            out.assign(buf);
        });
    long healthy_written = 0;
    for (long k = 0; k < cap; ++k) {
        if (pw.commit_ns[static_cast<size_t>(k)] != 0 && !(failing && (k % aggs) % kFailEvery == 0)) {
            ++healthy_written;
        }
    }
    wait_for(healthy_backlog + healthy_written, "latency phase");
    stop_daemon(*daemon);
    res.steal = steal_share(machine0, cpu_times());
    std::vector<double> lat;
    {
        std::lock_guard<std::mutex> lk(s.mu);
        for (long k = 0; k < cap; ++k) {
            const int64_t h = s.handled_ns[static_cast<size_t>(k)], w = pw.commit_ns[static_cast<size_t>(k)];
            if (h != 0 && w != 0) {
                lat.push_back(static_cast<double>(h - w) / 1e6);
            }
        }
    }
    res.latency_events = static_cast<long>(lat.size());
    res.lat = lat;
    res.p50 = percentile(lat, 50);
    res.p99 = percentile(lat, 99);
    outbox_consumer_stop(c);
    loop.join();
    expect(run, st == OUTBOX_OK, key + ": the consumer ran without error " + error);
    outbox_consumer_free(c);
    outbox_config_free(cfg);
    check_interrupt();

    // Checked: the other aggregates' effects once each and in seq order; the failing ones never
    // applied and held.
    auto once = b.pg.query("SELECT count(*), count(DISTINCT outbox_id), count(*) FILTER (WHERE CAST(substr(aggregate,"
                           " 2) AS bigint) % 100 = 0) FROM " +
                               effects + " WHERE consumer = $1",
                           {s.name});
    const long want = healthy_backlog + healthy_written;
    expect(run, once->get_ll(0, 0) == want && once->get_ll(0, 1) == want,
           key + ": every effect of the other aggregates exactly once (" + once->get(0, 0) + " effects, " +
               once->get(0, 1) + " distinct, of " + std::to_string(want) + ")");
    if (failing) {
        expect(run, once->get_ll(0, 2) == 0,
               key + ": no event of a failing aggregate applied (" + once->get(0, 2) + ")");
        auto held =
            b.pg.query("SELECT count(*) FROM " + table_of(run, "outbox_inbox_held") + " WHERE consumer = $1", {s.name});
        res.held = held->get_ll(0, 0);
        const long failing_aggs = (o.fail_aggregates + kFailEvery - 1) / kFailEvery;
        expect(run, res.held == failing_aggs,
               key + ": every failing aggregate held (" + std::to_string(res.held) + " of " +
                   std::to_string(failing_aggs) + ")");
    }
    auto order = b.pg.query(
        "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY aggregate ORDER BY n) AS prev FROM " + effects +
            " WHERE consumer = $1) x WHERE (prev IS NULL AND seq <> 1) OR (prev IS NOT NULL AND seq <> prev + 1)",
        {s.name});
    expect(run, order->get_ll(0, 0) == 0,
           key + ": per-aggregate order of the effects (" + order->get(0, 0) + " violations)");
    b.admin.delete_queue(s.name);
    b.admin.delete_queue(s.name + ".dead");
    b.admin.delete_exchange(s.name + ".dlx");
    b.admin.purge(run.queue);

    res.tput.key = key;
    res.tput.steal = res.steal;
    res.failures = s.failures.load();
    progress(key + ": " + rate_str(res.tput.rate()) + " (backlog), p50 " + fixed(res.p50, 2) + " ms, p99 " +
             fixed(res.p99, 2) + " ms at " + fixed(o.fail_rate, 0) + " events/s" +
             (failing ? ", " + std::to_string(s.failures.load()) + " handler failures" : ""));
    return res;
}

} // namespace

void scenario_failing(Bench &b) {
    Run &run = b.run;
    b.pg.exec("CREATE TABLE IF NOT EXISTS " + table_of(run, "bench_fail_effects") +
              " (n bigserial PRIMARY KEY, consumer text NOT NULL, outbox_id text NOT NULL, aggregate text NOT NULL,"
              " seq bigint NOT NULL)");
    {
        outbox_config *cfg = fail_config(run);
        outbox_db *db = nullptr;
        if (outbox_db_open(&db, run.pg_url.c_str(), cfg) != OUTBOX_OK ||
            outbox_migrate(nullptr, db, OUTBOX_MIGRATE_INBOX) != OUTBOX_OK) {
            throw std::runtime_error(std::string("F: ") + outbox_last_error());
        }
        outbox_db_close(db);
        outbox_config_free(cfg);
    }
    // Both kinds of both figures, clean-failing-failing-clean: judged together.
    const auto q = measure_quiet<std::vector<SideResult>>(
        "F failing vs clean", quiet_rule(b.o),
        [&](int attempt) {
            const SideResult c1 = fail_side(b, false, attempt, 0), f1 = fail_side(b, true, attempt, 0);
            const SideResult f2 = fail_side(b, true, attempt, 1), c2 = fail_side(b, false, attempt, 1);
            return std::vector<SideResult>{pooled(c1, c2), pooled(f1, f2)};
        },
        [](const std::vector<SideResult> &v) {
            return std::vector<double>{v[0].steal, v[1].steal};
        });
    SideResult clean = q.value[0];
    SideResult bad = q.value[1];
    describe(clean, false, b.o);
    describe(bad, true, b.o);

    Figure t;
    t.section = "10 failing aggregates";
    t.name = "the other aggregates' throughput while 1 aggregate in 100 keeps failing";
    t.value = rate_str(bad.tput.rate());
    t.baseline = "the same without failures " + rate_str(clean.tput.rate());
    t.ratio = clean.tput.rate() > 0 ? bad.tput.rate() / clean.tput.rate() : -1;
    t.target = "≥ 0.9";
    judge(t, q.how, t.ratio >= 0.9, bad.steal, clean.steal);

    Figure l;
    l.section = "10 failing aggregates";
    l.name = "the other aggregates' p99 latency (COMMIT -> handler) while 1 aggregate in 100 keeps failing";
    l.value = fixed(bad.p99, 2) + " ms";
    l.baseline = "the same without failures " + fixed(clean.p99, 2) + " ms";
    l.ratio = clean.p99 > 0 ? bad.p99 / clean.p99 : -1;
    l.target = "≤ 1.2";
    judge(l, q.how, l.ratio >= 0 && l.ratio <= 1.2, bad.steal, clean.steal);

    bad.tput.ratio_value = t.ratio;
    bad.tput.ratio = "failing/clean = " + fixed(t.ratio, 2) + " (throughput), p99 " + fixed(l.ratio, 2);
    bad.tput.target = "≥ 0.9: " + t.verdict + "; p99 ≤ 1.2: " + l.verdict;
    add_figure(run, t);
    add_figure(run, l);
    run.rows.push_back(clean.tput);
    run.rows.push_back(bad.tput);
    reset_outbox(b.pg, b.run);
    b.phase("F");
}

} // namespace bench
