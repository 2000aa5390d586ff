// C: the consumer runtime (public C API) handling --consume-events messages, each in its own
// transaction with one effect row, with outbox_consumer_dedupe_message in that transaction
// (outbox_consumer_begin: BEGIN + dedupe in one round trip) and without; interleaved plain, dedupe,
// dedupe, plain. Target: dedupe >= 0.8 x plain.
#include "../scenarios.hpp"

#include "../support/config.hpp"

#include <outbox.h>

#include <stdexcept>

namespace bench {

// One consumer draining `count` messages: per message BEGIN [+ dedupe], one effect row, COMMIT, ack.
Row run_consumer(Run &run, const std::string &name, long count, bool dedupe) {
    outbox_config *cfg = consumer_config(run, {{"outbox.schema", run.schema}, {"consumer.prefetch", "256"}});
    outbox_db *db = nullptr;
    outbox_consumer *c = nullptr;
    if (outbox_db_open(&db, run.pg_url.c_str(), cfg) != OUTBOX_OK ||
        outbox_consumer_new(&c, cfg, name.c_str()) != OUTBOX_OK ||
        outbox_migrate(nullptr, db, OUTBOX_MIGRATE_INBOX) != OUTBOX_OK) {
        throw std::runtime_error(std::string("C: ") + outbox_last_error());
    }
    const std::string effect =
        "INSERT INTO " + table_of(run, "bench_effects") + " (consumer, outbox_id) VALUES ($1, $2)";
    auto *pg = static_cast<PGconn *>(outbox_db_pgconn(db));
    long handled = 0;
    const double cpu0 = cpu_seconds();
    const CpuTimes machine0 = cpu_times();
    const auto t0 = Clock::now();
    while (handled < count) {
        check_interrupt();
        outbox_message *m = nullptr;
        outbox_status st = outbox_consumer_next(&m, c, 5000);
        if (st != OUTBOX_OK) {
            throw std::runtime_error("C: " + name + " got " + std::to_string(handled) + " of " + std::to_string(count) +
                                     ": " + outbox_last_error());
        }
        bool first = true;
        if (dedupe) {
            // The library's fast path: BEGIN and the dedupe statement in one round trip.
            outbox_dedupe_result r;
            outbox_dedupe_result_init(&r);
            if (outbox_consumer_begin(&r, db, c, m) != OUTBOX_OK) {
                throw std::runtime_error(std::string("C: dedupe: ") + outbox_last_error());
            }
            first = r.first_time != 0;
        } else {
            outbox_db_exec(db, "BEGIN");
        }
        if (first) {
            const char *vals[] = {name.c_str(), outbox_message_field(m, "OUTBOX_ID")};
            PQclear(PQexecParams(pg, effect.c_str(), 2, nullptr, vals, nullptr, nullptr, 0));
        }
        if (outbox_db_exec(db, "COMMIT") != OUTBOX_OK || outbox_consumer_ack(c, m) != OUTBOX_OK) {
            throw std::runtime_error(std::string("C: ") + outbox_last_error());
        }
        outbox_message_free(m);
        ++handled;
    }
    Row r;
    r.seconds = seconds_between(t0, Clock::now());
    r.client_cpu_s = cpu_seconds() - cpu0;
    r.steal = steal_share(machine0, cpu_times());
    r.events = handled;
    outbox_consumer_free(c);
    outbox_db_close(db);
    outbox_config_free(cfg);
    return r;
}

namespace {

// Declares both consumers' queues (bound to the exchange) before one publish reaches them both.
void declare_consumer_queues(const Run &run, const std::string (&names)[2]) {
    for (const auto &n : names) {
        outbox_config *cfg = consumer_config(run, {});
        outbox_consumer *c = nullptr;
        outbox_consumer_new(&c, cfg, n.c_str());
        if (outbox_consumer_connect(c) != OUTBOX_OK) {
            throw std::runtime_error(std::string("C: ") + outbox_last_error());
        }
        outbox_consumer_free(c);
        outbox_config_free(cfg);
    }
}

// The two halves of one consumer's messages as one row (its steal: the halves' by their time).
Row joined(Row a, const Row &b, const char *key, const char *what) {
    const double t = a.seconds + b.seconds;
    a.steal = a.steal >= 0 && b.steal >= 0 && t > 0 ? (a.steal * a.seconds + b.steal * b.seconds) / t : -1;
    a.events += b.events;
    a.seconds += b.seconds;
    a.client_cpu_s += b.client_cpu_s;
    a.key = key;
    a.what = what;
    return a;
}

// One attempt of C's pair: messages published into both consumers' queues (new ones each attempt,
// so the dedupe consumer sees each once), then interleaved plain, dedupe, dedupe, plain (half the
// messages each time), so drift in the machine's load hits both alike; every effect checked.
std::vector<Row> consumer_pair(Bench &b, const std::string (&names)[2], int attempt) {
    Run &run = b.run;
    const auto code = static_cast<uint16_t>(attempt == 1 ? 0x0004 : 0x0110 + attempt);
    const Generator gc = b.events(code, 'c', b.o.consume_events, b.o.consume_events);
    b.pg.exec("TRUNCATE " + table_of(run, "bench_effects"));
    publish_baseline(run, b.o, gc);
    b.admin.purge(run.queue);
    b.pg.exec("CHECKPOINT");
    const long first_half = gc.count / 2;
    Row p1 = run_consumer(run, names[1], first_half, false);
    Row d1 = run_consumer(run, names[0], first_half, true);
    Row d2 = run_consumer(run, names[0], gc.count - first_half, true);
    Row p2 = run_consumer(run, names[1], gc.count - first_half, false);
    auto effects = b.pg.query("SELECT count(DISTINCT outbox_id) FROM " + table_of(run, "bench_effects"));
    expect(run, effects->get(0, 0) == std::to_string(gc.count),
           "C: every message had its effect (" + effects->get(0, 0) + " distinct)");
    return {joined(p1, p2, "C-plain", "C: consumer runtime, one transaction per message, without dedupe"),
            joined(d1, d2, "C-dedupe",
                   "C: the same consumer opening its transaction with outbox_consumer_begin (BEGIN + dedupe, one "
                   "round trip)")};
}

} // namespace

void scenario_consumer(Bench &b) {
    Run &run = b.run;
    progress("C: two consumers (with and without dedupe), " + std::to_string(b.o.consume_events) + " messages each");
    b.pg.exec("CREATE TABLE IF NOT EXISTS " + table_of(run, "bench_effects") +
              " (consumer text NOT NULL, outbox_id text NOT NULL)");
    const std::string names[2] = {"bench-dedupe-" + run.exchange, "bench-plain-" + run.exchange};
    declare_consumer_queues(run, names);
    const auto q = measure_quiet<std::vector<Row>>(
        "C-dedupe vs C-plain", quiet_rule(b.o), [&](int attempt) { return consumer_pair(b, names, attempt); }, steals);
    const Row &plain = q.value[0];
    Row dd = q.value[1];
    dd.ratio_value = dd.rate() / plain.rate();
    dd.ratio = "dedupe/plain = " + fixed(dd.ratio_value, 2);
    Figure f;
    f.section = "6 consumer";
    f.name = "consumer with dedupe in the handler's transaction";
    f.value = rate_str(dd.rate());
    f.baseline = "the same consumer without dedupe " + rate_str(plain.rate());
    f.ratio = dd.ratio_value;
    f.target = "≥ 0.8";
    judge(f, q.how, dd.ratio_value >= 0.8, dd.steal, plain.steal);
    dd.target = "≥ 0.8: " + f.verdict;
    add_figure(run, f);
    run.rows.push_back(plain);
    run.rows.push_back(dd);
    for (const auto &n : names) {
        b.admin.delete_queue(n);
        b.admin.delete_queue(n + ".dead");
    }
    b.phase("C");
}

} // namespace bench
