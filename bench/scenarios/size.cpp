// Z: the relay's drain at size (issue 19, goal 2). --size-beneath events already published fill the
// outbox first (server-side, in chunks; 10 per aggregate, with their counters), as months of
// history would; then a 10k backlog and a --size-backlog one are written on top and drained by the
// relay (the drain child, as in D). Targets: the large drain >= 0.85 x B, and >= 0.85 x the 10k
// drain (the one on the same table, and D's 10k drain on an empty table when D ran too).
// Only when named: filling 10M events of 1 KB writes some 15 GB.
#include "../scenarios.hpp"

#include "../support/relay.hpp"

#include <chrono>
#include <thread>

namespace bench {

namespace {

std::string count_label(long n) {
    if (n >= 1000000 && n % 1000000 == 0) {
        return std::to_string(n / 1000000) + "M";
    }
    if (n >= 1000 && n % 1000 == 0) {
        return std::to_string(n / 1000) + "k";
    }
    return std::to_string(n);
}

constexpr long kPerAggregate = 10;

// n published events: ids 00000000-00ff-7000-8000-<index>, aggregates z<index / 10>, seq 1..10,
// created a millisecond apart a month ago, published 5 ms after; one payload of --payload-bytes.
void fill_published(Bench &b, long n) {
    const std::string t = table_of(b.run, "outbox");
    Generator g = b.events(0x00ff, 'z', 1, 1);
    std::string payload;
    g.payload(payload, 0);
    constexpr long kChunk = 500000;
    const auto t0 = Clock::now();
    for (long from = 0; from < n; from += kChunk) {
        const long to = std::min(n, from + kChunk) - 1;
        b.pg.query("INSERT INTO " + t +
                       " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, metadata,"
                       " actor, created_at, published_at, status, next_attempt_at) "
                       "SELECT CAST('00000000-00ff-7000-8000-' || lpad(to_hex(i), 12, '0') AS uuid), 'ProductUpdated',"
                       " $1, 'z' || lpad(CAST(i / 10 AS text), 9, '0'), i % 10 + 1, 'PUT', CAST($2 AS json),"
                       " CAST($3 AS json), $4, c, c + interval '5 ms', 'PUBLISHED', c "
                       "FROM generate_series(CAST($5 AS bigint), CAST($6 AS bigint)) AS i,"
                       " LATERAL (SELECT now() - interval '30 days' + i * interval '1 ms' AS c) AS x",
                   {Generator::aggregate_type(), payload, Generator::metadata(), Generator::user(),
                    std::to_string(from), std::to_string(to)});
        progress("Z: " + std::to_string(to + 1) + " of " + std::to_string(n) + " published events written (" +
                 fixed(seconds_between(t0, Clock::now()), 0) + " s)");
    }
    // Their counters: seq must go on from 10 for these aggregates, as the write would make them.
    b.pg.query(
        "INSERT INTO " + table_of(b.run, "outbox_aggregates") +
            " (aggregate_type, aggregate_id, last_seq) SELECT $1, 'z' || lpad(CAST(a AS text), 9, '0'),"
            " least(10, CAST($2 AS bigint) - a * 10) FROM generate_series(0, (CAST($2 AS bigint) - 1) / 10) AS a",
        {Generator::aggregate_type(), std::to_string(n)});
    progress("Z: VACUUM ANALYZE and CHECKPOINT");
    b.pg.exec("VACUUM ANALYZE " + t);
    b.pg.exec("CHECKPOINT");
}

long long outbox_bytes(Bench &b) {
    return b.pg.query("SELECT pg_total_relation_size($1)", {table_of(b.run, "outbox")})->get_ll(0, 0);
}

Row drain_on_top(Bench &b, long n, uint16_t code, char prefix, const std::string &key) {
    const Generator g = b.events(code, prefix, n, std::max(1L, n / b.o.per_aggregate));
    progress(key + ": writing the backlog on top (COPY, VACUUM ANALYZE, CHECKPOINT)");
    load_backlog(b.pg, table_of(b.run, "outbox"), table_of(b.run, "outbox_aggregates"), g);
    Row r = run_relay(b.run, b.o, g, b.pg, b.o.batch_size, b.o.window, key);
    expect_queue_holds(b.run, b.admin, g.count, key);
    check_sample(b.run, b.admin, g, key);
    b.admin.purge(b.run.queue);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return r;
}

void add_ratio(Run &run, const std::string &name, const Row &r, const Row *base, const std::string &base_name) {
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
    f.verdict = verdict(f.ratio >= 0.85);
    add_figure(run, f);
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
    fill_published(b, o.size_beneath);
    const double fill_s = seconds_between(f0, Clock::now());
    const long long bytes = outbox_bytes(b);
    progress("Z: filled in " + fixed(fill_s, 0) + " s; the outbox is " +
             fixed(static_cast<double>(bytes) / 1048576.0, 0) + " MiB with its indexes");
    const std::string small_key = "Z-10k@" + beneath;
    const std::string large_key = "Z-" + count_label(o.size_backlog) + "@" + beneath;
    Row small = drain_on_top(b, 10000, 0x0030, 's', small_key);
    Row large = drain_on_top(b, o.size_backlog, 0x0031, 't', large_key);
    small.what = "relay drain of a 10k backlog on top of " + beneath + " published events";
    large.what = "relay drain of a " + count_label(o.size_backlog) + " backlog on top of " + beneath +
                 " published events (and the 10k)";
    small.extra = Json::object().integer("published_beneath", o.size_beneath).integer("outbox_bytes", bytes);
    large.extra = Json::object().integer("published_beneath", o.size_beneath + 10000).integer("outbox_bytes", bytes);
    run.rows.push_back(small);
    run.rows.push_back(large);
    const std::string what = "relay drain, backlog " + count_label(o.size_backlog) + " on " + beneath + " published";
    add_ratio(run, what + ", vs B", large, find_row(run, "B"), "B");
    add_ratio(run, what + ", vs the 10k drain on the same table", large, &run.rows[run.rows.size() - 2], small_key);
    add_ratio(run, what + ", vs the 10k drain on an empty table (D)", large, find_row(run, "R-10k"), "R-10k");
    run.notes.push_back(
        "Z: " + beneath + " events inserted as PUBLISHED (server-side INSERT ... SELECT, 10 per aggregate, " +
        std::to_string(o.payload_bytes) + "-byte payloads; " + fixed(fill_s, 0) + " s; outbox " +
        fixed(static_cast<double>(bytes) / 1048576.0, 0) +
        " MiB with indexes, then VACUUM ANALYZE and CHECKPOINT); then a 10k and a " + count_label(o.size_backlog) +
        " backlog written on top (COPY) and drained by the relay in the drain child, as in D");
    reset_outbox(b.pg, run);
    b.pg.exec("CHECKPOINT");
    b.phase("Z");
}

} // namespace bench
