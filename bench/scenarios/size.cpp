// Z: the relay's drain at size (issue 19, goal 2). --size-beneath events already published fill the
// events table first (server-side, a partition at a time; 10 per aggregate, with their counters,
// receipts and the relay's cursor past them), as months of history would; then a 10k backlog and a --size-backlog one
// are written on top and drained by the relay (the drain child, with a subscriber consuming the queue, as in E).
// Targets: the large drain >= 0.85 x Bc (measured just before it, as E pairs its drains), and >= 0.85 x the 10k drain
// (the one on the same table, and E's 10k drain on an empty table when E ran too). Then retention at that size (goal
// 3): writers at 50% of their maximum rate and the relay daemon run while `outbox_purge_published` removes the oldest
// 10k (the first partition), then the next 10% of the events (the next partition: partitions of
// --size-beneath / 10 positions here). Targets: the large removal takes no longer than 1.5 x the small one; writers'
// p99 commit latency during it within 1.2 x their p99 before it; the table's size on disk shrinks by the share removed.
// Only when named: filling 10M events of 1 KB writes some 15 GB.
#include "../scenarios.hpp"

#include "../support/proc.hpp"
#include "../support/relay.hpp"
#include "../support/subscriber.hpp"
#include "../support/writers.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace bench {

namespace {

// Where Z puts its events (storage version 2): partitions of `width` positions from `base`; the
// published events start `small` positions before the end of the first, so the oldest `small`
// fill that partition and the next `width` the one after it. Removing the oldest `small`, then the
// oldest `width`, is one partition drop each: the bench sees whether a drop's time depends on its rows.
struct Layout {
    long width = 0, small = 0;
    long long base = 0, first = 0; // first: the position of the oldest published event
};

// Drops the events table's (empty) partitions and makes them anew at `width`, from a boundary
// above every position used so far, far enough to hold the history and the backlogs on top.
Layout make_layout(Bench &b, long total, long small, long above) {
    Layout l;
    l.width = std::max(1000L, total / 10);
    l.small = small;
    drop_event_partitions(b.pg, b.run);
    const long long used =
        b.pg.query("SELECT greatest((SELECT last_value FROM " + table_of(b.run, "outbox_position_seq") +
                   "), (SELECT cursor FROM " + table_of(b.run, "outbox_relay") + " WHERE name = 'default'))")
            ->get_ll(0, 0);
    l.base = (used / l.width + 1) * l.width;
    l.first = l.base + l.width - small;
    char name[64];
    for (long long from = l.base; from < l.first + total + above + 2 * l.width; from += l.width) {
        // The events' partition and the receipts' of the same bounds, as the library makes them.
        for (const char kind : {'e', 'r'}) {
            std::snprintf(name, sizeof name, "outbox_%c%014lld", kind, from);
            b.pg.exec("CREATE TABLE " + table_of(b.run, name) + " PARTITION OF " +
                      table_of(b.run, kind == 'e' ? "outbox_events" : "outbox_receipts") + " FOR VALUES FROM (" +
                      std::to_string(from) + ") TO (" + std::to_string(from + l.width) + ")");
        }
    }
    return l;
}

// n published events at positions l.first...: ids 00000000-00ff-7000-8000-<index>, aggregates
// z<index / 10>, seq 1..10, created a millisecond apart a month ago; a receipt per 100k positions,
// published 5 ms after its partition's newest event; the relay's cursor past them all; one payload of --payload-bytes.
void fill_published(Bench &b, const Layout &l, long n) {
    const std::string events = table_of(b.run, "outbox_events");
    Generator g = b.events(0x00ff, 'z', 1, 1);
    std::string payload;
    g.payload(payload, 0);
    const auto t0 = Clock::now();
    long from = 0;
    while (from < n) {
        // One partition's share at a time: the first holds l.small, the others l.width.
        const long to = std::min(n, from == 0 ? l.small : from + l.width) - 1;
        b.pg.query("INSERT INTO " + events +
                       " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,"
                       " metadata, actor, created_at) "
                       "SELECT CAST($7 AS bigint) + i, CAST('00000000-00ff-7000-8000-' || lpad(to_hex(i), 12, '0')"
                       " AS uuid), 'ProductUpdated', $1, 'z' || lpad(CAST(i / 10 AS text), 9, '0'), i % 10 + 1, 'PUT',"
                       " CAST($2 AS json), CAST($3 AS json), $4, now() - interval '30 days' + i * interval '1 ms' "
                       "FROM generate_series(CAST($5 AS bigint), CAST($6 AS bigint)) AS i",
                   {Generator::aggregate_type(), payload, Generator::metadata(), Generator::user(),
                    std::to_string(from), std::to_string(to), std::to_string(l.first)});
        // Receipts of the largest span the relay writes (outbox::max_receipt_span, 100000).
        b.pg.query("INSERT INTO " + table_of(b.run, "outbox_receipts") +
                       " (from_position, to_position, published_at) SELECT CAST($1 AS bigint) + f,"
                       " CAST($1 AS bigint) + least(f + 99999, CAST($3 AS bigint)), now() - interval '30 days' +"
                       " CAST($3 AS bigint) * interval '1 ms' + interval '5 ms'"
                       " FROM generate_series(CAST($2 AS bigint), CAST($3 AS bigint), 100000) AS f",
                   {std::to_string(l.first), std::to_string(from), std::to_string(to)});
        from = to + 1;
        progress("Z: " + std::to_string(from) + " of " + std::to_string(n) + " published events written (" +
                 fixed(seconds_between(t0, Clock::now()), 0) + " s)");
    }
    const std::string last = std::to_string(l.first + n - 1);
    b.pg.exec("SELECT setval('" + table_of(b.run, "outbox_position_seq") + "', " + last + ")");
    b.pg.exec("UPDATE " + table_of(b.run, "outbox_relay") + " SET cursor = " + last + " WHERE name = 'default'");
    // Their counters: seq must go on from 10 for these aggregates, as the write would make them.
    b.pg.query(
        "INSERT INTO " + table_of(b.run, "outbox_aggregates") +
            " (aggregate_type, aggregate_id, last_seq) SELECT $1, 'z' || lpad(CAST(a AS text), 9, '0'),"
            " least(10, CAST($2 AS bigint) - a * 10) FROM generate_series(0, (CAST($2 AS bigint) - 1) / 10) AS a",
        {Generator::aggregate_type(), std::to_string(n)});
    // As months of history would have them: the closed partitions' aggregate indexes, which the
    // relay builds in the background as partitions close (outbox_migrate builds missing ones).
    progress("Z: the closed partitions' aggregate indexes (outbox_migrate)");
    const auto i0 = Clock::now();
    outbox_config *cfg = nullptr;
    outbox_db *db = nullptr;
    if (outbox_config_new(&cfg) != OUTBOX_OK ||
        outbox_config_set(cfg, "outbox.schema", b.run.schema.c_str()) != OUTBOX_OK ||
        outbox_db_open(&db, b.run.pg_url.c_str(), cfg) != OUTBOX_OK ||
        outbox_migrate(nullptr, db, OUTBOX_MIGRATE_OUTBOX) != OUTBOX_OK) {
        die(std::string("Z: migrate: ") + outbox_last_error());
    }
    outbox_db_close(db);
    outbox_config_free(cfg);
    progress("Z: indexes built in " + fixed(seconds_between(i0, Clock::now()), 0) + " s");
    progress("Z: VACUUM ANALYZE and CHECKPOINT");
    b.pg.exec("VACUUM ANALYZE " + events);
    b.pg.exec("CHECKPOINT");
}

std::string mib(long long bytes) {
    return fixed(static_cast<double>(bytes) / 1048576.0, 0) + " MiB";
}

// The events table on disk: every partition with its index.
long long outbox_bytes(Bench &b) {
    return b.pg
        .query("SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree(CAST($1 AS regclass))",
               {table_of(b.run, "outbox_events")})
        ->get_ll(0, 0);
}

// With `baseline`, B publishes the same messages with a subscriber (Bc) on the loaded backlog just
// before the drain, as E pairs its drains: its row, keyed Bc-<n>@<beneath>, goes there.
Row drain_on_top(Bench &b, long n, uint16_t code, char prefix, const std::string &key, Row *baseline = nullptr) {
    const Generator g = b.events(code, prefix, n, std::max(1L, n / b.o.per_aggregate));
    progress(key + ": writing the backlog on top (COPY, VACUUM ANALYZE, CHECKPOINT)");
    load_backlog(b.pg, table_of(b.run, "outbox"), table_of(b.run, "outbox_aggregates"), g);
    if (baseline != nullptr) {
        *baseline = consumed_baseline(b, g);
        baseline->key += "@" + count_label(b.o.size_beneath);
        baseline->what += ", on the loaded backlog just before the drain";
    }
    // A subscriber takes the queue as it fills, as in E (the shape of production; see E's note).
    Subscriber s(b.run.amqp_url, b.run.queue, g);
    Row r = run_relay(b.run, b.o, g, b.pg, b.o.batch_size, b.o.window, key);
    expect_got_all(b.run, b.admin, s, key);
    return r;
}

// Z's judging: one attempt, UNJUDGED when a side was noisy. Measuring a pair again would mean
// another backlog written on top of the table (or another table of --size-beneath events).
Judging one_attempt(const Options &o, const std::string &name, const std::vector<double> &sides) {
    return judge_once(name, quiet_rule(o), sides);
}

void add_ratio(Run &run, const Options &o, const std::string &name, const Row &r, const Row *base,
               const std::string &base_name) {
    if (base == nullptr) {
        return;
    }
    Figure f;
    f.section = "1 relay drain";
    f.name = name;
    f.value = rate_str(r.rate());
    f.baseline = base_name + " " + rate_str(base->rate());
    f.ratio = r.rate() / base->rate();
    f.target = "≥ 0.85";
    judge(f, one_attempt(o, name, {r.steal, base->steal}), f.ratio >= 0.85, r.steal, base->steal);
    add_figure(run, f);
}

// The writers' commit latencies (ms, from when each event was due to its COMMIT returning) of the
// events due in [from_ns, to_ns).
std::vector<double> latencies_between(const PacedWrites &pw, double rate, int64_t from_ns, int64_t to_ns) {
    std::vector<double> out;
    for (size_t k = 0; k < pw.commit_ns.size(); ++k) {
        const int64_t due = pw.t0_ns + static_cast<int64_t>(static_cast<double>(k) * 1e9 / rate);
        if (pw.commit_ns[k] != 0 && due >= from_ns && due < to_ns) {
            out.push_back(static_cast<double>(pw.commit_ns[k] - due) / 1e6);
        }
    }
    return out;
}

struct Removal {
    long long deleted = 0;
    double seconds = 0;     // until the purge returned: the partition's file dropped too
    double out_seconds = 0; // until its events were out of the table (the first progress report)
    int64_t from_ns = 0, to_ns = 0;
    double steal = -1; // the share of the machine's CPU stolen meanwhile
};

// outbox_purge_published of the filled events up to index `upto` (by the age of the receipt that
// covers it: the documents' published_at).
Removal remove_oldest(Bench &b, outbox_db *db, const Layout &l, long upto) {
    const long long age =
        b.pg.query("SELECT CAST(floor(extract(epoch FROM now() - published_at)) AS bigint) FROM " +
                       table_of(b.run, "outbox_receipts") +
                       " WHERE from_position <= CAST($1 AS bigint) AND to_position >= CAST($1 AS bigint)",
                   {std::to_string(l.first + upto)})
            ->get_ll(0, 0);
    Removal r;
    struct Out {
        Clock::time_point at;
        bool seen = false;
    } out;
    // Called once the partitions' events are out of the table (detached and committed), before
    // their files are dropped.
    auto on_progress = [](int64_t done, void *ud) {
        auto *o = static_cast<Out *>(ud);
        if (!o->seen && done > 0) {
            o->at = Clock::now();
            o->seen = true;
        }
    };
    const CpuTimes machine0 = cpu_times();
    const auto t0 = Clock::now();
    r.from_ns = ns_of(t0);
    int64_t deleted = 0;
    if (outbox_purge_published_progress(&deleted, db, age, 5000, on_progress, &out) != OUTBOX_OK) {
        die(std::string("Z: outbox_purge_published_progress: ") + outbox_last_error());
    }
    const auto t1 = Clock::now();
    r.steal = steal_share(machine0, cpu_times());
    r.to_ns = ns_of(t1);
    r.seconds = seconds_between(t0, t1);
    r.out_seconds = seconds_between(t0, out.seen ? out.at : t1);
    r.deleted = deleted;
    progress("Z: removed " + std::to_string(deleted) + " events: out of the table after " + fixed(r.out_seconds, 3) +
             " s, purge done (files dropped) after " + fixed(r.seconds, 3) + " s");
    return r;
}

// What retention at size measured: both removals, and the writers' p99 before and during the large one.
struct Retention {
    Removal rs, rl;
    double p99_before = 0, p99_during = 0, steal_before = -1;
    long small = 0, large = 0, total = 0;
};

// The figures of time and latency of the removals, each judged on its one attempt.
void removal_figures(Run &run, const Options &o, const Retention &t) {
    Figure ft;
    ft.section = "6 retention at size";
    ft.name = "time to take the oldest " + count_label(t.large) + " out of the table vs the oldest " +
              count_label(t.small) + " of " + count_label(t.total) + " (purge's first progress report)";
    ft.value = fixed(t.rl.out_seconds * 1000, 1) + " ms";
    ft.baseline = count_label(t.small) + " " + fixed(t.rs.out_seconds * 1000, 1) + " ms";
    ft.ratio = t.rl.out_seconds / std::max(1e-3, t.rs.out_seconds);
    ft.target = "≤ 1.5 (the same time)";
    const Judging removals = one_attempt(o, "Z removals", {t.rl.steal, t.rs.steal});
    judge(ft, removals, ft.ratio <= 1.5, t.rl.steal, t.rs.steal);
    add_figure(run, ft);
    Figure fd;
    fd.section = ft.section;
    fd.name = "the whole purge of the oldest " + count_label(t.large) + " vs the oldest " + count_label(t.small) +
              ", their files dropped (the file system frees what the partition held; no table lock held)";
    fd.value = fixed(t.rl.seconds, 2) + " s";
    fd.baseline = count_label(t.small) + " " + fixed(t.rs.seconds, 2) + " s";
    fd.ratio = t.rl.seconds / std::max(1e-3, t.rs.seconds);
    record_sides(fd, removals, t.rl.steal, t.rs.steal);
    add_figure(run, fd);
    Figure fp;
    fp.section = ft.section;
    fp.name = "writers' p99 commit latency during the large removal vs before it";
    fp.value = fixed(t.p99_during, 2) + " ms";
    fp.baseline = "before " + fixed(t.p99_before, 2) + " ms";
    fp.ratio = t.p99_during / std::max(1e-3, t.p99_before);
    fp.target = "≤ 1.2";
    judge(fp, one_attempt(o, "Z writers' p99", {t.rl.steal, t.steal_before}), fp.ratio <= 1.2, t.rl.steal,
          t.steal_before);
    add_figure(run, fp);
}

void retention_at_size(Bench &b, const Layout &l, long total) {
    Run &run = b.run;
    const Options &o = b.o;
    const long small = l.small;
    const long large = l.width;
    auto id_of = [](std::string &out, long k) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "w%09ld", k % 100000);
        out.assign(buf);
    };
    progress("Z: retention: measuring the writers' maximum rate (3 s unpaced)");
    PacedWrites mx = paced_writes(run, o, false, 0, 3, 300000, id_of);
    const double rate = 0.5 * static_cast<double>(mx.written) / std::max(0.001, mx.seconds);
    const double seconds = o.quick ? 12 : 45;
    auto daemon = start_daemon(run, "bench-size-retention", {});
    struct Stop {
        std::unique_ptr<Daemon> &d;
        ~Stop() {
            if (d) {
                stop_daemon(*d);
            }
        }
    } stop{daemon};
    progress("Z: retention: writers at " + rate_str(rate) + " (50% load) and the relay daemon for " +
             fixed(seconds, 0) + " s; removing the oldest " + count_label(small) + ", then the oldest " +
             count_label(large) + " of " + count_label(total));
    PacedWrites pw;
    std::thread writers(
        [&] { pw = paced_writes(run, o, false, rate, seconds, static_cast<long>(rate * seconds) + 1, id_of); });
    outbox_config *cfg = nullptr;
    outbox_db *db = nullptr;
    if (outbox_config_new(&cfg) != OUTBOX_OK ||
        outbox_config_set(cfg, "outbox.schema", run.schema.c_str()) != OUTBOX_OK ||
        outbox_db_open(&db, run.pg_url.c_str(), cfg) != OUTBOX_OK) {
        writers.join();
        die(std::string("Z: purge connection: ") + outbox_last_error());
    }
    const CpuTimes machine0 = cpu_times(); // the writers' p99 before the removals: steal meanwhile
    std::this_thread::sleep_for(std::chrono::seconds(o.quick ? 3 : 12));
    const double steal_before = steal_share(machine0, cpu_times());
    const Removal rs = remove_oldest(b, db, l, small - 1);
    std::this_thread::sleep_for(std::chrono::seconds(o.quick ? 2 : 8));
    const long long before = outbox_bytes(b); // just before and after the large removal: the writers'
    const Removal rl = remove_oldest(b, db, l, small + large - 1);
    const long long after = outbox_bytes(b); // rows of those seconds are negligible next to it
    outbox_db_close(db);
    outbox_config_free(cfg);
    writers.join();
    require_alive(*daemon);
    stop_daemon(*daemon); // before the queue is emptied below: nothing it publishes lands after that
    daemon.reset();
    const int64_t quiet_from = pw.t0_ns + 2000000000LL;
    std::vector<double> quiet = latencies_between(pw, rate, quiet_from, rs.from_ns);
    std::vector<double> during = latencies_between(pw, rate, rl.from_ns, rl.to_ns);
    std::vector<double> later = latencies_between(pw, rate, rl.to_ns, pw.t0_ns + static_cast<int64_t>(seconds * 1e9));
    const double p99q = percentile(quiet, 99), p99d = percentile(during, 99), p99l = percentile(later, 99);
    expect(run, rs.deleted > 0 && rl.deleted > 0, "Z: each removal removed events");
    Row r;
    r.key = "Z-retention";
    r.what = "removing the oldest " + std::to_string(rs.deleted) + " then " + std::to_string(rl.deleted) + " of " +
             count_label(total) + " published events with writers at " + rate_str(rate) +
             " and the relay running: out of the table after " + fixed(rs.out_seconds, 3) + " s and " +
             fixed(rl.out_seconds, 3) + " s, purge done after " + fixed(rs.seconds, 2) + " s and " +
             fixed(rl.seconds, 2) + " s; writers' p99 commit " + fixed(p99q, 2) + " ms before, " + fixed(p99d, 2) +
             " ms during the large removal, " + fixed(p99l, 2) + " ms after it; outbox " + mib(before) + " -> " +
             mib(after);
    r.events = rl.deleted;
    r.seconds = rl.seconds;
    r.extra = Json::object()
                  .integer("small_deleted", rs.deleted)
                  .num("small_seconds", rs.seconds, 3)
                  .num("small_out_seconds", rs.out_seconds, 4)
                  .integer("large_deleted", rl.deleted)
                  .num("large_seconds", rl.seconds, 3)
                  .num("large_out_seconds", rl.out_seconds, 4)
                  .num("writers_per_s", rate, 1)
                  .num("p99_before_ms", p99q, 3)
                  .num("p99_during_ms", p99d, 3)
                  .num("p99_after_ms", p99l, 3)
                  .integer("bytes_before", before)
                  .integer("bytes_after", after);
    run.rows.push_back(r);
    removal_figures(run, o, Retention{rs, rl, p99q, p99d, steal_before, small, large, total});
    Figure fs;
    fs.section = "6 retention at size";
    // Of the events in the table then: the history left, and the two backlogs drained on top of it.
    const double share =
        static_cast<double>(rl.deleted) / static_cast<double>(total - rs.deleted + 10000 + o.size_backlog);
    fs.name = "outbox size on disk right after the large removal (" + fixed(share * 100, 1) + "% of its events)";
    fs.value = mib(after);
    fs.baseline = "before " + mib(before);
    fs.ratio = static_cast<double>(after) / static_cast<double>(before);
    fs.target = "≤ " + fixed(1 - share + 0.02, 2) + " (shrinks by the share removed)";
    fs.verdict = verdict(fs.ratio <= 1 - share + 0.02);
    add_figure(run, fs);
    b.admin.purge(run.queue);
}

} // namespace

void scenario_size(Bench &b) {
    Run &run = b.run;
    const Options &o = b.o;
    const std::string beneath = count_label(o.size_beneath);
    reset_outbox(b.pg, run);
    b.pg.exec("CHECKPOINT");
    progress("Z: filling the outbox with " + beneath + " published events");
    const auto f0 = Clock::now();
    const Layout layout =
        make_layout(b, o.size_beneath, std::min(10000L, o.size_beneath / 100), 10000 + o.size_backlog);
    fill_published(b, layout, o.size_beneath);
    const double fill_s = seconds_between(f0, Clock::now());
    const long long bytes = outbox_bytes(b);
    progress("Z: filled in " + fixed(fill_s, 0) + " s; the outbox is " + mib(bytes) + " with its indexes");
    const std::string small_key = "Z-10k@" + beneath;
    const std::string large_key = "Z-" + count_label(o.size_backlog) + "@" + beneath;
    Row small = drain_on_top(b, 10000, 0x0030, 's', small_key);
    Row bc_large;
    Row large = drain_on_top(b, o.size_backlog, 0x0031, 't', large_key, &bc_large);
    small.what = "relay drain of a 10k backlog on top of " + beneath + " published events";
    large.what = "relay drain of a " + count_label(o.size_backlog) + " backlog on top of " + beneath +
                 " published events (and the 10k)";
    small.extra = Json::object().integer("published_beneath", o.size_beneath).integer("outbox_bytes", bytes);
    large.extra = Json::object().integer("published_beneath", o.size_beneath + 10000).integer("outbox_bytes", bytes);
    run.rows.push_back(small);
    run.rows.push_back(large);
    const std::string what = "relay drain, backlog " + count_label(o.size_backlog) + " on " + beneath + " published";
    run.rows.push_back(bc_large);
    add_ratio(run, o, what + ", vs " + bc_large.key, large, &run.rows.back(), bc_large.key);
    add_ratio(run, o, what + ", vs the 10k drain on the same table", large, find_row(run, small_key), small_key);
    add_ratio(run, o, what + ", vs the 10k drain on an empty table (E)", large, find_row(run, "Rc-10k"), "Rc-10k");
    run.notes.push_back(
        "Z: " + beneath +
        " events inserted as published (server-side INSERT ... SELECT into the events table, 10 per"
        " aggregate, " +
        std::to_string(o.payload_bytes) + "-byte payloads, a receipt per 100k positions, partitions of " +
        count_label(layout.width) + " positions, the first partition holding the oldest " + count_label(layout.small) +
        "; " + fixed(fill_s, 0) + " s; " + mib(bytes) +
        " with the index, then VACUUM ANALYZE and CHECKPOINT); then a 10k and a " + count_label(o.size_backlog) +
        " backlog written on top (COPY) and drained by the relay in the drain child with a subscriber consuming the"
        " queue, as in E. Z's figures are judged on one attempt each (UNJUDGED when a side lost more than"
        " --max-steal of the CPU): measuring a pair again would write another backlog on top of the table");
    retention_at_size(b, layout, o.size_beneath);
    reset_outbox(b.pg, run);
    b.pg.exec("CHECKPOINT");
    b.phase("Z");
}

} // namespace bench
