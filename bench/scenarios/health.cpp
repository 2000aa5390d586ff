// H: table health. For --health-minutes, writers at 50% of the maximum rate (L's, or measured for
// 3 s first) over health_aggregates aggregates, one `outbox relay` daemon, two competing consumers
// of one queue deduplicating every event in its transaction, and every health_purge_s
// outbox_purge_published and outbox_inbox_purge of rows older than --health-age-s. Samples the size
// and live/dead tuples of the four tables every health_sample_s. Verdict per table: mean size over
// the last third of the steady samples vs the first third, <= 1.10 (issue 19) (given for runs >= 10 minutes).
#include "../scenarios.hpp"

#include "../support/config.hpp"
#include "../support/proc.hpp"
#include "../support/writers.hpp"

#include <outbox.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace bench {

namespace {

// Storage version 2: the events (partitioned; dropped a partition at a time) and the relay's
// receipts (deleted with the partitions they cover) next to the counters and the inbox.
constexpr const char *kTables[] = {"outbox_events", "outbox_receipts", "outbox_aggregates", "outbox_inbox",
                                   "outbox_inbox_positions"};

struct TableSample {
    double t = 0;
    std::map<std::string, std::array<long long, 3>> tables; // name -> size bytes, live, dead
};

// The consumers and the purger of H, in threads of their own until stop().
class Background {
  public:
    Background(const Run &run, const Options &o, outbox_config *cfg, std::string cname)
        : run_(run), o_(o), cfg_(cfg), cname_(std::move(cname)) {
        // Two competing consumers of the one queue (same consumer name, so one inbox): a single one
        // handling one transaction per event falls behind 50% of the relay's rate on 2 cores.
        consumers_.start([this] {
            std::thread second([this] { consume(); });
            consume();
            second.join();
        });
        purger_.start([this] { purge(); });
    }

    void stop() {
        consumers_.stop();
        purger_.stop();
    }
    void fail(const std::string &msg) {
        std::lock_guard<std::mutex> lock(mu_);
        if (consumer_error_.empty()) {
            consumer_error_ = msg;
        }
        failed_.store(true);
    }
    [[nodiscard]] bool failed() const { return failed_.load() || !purge_error_.empty(); }
    std::string error() {
        std::lock_guard<std::mutex> lock(mu_);
        return consumer_error_ + purge_error_;
    }
    [[nodiscard]] long handled() const { return handled_.load(); }
    [[nodiscard]] bool consumers_failed() const { return failed_.load(); }
    std::atomic<long long> purged_outbox{0}, purged_inbox{0};

  private:
    void consume() {
        outbox_db *db = nullptr;
        outbox_consumer *c = nullptr;
        if (outbox_db_open(&db, run_.pg_url.c_str(), cfg_) != OUTBOX_OK ||
            outbox_consumer_new(&c, cfg_, cname_.c_str()) != OUTBOX_OK) {
            fail(outbox_last_error());
        }
        while (!failed_.load() && !consumers_.stopping()) {
            outbox_message *m = nullptr;
            const outbox_status st = outbox_consumer_next(&m, c, 200);
            if (st == OUTBOX_ERR_TIMEOUT) {
                continue;
            }
            outbox_dedupe_result r;
            outbox_dedupe_result_init(&r);
            if (st != OUTBOX_OK || outbox_consumer_begin(&r, db, c, m) != OUTBOX_OK ||
                outbox_db_exec(db, "COMMIT") != OUTBOX_OK || outbox_consumer_ack(c, m) != OUTBOX_OK) {
                fail(outbox_last_error());
            }
            outbox_message_free(m);
            handled_.fetch_add(1);
        }
        outbox_consumer_free(c);
        outbox_db_close(db);
    }
    void purge() {
        outbox_db *db = nullptr;
        if (outbox_db_open(&db, run_.pg_url.c_str(), cfg_) != OUTBOX_OK) {
            purge_error_ = outbox_last_error();
            return;
        }
        auto next = Clock::now();
        while (!purger_.stopping() && purge_error_.empty()) {
            next += std::chrono::milliseconds(static_cast<int64_t>(o_.health_purge_s * 1000));
            while (!purger_.stopping() && Clock::now() < next) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
            int64_t n1 = 0, n2 = 0;
            if (outbox_purge_published(&n1, db, o_.health_age_s, 5000) != OUTBOX_OK ||
                outbox_inbox_purge(&n2, db, o_.health_age_s, 5000) != OUTBOX_OK) {
                purge_error_ = outbox_last_error();
            }
            purged_outbox.fetch_add(n1);
            purged_inbox.fetch_add(n2);
        }
        outbox_db_close(db);
    }

    const Run &run_;
    const Options &o_;
    outbox_config *cfg_;
    std::string cname_;
    std::atomic<bool> failed_{false};
    std::atomic<long> handled_{0};
    std::mutex mu_;
    std::string consumer_error_, purge_error_;
    Worker consumers_, purger_; // last: joined before the rest goes
};

// Samples the four tables' sizes while the writers write, and once more when they have stopped.
std::vector<TableSample> sample_tables(Bench &b, const Daemon &daemon, const std::atomic<bool> &writing) {
    // Sizes summed over each table's partitions (the inbox is partitioned; the others are one each).
    const std::string q =
        "SELECT c.relname, sum(pg_total_relation_size(coalesce(t.relid, c.oid))), coalesce(sum(s.n_live_tup), 0),"
        " coalesce(sum(s.n_dead_tup), 0) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        // pg_partition_tree() gives no row for a table outside any partition tree: the table itself.
        " LEFT JOIN LATERAL pg_partition_tree(c.oid) t ON true"
        " LEFT JOIN pg_stat_user_tables s ON s.relid = coalesce(t.relid, c.oid)"
        " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND c.relname IN"
        " ('outbox_events', 'outbox_receipts', 'outbox_aggregates', 'outbox_inbox', 'outbox_inbox_positions')"
        " GROUP BY c.relname ORDER BY 1";
    std::vector<TableSample> samples;
    const auto t0 = Clock::now();
    auto sample = [&] {
        TableSample ts;
        ts.t = seconds_between(t0, Clock::now());
        auto r = b.pg.query(q, {b.run.schema});
        for (int i = 0; i < r->rows(); ++i) {
            ts.tables[r->get(i, 0)] = {r->get_ll(i, 1), r->get_ll(i, 2), r->get_ll(i, 3)};
        }
        samples.push_back(ts);
    };
    auto next = t0;
    bool relay_alive = true;
    while (writing.load()) {
        relay_alive = relay_alive && daemon_alive(daemon);
        sample();
        next += std::chrono::milliseconds(static_cast<int64_t>(b.o.health_sample_s * 1000));
        while (writing.load() && Clock::now() < next) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    if (!relay_alive) {
        require_alive(daemon); // says why
    }
    sample();
    return samples;
}

// The figure of one table: mean size over the last third of the steady samples vs the first third.
// False when it grew (a ratio over 1.10).
bool table_figure(Bench &b, const char *name, const std::vector<TableSample> &samples, double warm, Json &tables) {
    std::vector<const TableSample *> steady;
    for (const auto &s : samples) {
        if (s.t >= warm) {
            steady.push_back(&s);
        }
    }
    std::vector<double> size, live, dead;
    for (const auto &s : samples) {
        auto it = s.tables.find(name);
        size.push_back(it == s.tables.end() ? 0 : static_cast<double>(it->second[0]));
        live.push_back(it == s.tables.end() ? 0 : static_cast<double>(it->second[1]));
        dead.push_back(it == s.tables.end() ? 0 : static_cast<double>(it->second[2]));
    }
    tables.set(name, Json::object()
                         .set("size_bytes", Json::numbers(size, 0))
                         .set("live", Json::numbers(live, 0))
                         .set("dead", Json::numbers(dead, 0)));
    double ratio = -1;
    if (steady.size() >= 6) {
        const size_t third = steady.size() / 3;
        double a = 0, z = 0;
        for (size_t i = 0; i < third; ++i) {
            auto f = steady[i]->tables.find(name);
            auto l = steady[steady.size() - 1 - i]->tables.find(name);
            a += f == steady[i]->tables.end() ? 0 : static_cast<double>(f->second[0]);
            z += l == steady[steady.size() - 1 - i]->tables.end() ? 0 : static_cast<double>(l->second[0]);
        }
        ratio = a > 0 ? z / a : -1;
    }
    const bool is_positions =
        std::strcmp(name, "outbox_aggregates") == 0 || std::strcmp(name, "outbox_inbox_positions") == 0;
    Figure f;
    f.section = "8 table health";
    f.name = std::string(name) + " total size, last third vs first third of the steady state";
    f.value = fixed(size.empty() ? 0 : size.back() / 1048576.0, 1) + " MiB at the end, " +
              fixed(dead.empty() ? 0 : dead.back(), 0) + " dead tuples";
    f.ratio = ratio;
    f.baseline = ratio >= 0 ? "first third of the same run" : "too few samples after warm-up";
    f.target =
        is_positions ? "≤ 1.10 (bounded by " + std::to_string(b.o.health_aggregates) + " aggregates)" : "≤ 1.10 (flat)";
    f.verdict = ratio >= 0 ? verdict(ratio <= 1.10) : "";
    // Autovacuum visits a table about once a minute (autovacuum_naptime), so between visits the dead
    // rows of purged and published events pile up: a run of a few minutes sees one or two teeth of
    // that saw, not whether it is flat.
    if (b.o.health_minutes < 10) {
        f.target += ": judged only over >= 10 min (--only H --health-minutes 30)";
        f.verdict = "";
    }
    add_figure(b.run, f);
    return !(ratio >= 0 && ratio > 1.10);
}

// The consumers' configuration, with the inbox migrated and their queue declared.
outbox_config *health_setup(Bench &b, const std::string &cname, long partition_events, outbox_db *&admin_db) {
    const Run &run = b.run;
    outbox_config *cfg = consumer_config(run, {{"outbox.schema", run.schema},
                                               {"consumer.prefetch", "256"},
                                               {"inbox.retention_s", std::to_string(b.o.health_age_s)},
                                               // Minute partitions, so that a retention of seconds
                                               // drops partitions within the run.
                                               {"inbox.partition_s", "60"},
                                               {"outbox.partition_events", std::to_string(partition_events)},
                                               {"relay.notify_channel", run.channel}});
    // An inbox an earlier scenario migrated has its dated partitions made ahead at the default
    // width: dropped, so that the migrate below makes them by the minute from now on.
    if (b.pg.query("SELECT to_regclass($1) IS NOT NULL", {table_of(run, "outbox_inbox")})->get(0, 0) == "t") {
        auto parts = b.pg.query("SELECT CAST(inhrelid AS regclass) FROM pg_inherits WHERE inhparent = CAST($1 AS"
                                " regclass) AND CAST(inhrelid AS regclass)::text NOT LIKE '%\\_before%'"
                                " AND CAST(inhrelid AS regclass)::text NOT LIKE '%\\_default%'",
                                {table_of(run, "outbox_inbox")});
        for (int i = 0; i < parts->rows(); ++i) {
            b.pg.exec("DROP TABLE " + parts->get(i, 0));
        }
    }
    if (outbox_db_open(&admin_db, run.pg_url.c_str(), cfg) != OUTBOX_OK ||
        outbox_migrate(nullptr, admin_db, OUTBOX_MIGRATE_INBOX) != OUTBOX_OK) {
        die(std::string("H: ") + outbox_last_error());
    }
    outbox_consumer *c = nullptr;
    if (outbox_consumer_new(&c, cfg, cname.c_str()) != OUTBOX_OK || outbox_consumer_connect(c) != OUTBOX_OK) {
        die(std::string("H: consumer: ") + outbox_last_error());
    }
    outbox_consumer_free(c);
    return cfg;
}

struct HealthLoad {
    double rate = 0;
    PacedWrites pw;
    std::vector<TableSample> samples;
};

// The steady load itself: writers at 50% of the maximum rate for the run's length, sampled.
// 50% of the maximum rate: L's, or measured for 3 s.
double half_load(Bench &b, const IdOf &id_of) {
    if (b.o.health_rate > 0) {
        return b.o.health_rate;
    }
    if (b.run.max_rate > 0) {
        return 0.5 * b.run.max_rate;
    }
    progress("H: measuring the maximum rate (3 s unpaced)");
    PacedWrites mx = paced_writes(b.run, b.o, false, 0, 3, 300000, id_of);
    return 0.5 * static_cast<double>(mx.written) / std::max(0.001, mx.seconds);
}

HealthLoad steady_load(Bench &b, Background &bg, const Daemon &daemon, double rate, const IdOf &id_of) {
    const Run &run = b.run;
    const Options &o = b.o;
    const double seconds = o.health_minutes * 60;
    HealthLoad h;
    h.rate = rate;
    progress("H: " + fixed(seconds / 60, 1) + " min at " + rate_str(h.rate) +
             (o.health_rate > 0 ? " (--health-rate)" : " (50% load)") +
             ", relay daemon, consumer with "
             "dedupe, purges of events and inbox rows older than " +
             std::to_string(o.health_age_s) + " s every " + fixed(o.health_purge_s, 0) + " s; sampling every " +
             fixed(o.health_sample_s, 0) + " s");
    std::atomic<bool> writing{true};
    std::thread writer([&] {
        try {
            h.pw = paced_writes(run, o, false, h.rate, seconds, static_cast<long>(h.rate * seconds), id_of);
        } catch (const std::exception &e) {
            bg.fail(std::string("writers: ") + e.what());
        }
        writing.store(false);
    });
    try {
        h.samples = sample_tables(b, daemon, writing);
    } catch (...) {
        writer.join();
        throw;
    }
    writer.join();
    return h;
}

} // namespace

void scenario_health(Bench &b) {
    Run &run = b.run;
    const Options &o = b.o;
    if (o.health_minutes <= 0) {
        return;
    }
    const double seconds = o.health_minutes * 60;
    // The bench queue would only pile up messages nobody reads: unbind it for the duration.
    b.admin.unbind(run.queue, run.exchange);
    const std::string cname = "bench-health-" + run.exchange;
    const long aggs = o.health_aggregates;
    const IdOf id_of = [aggs](std::string &out, long k) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "h%07ld", k % aggs);
        out.assign(buf);
    };
    const double rate = half_load(b, id_of);
    // Partitions of about a quarter of what the retention keeps, so that purges drop one every
    // few seconds of the age: the table then holds the age's events plus one or two partitions.
    const long partition_events = std::max(1000L, static_cast<long>(rate * o.health_age_s / 4) / 1000 * 1000);
    reset_outbox(b.pg, run);
    drop_event_partitions(b.pg, run);
    outbox_db *admin_db = nullptr;
    outbox_config *ccfg = health_setup(b, cname, partition_events, admin_db);
    auto daemon =
        start_daemon(run, "bench-health", {"--set", "outbox.partition_events=" + std::to_string(partition_events)});
    run.notes.push_back("H: events partitions of " + std::to_string(partition_events) +
                        " positions (a quarter of what " + std::to_string(o.health_age_s) + " s at " + rate_str(rate) +
                        " writes)");
    HealthLoad h;
    long handled = 0;
    long long purged_outbox = 0, purged_inbox = 0;
    {
        Background bg(run, o, ccfg, cname);
        struct StopDaemon {
            std::unique_ptr<Daemon> &d;
            ~StopDaemon() { stop_daemon(*d); }
        } stop_daemon_at_end{daemon};
        h = steady_load(b, bg, *daemon, rate, id_of);
        // The consumers may trail the writers on a busy machine: give them up to 5 minutes to catch up
        // (every event must be handled; how long it took is reported).
        const auto w0 = Clock::now();
        while (bg.handled() < h.pw.written && seconds_between(w0, Clock::now()) < 300 && !bg.consumers_failed()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        run.notes.push_back("H: the consumers handled the last event " + fixed(seconds_between(w0, Clock::now()), 1) +
                            " s after the writers stopped");
        if (bg.failed()) {
            die("H: " + bg.error());
        }
        handled = bg.handled();
        bg.stop();
        purged_outbox = bg.purged_outbox.load();
        purged_inbox = bg.purged_inbox.load();
    }
    expect(run, handled >= h.pw.written,
           "H: the consumer handled every event (" + std::to_string(handled) + " of " + std::to_string(h.pw.written) +
               ")");
    // Flatness: mean total size over the last third vs the first third of the samples taken once
    // the tables can have reached their steady size: after the purge age plus two purges, and
    // after the first third of the run (autovacuum needs a few visits, a minute apart, before the
    // space of purged rows is reused).
    const double warm = std::max(o.health_age_s + 2 * o.health_purge_s, seconds / 3);
    Json tables = Json::object();
    bool all_flat = true;
    for (const char *name : kTables) {
        all_flat = table_figure(b, name, h.samples, warm, tables) && all_flat;
    }
    std::vector<double> times;
    for (const auto &s : h.samples) {
        times.push_back(s.t);
    }
    Json t = Json::object().set("t", Json::numbers(times, 1));
    t.set("tables", tables).integer("written", h.pw.written).num("rate_per_s", h.rate, 1);
    t.integer("purged_outbox", purged_outbox).integer("purged_inbox", purged_inbox).num("warmup_s", warm, 0);
    run.series["health"] = t.boolean("flat", all_flat);
    Row r;
    r.key = "H";
    r.what = "table health: " + fixed(seconds / 60, 1) + " min at " +
             (o.health_rate > 0 ? rate_str(o.health_rate) + " (--health-rate)" : std::string("50% load")) +
             " with relay, dedupe consumer, purges (" + std::to_string(purged_outbox) + " events and " +
             std::to_string(purged_inbox) + " inbox rows purged)";
    r.events = h.pw.written;
    r.seconds = h.pw.seconds;
    run.rows.push_back(r);
    b.admin.bind(run.queue, run.exchange);
    b.admin.delete_queue(cname);
    b.admin.delete_queue(cname + ".dead");
    outbox_db_close(admin_db);
    outbox_config_free(ccfg);
    reset_outbox(b.pg, run);
    b.phase("H");
}

} // namespace bench
