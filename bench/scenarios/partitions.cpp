// Q: one partitioned subscriber (consumer.partitions = --part-partitions) run as 1, 2 and 4
// instances (threads, each its own outbox_consumer with its own broker and database connections,
// through the public C API), a handler that sleeps --part-handler-ms and writes one effect row in
// the consumer's transaction (its session with synchronous_commit=off), --part-events events over
// --part-aggregates aggregates published by the relay before the instances start. Timed from starting the instances to
// the last effect. Checks: every event's effect exactly once, and per aggregate the effects applied in seq order with
// nothing skipped (first deliveries; the effect row is only written on a first delivery). Targets: 2 instances >= 1.8 x
// 1, 4 instances >= 3 x 1 (ratios of the same run).
#include "../scenarios.hpp"

#include "../support/config.hpp"
#include "../support/relay.hpp"

#include <outbox.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

namespace bench {

namespace {

struct Shared {
    std::string name;
    std::string insert;
    int handler_ms = 2;
    std::atomic<long> handled{0};
};

struct Instance {
    Shared *shared = nullptr;
    std::string id;
    outbox_config *cfg = nullptr;
    outbox_consumer *c = nullptr;
    outbox_status st = OUTBOX_OK;
    std::string error;
};

int handle(outbox_db *tx, const outbox_message *m, void *user_data) {
    auto *in = static_cast<Instance *>(user_data);
    std::this_thread::sleep_for(std::chrono::milliseconds(in->shared->handler_ms));
    const char *seq = outbox_message_property(m, "outbox-seq");
    const char *vals[] = {outbox_message_field(m, "OUTBOX_ID"), outbox_message_field(m, "AGGREGATE_ID"),
                          seq != nullptr ? seq : "0", in->id.c_str()};
    PGresult *r = PQexecParams(static_cast<PGconn *>(outbox_db_pgconn(tx)), in->shared->insert.c_str(), 4, nullptr,
                               vals, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) {
        outbox_handler_error(PQresultErrorMessage(r));
    }
    PQclear(r);
    if (!ok) {
        return 1;
    }
    ++in->shared->handled;
    return 0;
}

outbox_config *part_config(const Run &run, const Options &o, const std::string &instance) {
    return consumer_config(run, {{"outbox.schema", run.schema},
                                 // The consumers' commits without waiting for the WAL flush, so the 2 ms
                                 // handler is what each event costs (as in the C++ tests); atomicity
                                 // and visibility are unchanged.
                                 {"pg.url", with_options(run.pg_url, "-c synchronous_commit=off")},
                                 {"consumer.queue_type", "quorum"},
                                 {"consumer.partitions", std::to_string(o.part_partitions)},
                                 {"consumer.instance", instance},
                                 {"consumer.lease_ms", "2000"}});
}

void remove_topology(Bench &b, const std::string &name) {
    for (int i = 0; i < b.o.part_partitions; ++i) {
        b.admin.delete_queue(name + ".p" + std::to_string(i));
    }
    b.admin.delete_queue(name + ".dead");
    b.admin.delete_exchange(name + ".dlx");
    b.admin.delete_exchange(name + ".partitions");
}

// One instance count: declare the subscriber, publish the backlog through the relay, run k
// instances until every effect is there; its row, checked. A later attempt of the judging uses a
// subscriber of its own (attempt in its name), so its inbox and effects start empty.
Row part_point(Bench &b, long k, int attempt) {
    Run &run = b.run;
    const Options &o = b.o;
    const std::string key = "Q-" + std::to_string(k);
    Shared sh;
    sh.name = "bench-q" + std::to_string(k) + (attempt > 1 ? "a" + std::to_string(attempt) : "") + "-" + run.exchange;
    sh.handler_ms = o.part_handler_ms;
    const std::string effects = table_of(run, "bench_part_effects");
    sh.insert = "INSERT INTO " + effects + " (consumer, outbox_id, aggregate, seq, instance) VALUES ('" + sh.name +
                "', $1, $2, CAST($3 AS bigint), $4)";
    {
        // The topology exists before the relay publishes; the set-up instance leaves again.
        outbox_config *cfg = part_config(run, o, "setup");
        outbox_consumer *c = nullptr;
        if (outbox_consumer_new(&c, cfg, sh.name.c_str()) != OUTBOX_OK || outbox_consumer_connect(c) != OUTBOX_OK) {
            throw std::runtime_error("Q: " + std::string(outbox_last_error()));
        }
        outbox_consumer_free(c);
        outbox_config_free(cfg);
    }
    const Generator g = b.events(static_cast<uint16_t>(0x0200 + k), 'q', o.part_events, o.part_aggregates);
    progress(key + ": " + std::to_string(g.count) + " events over " + std::to_string(g.aggregates) +
             " aggregates, published by the relay");
    b.load(g);
    (void)run_relay(run, o, g, b.pg, o.batch_size, o.window, key + "-relay");
    b.admin.purge(run.queue);

    progress(key + ": " + std::to_string(k) + " instance(s), " + std::to_string(o.part_partitions) +
             " partitions, handler " + std::to_string(o.part_handler_ms) + " ms");
    std::vector<std::unique_ptr<Instance>> ins;
    for (long i = 0; i < k; ++i) {
        auto in = std::make_unique<Instance>();
        in->shared = &sh;
        in->id = "i" + std::to_string(i);
        in->cfg = part_config(run, o, in->id);
        if (outbox_consumer_new(&in->c, in->cfg, sh.name.c_str()) != OUTBOX_OK ||
            outbox_consumer_connect(in->c) != OUTBOX_OK) {
            throw std::runtime_error("Q: " + std::string(outbox_last_error()));
        }
        ins.push_back(std::move(in));
    }
    // Every instance is a member now; each takes up its share at its first heartbeat in run.
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const CpuTimes machine0 = cpu_times();
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (auto &in : ins) {
        Instance *p = in.get();
        threads.emplace_back([p] {
            p->st = outbox_consumer_run(p->c, nullptr, handle, p);
            if (p->st != OUTBOX_OK) {
                p->error = outbox_last_error();
            }
        });
    }
    long last = -1;
    auto last_progress = Clock::now();
    bool stalled = false;
    while (sh.handled.load() < g.count && !g_interrupted.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        const long now = sh.handled.load();
        if (now != last) {
            last = now;
            last_progress = Clock::now();
        } else if (seconds_between(last_progress, Clock::now()) > 30) {
            stalled = true;
            break;
        }
    }
    const double seconds = seconds_between(t0, Clock::now());
    const double steal = steal_share(machine0, cpu_times());
    for (auto &in : ins) {
        outbox_consumer_stop(in->c);
    }
    for (auto &t : threads) {
        t.join();
    }
    for (auto &in : ins) {
        expect(run, in->st == OUTBOX_OK, key + ": instance " + in->id + " ran without error " + in->error);
        outbox_consumer_free(in->c);
        outbox_config_free(in->cfg);
    }
    check_interrupt();
    expect(run, !stalled,
           key + ": no 30 s without progress (" + std::to_string(sh.handled.load()) + " of " + std::to_string(g.count) +
               ")");
    auto once =
        b.pg.query("SELECT count(*), count(DISTINCT outbox_id) FROM " + effects + " WHERE consumer = $1", {sh.name});
    const bool exactly_once = once->get_ll(0, 0) == g.count && once->get_ll(0, 1) == g.count;
    expect(run, exactly_once,
           key + ": every effect exactly once (" + once->get(0, 0) + " effects, " + once->get(0, 1) + " distinct)");
    auto order = b.pg.query(
        "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY aggregate ORDER BY n) AS prev FROM " + effects +
            " WHERE consumer = $1) x WHERE (prev IS NULL AND seq <> 1) OR (prev IS NOT NULL AND seq <> prev + 1)",
        {sh.name});
    const long violations = order->get_ll(0, 0);
    expect(run, violations == 0,
           key + ": per-aggregate order in first deliveries (" + std::to_string(violations) + " violations)");
    remove_topology(b, sh.name);

    Row r;
    r.key = key;
    r.what = std::to_string(k) + " instance(s) of one partitioned subscriber (" + std::to_string(o.part_partitions) +
             " partitions, handler " + std::to_string(o.part_handler_ms) + " ms, synchronous_commit=off)";
    r.events = g.count;
    r.seconds = seconds;
    r.steal = steal;
    r.extra = Json::object()
                  .integer("instances", k)
                  .integer("order_violations", violations)
                  .boolean("exactly_once", exactly_once);
    return r;
}

constexpr long kInstances[] = {1, 2, 4};

// One attempt of Q: the subscriber at 1, 2 and 4 instances (rows keyed whichever
// attempt is kept).
std::vector<Row> part_points(Bench &b, int attempt) {
    std::vector<Row> rows;
    for (long k : kInstances) {
        rows.push_back(part_point(b, k, attempt));
    }
    return rows;
}

// The effects table and the inbox the instances write.
void prepare_effects(Bench &b) {
    b.pg.exec("CREATE TABLE IF NOT EXISTS " + table_of(b.run, "bench_part_effects") +
              " (n bigserial PRIMARY KEY, consumer text NOT NULL, outbox_id text NOT NULL, aggregate text NOT NULL,"
              " seq bigint NOT NULL, instance text NOT NULL)");
    outbox_config *cfg = part_config(b.run, b.o, "setup");
    outbox_db *db = nullptr;
    if (outbox_db_open(&db, b.run.pg_url.c_str(), cfg) != OUTBOX_OK ||
        outbox_migrate(nullptr, db, OUTBOX_MIGRATE_INBOX) != OUTBOX_OK) {
        throw std::runtime_error(std::string("Q: ") + outbox_last_error());
    }
    outbox_db_close(db);
    outbox_config_free(cfg);
}

} // namespace

void scenario_partitions(Bench &b) {
    Run &run = b.run;
    prepare_effects(b);
    // The three instance counts are the sides of both figures: judged together.
    const auto q = measure_quiet<std::vector<Row>>(
        "Q-2, Q-4 vs Q-1", quiet_rule(b.o), [&](int attempt) { return part_points(b, attempt); }, steals);
    Json series = Json::array();
    const Row &one = q.value[0];
    for (size_t i = 0; i < q.value.size(); ++i) {
        Row r = q.value[i];
        const long k = kInstances[i];
        Figure f;
        f.section = "9 partitioned subscriber";
        f.name = std::to_string(k) + " instance(s): throughput, effects exactly once, per-aggregate order";
        f.value = rate_str(r.rate());
        if (k > 1) {
            const double want = k == 2 ? 1.8 : 3.0;
            r.ratio_value = one.rate() > 0 ? r.rate() / one.rate() : -1;
            r.ratio = "Q-" + std::to_string(k) + "/Q-1 = " + fixed(r.ratio_value, 2);
            f.baseline = "1 instance " + rate_str(one.rate());
            f.ratio = r.ratio_value;
            f.target = "≥ " + fixed(want, 1);
            judge(f, q.how, r.ratio_value >= want, r.steal, one.steal);
            r.target = f.target + ": " + f.verdict;
        }
        series.push(Json::object().integer("instances", k).num("events_per_s", r.rate(), 1));
        add_figure(run, f);
        run.rows.push_back(r);
    }
    b.run.series["partitions"] = series;
    reset_outbox(b.pg, b.run);
    b.phase("Q");
}

} // namespace bench
