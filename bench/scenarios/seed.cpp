// S, S-sleep: the documents' publishPendingEvents loop on a backlog of --seed-events: SELECT ...
// WHERE status='PENDING' ORDER BY created_at LIMIT 100, then per event basic.publish (persistent,
// no confirms) and an autocommit UPDATE. S without the documents' sleep(1), S-sleep with it, for
// 10 s (5 s with --quick) on a backlog it cannot finish in that time. Target: relay >= 10 x S-sleep.
// The loop marks events by UPDATE, so it runs on a table shaped as the documents' (status and
// published_at columns, an index on (status, created_at)), filled with the same backlog: the
// library's own events are written once and never updated (storage version 2).
#include "../scenarios.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace bench {

namespace {

// The documents' OUTBOX table, holding the backlog just loaded into the library's events table.
std::string seed_table(const Run &run, Pg &pg) {
    const std::string t = table_of(run, "seed_outbox");
    pg.exec("DROP TABLE IF EXISTS " + t);
    pg.exec("CREATE TABLE " + t +
            " AS SELECT outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, metadata, actor,"
            " created_at, CAST('PENDING' AS text) AS status, 0 AS retry_count, CAST(NULL AS timestamptz) AS"
            " published_at, CAST(NULL AS text) AS error_message FROM " +
            table_of(run, "outbox_events") + " ORDER BY position");
    pg.exec("ALTER TABLE " + t + " ADD PRIMARY KEY (outbox_id)");
    pg.exec("CREATE INDEX ON " + t + " (status, created_at)");
    pg.exec("VACUUM ANALYZE " + t);
    return t;
}

// The documents' loop. With sleep_s > 0 it sleeps that long after each poll, as written, and stops
// after limit_s seconds (the backlog is larger than it can drain by then); its rate is what it did.
struct SeedLoop {
    std::string key = "S";
    double sleep_s = 0;
    double limit_s = 0;
    int attempt = 1; // of its figure's judging: names its prepared statements apart from earlier ones'
};

Row run_seed_loop(Run &run, const Generator &g, Pg &pg, const SeedLoop &loop) {
    progress(loop.key + ": seed-style loop (publish + UPDATE per event, no confirms" +
             (loop.sleep_s > 0
                  ? ", sleep " + fixed(loop.sleep_s, 1) + " s per poll, for " + fixed(loop.limit_s, 0) + " s"
                  : std::string()) +
             "), " + std::to_string(g.count) + " events");
    Amqp mq(run.amqp_url, 30);
    const std::string t = seed_table(run, pg);
    const std::string select_name = "seed_select " + loop.key + " " + std::to_string(loop.attempt);
    const std::string update_name = "seed_update " + loop.key + " " + std::to_string(loop.attempt);
    // The documents: SELECT * FROM OUTBOX WHERE STATUS = 'PENDING' ORDER BY CREATED_AT ASC LIMIT 100, then
    // per event publish and UPDATE ... SET STATUS = 'PUBLISHED', PUBLISHED_AT = ... WHERE OUTBOX_ID = ?.
    pg.prepare(select_name.c_str(),
               "SELECT outbox_id, event_type, aggregate_type, aggregate_id, operation, payload, metadata, actor,"
               " to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS'), seq, retry_count, status FROM " +
                   t + " WHERE status = 'PENDING' ORDER BY created_at ASC LIMIT 100",
               0);
    pg.prepare(update_name.c_str(),
               "UPDATE " + t + " SET status = 'PUBLISHED', published_at = now() WHERE outbox_id = $1", 1);
    std::string body;
    const std::string exchange = run.exchange;
    long done = 0;
    long polls = 0;
    const double cpu0 = cpu_seconds();
    const CpuTimes machine0 = cpu_times();
    const auto t0 = Clock::now();
    while (true) {
        if (loop.limit_s > 0 && seconds_between(t0, Clock::now()) >= loop.limit_s) {
            break;
        }
        auto rows = pg.exec_prepared(select_name.c_str(), {});
        ++polls;
        if (rows->rows() == 0) {
            break;
        }
        for (int k = 0; k < rows->rows(); ++k) {
            const std::string id = rows->get(k, 0);
            const std::string et = rows->get(k, 1);
            const std::string at = rows->get(k, 2);
            envelope(body, id, et.c_str(), rows->get(k, 3), at.c_str(), rows->get(k, 4).c_str(), rows->get(k, 5),
                     PQgetvalue(rows->raw(), k, 6), PQgetvalue(rows->raw(), k, 7), rows->get(k, 8));
            amqp_basic_properties_t p{};
            p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
            p.content_type = amqp_cstring_bytes("application/json");
            p.delivery_mode = 2;
            std::string rk = at + "." + rows->get(k, 4);
            std::transform(rk.begin(), rk.end(), rk.begin(),
                           [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); });
            const int rc =
                amqp_basic_publish(mq.raw(), kChannel, bytes_of(exchange), bytes_of(rk), 0, 0, &p, bytes_of(body));
            if (rc != AMQP_STATUS_OK) {
                die(std::string("S: publish: ") + amqp_error_string2(rc));
            }
            pg.exec_prepared(update_name.c_str(), {PQgetvalue(rows->raw(), k, 0)});
            ++done;
        }
        check_interrupt();
        if (loop.sleep_s > 0) {
            std::this_thread::sleep_for(std::chrono::duration<double>(loop.sleep_s));
        }
    }
    const double secs = seconds_between(t0, Clock::now());
    const double cpu = cpu_seconds() - cpu0;
    const double steal = steal_share(machine0, cpu_times());
    // No confirms: nothing says the broker has them yet. Give it a moment before checking.
    Amqp admin(run.amqp_url, 0);
    uint32_t n = 0;
    for (int k = 0; k < 100 && (n = admin.count(run.queue)) < static_cast<uint32_t>(done); ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (loop.limit_s > 0) {
        expect(run, done > 0 && done < g.count,
               loop.key + ": published part of a backlog larger than the time allows (" + std::to_string(done) +
                   " of " + std::to_string(g.count) + ")");
    } else {
        expect(run, done == g.count, loop.key + ": published and marked every event (" + std::to_string(done) + ")");
    }
    expect(run, n == static_cast<uint32_t>(done),
           loop.key + ": the queue holds " + std::to_string(done) + " messages (" + std::to_string(n) + ")");
    pg.exec("DROP TABLE " + t);
    Row r;
    r.key = loop.key;
    r.what = loop.sleep_s > 0 ? "seed-style loop as written: SELECT 100, publish + UPDATE per event, sleep 1 s per poll"
                              : "seed-style loop: SELECT 100, publish + UPDATE per event, no confirms, no sleep";
    r.events = done;
    r.seconds = secs;
    r.extra = Json::object().integer("polls", polls);
    r.client_cpu_s = cpu;
    r.steal = steal;
    return r;
}

// A row of S or S-sleep against the main drain of D, with its figure; judged by `how` when given.
void seed_figure(Bench &b, Row &row, Figure f, const Judging *how) {
    f.section = "2 seed-style contrast";
    f.value = rate_str(row.rate());
    if (const Row *rr = b.main_drain()) {
        row.ratio_value = rr->rate() / row.rate();
        row.ratio = rr->key + "/" + row.key + " = " + fixed(row.ratio_value, 1);
        f.baseline = rr->key + " " + rate_str(rr->rate());
        f.ratio = row.ratio_value;
        if (how != nullptr) {
            f.target = "relay/loop ≥ 10";
            judge(f, *how, f.ratio >= 10, row.steal, rr->steal);
            row.target = "relay/loop ≥ 10: " + f.verdict;
        }
    }
    add_figure(b.run, f);
    b.run.rows.push_back(row);
    b.admin.purge(b.run.queue);
}

// S-sleep: the loop as written, with its 1 s sleep per poll, measured for a bounded time on a
// backlog it cannot finish in that time. Its pair is D's main drain and this loop; the drain is
// D's own figure and not measured again here: while it was quiet only the loop is measured again,
// and when it was noisy the figure has one attempt.
Quiet<Row> sleep_loop(Bench &b) {
    SeedLoop written;
    written.key = "S-sleep";
    written.sleep_s = 1.0;
    written.limit_s = b.o.quick ? 5.0 : 10.0;
    const long n = static_cast<long>(100 * (written.limit_s + 3));
    const Generator gw = b.events(0x0004, 'w', n, n);
    const Row *drain = b.main_drain();
    const double drain_steal = drain != nullptr ? drain->steal : -1;
    QuietRule rule = quiet_rule(b.o);
    rule.retry = rule.retry && quiet_sides(rule, {drain_steal});
    return measure_quiet<Row>(
        "S-sleep vs " + (drain != nullptr ? drain->key : std::string("no drain")), rule,
        [&](int attempt) {
            progress("S-sleep: loading the backlog");
            b.load(gw);
            b.admin.purge(b.run.queue);
            written.attempt = attempt;
            return run_seed_loop(b.run, gw, b.pg, written);
        },
        [&](const Row &r) {
            return std::vector<double>{drain_steal, r.steal};
        });
}

} // namespace

void scenario_seed(Bench &b) {
    const Generator gs = b.events(0x0003, 's', b.o.seed_events, b.o.seed_events);
    progress("S: loading the backlog");
    b.load(gs);
    Row s = run_seed_loop(b.run, gs, b.pg, SeedLoop{});
    Figure f;
    f.name = "the documents' loop without its sleep (publish + UPDATE per event)";
    seed_figure(b, s, f, nullptr);
    b.phase("S");

    auto q = sleep_loop(b);
    Figure f2;
    f2.name = "the documents' loop as written (sleep 1 s per poll of 100), " + fixed(b.o.quick ? 5.0 : 10.0, 0) + " s";
    seed_figure(b, q.value, f2, &q.how);
    b.phase("S-sleep");
}

} // namespace bench
