#include "retention.hpp"

#include "error.hpp"
#include "identifiers.hpp"
#include "range_partitions.hpp"
#include "schema.hpp"
#include "stream.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace outbox::retention {
namespace {

using Partition = ranges::RangePartition;

// The events table's range partitions (not the default), by position.
std::vector<Partition> partitions(pg::Conn &conn, const Config &cfg) {
    return ranges::list(conn, stream::events_table(cfg));
}

// Named by the first position it holds, so a changed outbox.partition_events never makes a name
// twice; "_e" (events) or "_r" (receipts) and 14 digits stay within the suffix length identifiers
// leave room for (ident::max_suffix) until position 10^14.
std::string partition_name(const Config &cfg, char kind, int64_t from) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "_%c%014lld", kind, static_cast<long long>(from));
    std::string name = cfg.table + buf;
    if (name.size() > 63) {
        fail(Errc::invalid_argument, "the events table's partition name " + name + " is longer than 63 bytes");
    }
    return name;
}

// A range-partitioned table of the outbox: the events (by position) or the receipts (by their
// first position), with the partitions of the same bounds.
struct Partitioned {
    std::string table; // qualified
    std::string dflt;  // its default partition, qualified
    const char *key;   // the partition key, also the primary key
    char kind;         // the partitions' name letter
};

Partitioned events_of(const Config &cfg) {
    return {stream::events_table(cfg), ident::qualified(cfg.schema, cfg.table + "_events_default"), "position", 'e'};
}

Partitioned receipts_of(const Config &cfg) {
    return {stream::receipts_table(cfg), ident::qualified(cfg.schema, cfg.table + "_receipts_dflt"), "from_position",
            'r'};
}

// One partition [from, to) of `t`: made detached, filled with the rows the default partition holds
// for it, then attached, which takes only a SHARE UPDATE EXCLUSIVE lock on the table, so writers
// go on (the default partition is locked briefly; it stays near empty).
void add_partition(pg::Conn &conn, const Config &cfg, const Partitioned &t, int64_t from, int64_t to) {
    const std::string name = ident::qualified(cfg.schema, partition_name(cfg, t.kind, from));
    const std::string range =
        std::string(" ") + t.key + " >= " + std::to_string(from) + " AND " + t.key + " < " + std::to_string(to);
    conn.exec_simple("LOCK TABLE " + t.dflt + " IN ACCESS EXCLUSIVE MODE");
    conn.exec_simple("CREATE TABLE " + name + " (LIKE " + t.table + " INCLUDING DEFAULTS INCLUDING CONSTRAINTS)");
    conn.exec_simple("WITH m AS (DELETE FROM " + t.dflt + " WHERE" + range + " RETURNING *) INSERT INTO " + name +
                     " SELECT * FROM m");
    conn.exec_simple("ALTER TABLE " + name + " ADD PRIMARY KEY (" + t.key + ")");
    // The constraint spares ATTACH a scan of the new table; it is redundant once attached.
    conn.exec_simple("ALTER TABLE " + name + " ADD CONSTRAINT in_range CHECK (" + range + ")");
    conn.exec_simple("ALTER TABLE " + t.table + " ATTACH PARTITION " + name + " FOR VALUES FROM (" +
                     std::to_string(from) + ") TO (" + std::to_string(to) + ")");
    conn.exec_simple("ALTER TABLE " + name + " DROP CONSTRAINT in_range");
}

// The events' partitions that no receipts' partition overlaps: each gets one of the same bounds.
// (Normally every one has it: both are made and taken out together.)
std::vector<Partition> without_receipts(const std::vector<Partition> &events, const std::vector<Partition> &receipts) {
    std::vector<Partition> out;
    for (const Partition &e : events) {
        const bool covered = std::any_of(receipts.begin(), receipts.end(), [&e](const Partition &r) {
            return (r.before || r.from < e.to) && e.from < r.to;
        });
        if (!covered) {
            out.push_back(e);
        }
    }
    return out;
}

int64_t make_partitions(pg::Conn &conn, const Config &cfg) {
    const int64_t width = cfg.outbox_partition_events;
    pg::Result s = conn.exec("SELECT last_value FROM " + stream::position_sequence(cfg));
    const int64_t current = ranges::floor_to(s.get_int(0, 0), width);
    const int64_t want_to = current + width * (1 + cfg.outbox_partitions_ahead);
    const Partitioned events = events_of(cfg);
    const Partitioned receipts = receipts_of(cfg);
    std::vector<Partition> parts = partitions(conn, cfg);
    if (!parts.empty() && parts.back().to >= want_to &&
        without_receipts(parts, ranges::list(conn, receipts.table)).empty()) {
        return parts.back().to; // the common case: nothing to make, no lock taken
    }
    conn.exec_simple(schema::ddl_lock_sql); // another relay, migrate or purge may be making the same ones
    // Writers (and the relay's receipts) wait while partitions are attached: an insert routed to
    // the default partition by a partition list read before the attach would otherwise fail the
    // default's new constraint. Partitions are made ahead, so this is rare and short (the locks
    // are tried 100 ms at a time). The receipts first, as the relay takes them.
    conn.exec_simple("LOCK TABLE " + receipts.table + " IN SHARE MODE");
    conn.exec_simple("LOCK TABLE " + events.table + " IN SHARE MODE");
    parts = partitions(conn, cfg);
    int64_t from = parts.empty() ? 0 : parts.back().to;
    if (parts.empty()) {
        // The first partition starts where the oldest event is (events moved from version 1 and
        // any written before partitions existed sit in the default partition).
        pg::Result m = conn.exec("SELECT min(position) FROM " + events.table);
        from = ranges::floor_to(m.is_null(0, 0) ? current : std::min<int64_t>(m.get_int(0, 0), current), width);
    }
    for (; from < want_to; from += width) {
        add_partition(conn, cfg, events, from, from + width);
    }
    for (const Partition &p : without_receipts(partitions(conn, cfg), ranges::list(conn, receipts.table))) {
        add_partition(conn, cfg, receipts, p.from, p.to);
    }
    return from;
}

} // namespace

int64_t ensure_partitions(pg::Conn &conn, const Config &cfg) {
    return ranges::with_short_locks(conn, 20, [&] { return make_partitions(conn, cfg); });
}

namespace {

// Takes the partitions in `old` out of the events table (detached, their files dropped later by
// purge) under a short ACCESS EXCLUSIVE lock on it, tried 100 ms at a time so writers never queue
// behind it for longer. What made them droppable cannot
// change meanwhile: nothing is written at or below the cursor (it passes a position only once no
// transaction can still write it), and their receipts only age. Another purge may have dropped
// them first. Returns (partitions, events) dropped; the events counted from the receipts, so that
// a drop costs the same whatever its partitions hold (an event deleted through the view is
// counted too).
std::pair<int64_t, int64_t> drop(pg::Conn &conn, const Config &cfg, const std::vector<Partition> &old) {
    std::vector<int64_t> rows;
    for (const Partition &p : old) {
        rows.push_back(conn.exec("SELECT coalesce(sum(least(to_position, CAST($2 AS bigint) - 1) -"
                                 " greatest(from_position, CAST($1 AS bigint)) + 1), 0) FROM " +
                                     stream::receipts_table(cfg) +
                                     " WHERE from_position < CAST($2 AS bigint) AND to_position >= CAST($1 AS bigint)",
                                 {std::to_string(p.from), std::to_string(p.to)})
                           .get_int(0, 0));
    }
    return ranges::with_short_locks(conn, 50, [&]() -> std::pair<int64_t, int64_t> {
        conn.exec_simple(schema::ddl_lock_sql);
        // The receipts first, as the relay's record statement takes them (their partitions go with the events').
        conn.exec_simple("LOCK TABLE " + stream::receipts_table(cfg) + " IN ACCESS EXCLUSIVE MODE");
        conn.exec_simple("LOCK TABLE " + stream::events_table(cfg) + " IN ACCESS EXCLUSIVE MODE");
        std::pair<int64_t, int64_t> done{0, 0};
        // Through the schema's function (definer's rights: an operator role may purge too).
        const std::string drop_fn = ident::qualified(cfg.schema, cfg.table + "_drop_partition");
        for (size_t i = 0; i < old.size(); ++i) {
            if (conn.exec("SELECT " + drop_fn + "($1)", {old[i].name}).get(0, 0) != "t") {
                continue; // another purge dropped it first
            }
            ++done.first;
            done.second += rows[i];
        }
        return done;
    });
}

// The partitions wholly at or below the cursor whose newest receipt is older than the cutoff.
std::vector<Partition> droppable(pg::Conn &conn, const Config &cfg, const std::string &older_than_s) {
    const int64_t cursor =
        conn.exec("SELECT cursor FROM " + stream::relay_table(cfg) + " WHERE name = 'default'").get_int(0, 0);
    std::vector<Partition> out;
    for (const Partition &p : partitions(conn, cfg)) {
        if (p.to - 1 > cursor) {
            break;
        }
        // Receipts are by range: the newest one that reaches into the partition.
        pg::Result r = conn.exec("SELECT coalesce(max(published_at) < now() - CAST($1 AS bigint) * interval '1 second',"
                                 " true) FROM " +
                                     stream::receipts_table(cfg) +
                                     " WHERE from_position < CAST($2 AS bigint) AND to_position >= CAST($3 AS bigint)",
                                 {older_than_s, std::to_string(p.to), std::to_string(p.from)});
        if (r.get(0, 0) != "t") {
            break; // in position order: a later partition was published later
        }
        out.push_back(p);
    }
    return out;
}

// Deletes, `batch` rows a statement, what `sql` selects ($1 the age in seconds, $2 the batch).
int64_t delete_batches(pg::Conn &conn, const std::string &sql, const std::string &older_than_s, int batch, int64_t base,
                       const std::function<void(int64_t)> &on_progress) {
    int64_t total = 0;
    while (true) {
        pg::Result r = conn.exec(sql, {older_than_s, std::to_string(batch)});
        const int64_t n = std::strtoll(r.cmd_tuples(), nullptr, 10);
        total += n;
        if (on_progress && n > 0) {
            on_progress(base + total);
        }
        if (n < batch) {
            return total;
        }
    }
}

} // namespace

PurgeResult purge(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch,
                  const std::function<void(int64_t)> &on_progress) {
    if (conn.tx_status() != PQTRANS_IDLE) {
        fail(Errc::invalid_argument, "purge runs its own transactions: call it outside a transaction");
    }
    const std::string age = std::to_string(older_than_s);
    PurgeResult res;
    try {
        ensure_partitions(conn, cfg);
    } catch (const Error &e) {
        // An operator role may not make partitions (the owner's migrate and the relay do); the
        // purge goes on without.
        if (std::string(e.what()).find("SQLSTATE 42501") == std::string::npos || !conn.ok()) {
            throw;
        }
    }
    const std::vector<Partition> old = droppable(conn, cfg, age);
    if (!old.empty()) {
        const auto [parts, events] = drop(conn, cfg, old);
        res.partitions = parts;
        res.events = events;
        if (on_progress) {
            on_progress(res.events);
        }
        // Receipts went with their partitions; those the default partition holds for events that
        // are gone (written before partitions existed), and keys of events that are gone.
        const std::string low = std::to_string(old.back().to);
        // (Through the table, as an operator role has it granted: only the default partition can
        // hold such receipts now.)
        conn.exec("DELETE FROM " + stream::receipts_table(cfg) +
                      " WHERE from_position < CAST($1 AS bigint) AND to_position < CAST($1 AS bigint)",
                  {low});
        // Keys of events moved from a version-1 table that were published there carry position 0:
        // they go with their rows below.
        conn.exec("DELETE FROM " + stream::keys_table(cfg) + " WHERE position > 0 AND position < CAST($1 AS bigint)",
                  {low});
    }
    // The files of the partitions taken out, this purge's and any an interrupted one left.
    conn.exec("SELECT " + ident::qualified(cfg.schema, cfg.table + "_drop_detached") + "()");
    // The version-1 table's published rows, until it is empty, and their idempotency keys (a row
    // per event deleted comes back).
    const std::string v1 = stream::v1_table(cfg);
    res.events += delete_batches(
        conn,
        "WITH d AS (DELETE FROM " + v1 + " WHERE ctid = ANY(ARRAY(SELECT ctid FROM " + v1 +
            " WHERE status = 'PUBLISHED' AND published_at < now() - CAST($1 AS bigint) * interval '1 second'"
            " LIMIT CAST($2 AS integer))) RETURNING outbox_id, idempotency_key), k AS (DELETE FROM " +
            stream::keys_table(cfg) +
            " WHERE position = 0 AND (idempotency_key, outbox_id) IN (SELECT idempotency_key, outbox_id FROM d"
            " WHERE idempotency_key IS NOT NULL)) SELECT 1 FROM d",
        age, batch, res.events, on_progress);
    return res;
}

namespace {

// "<table>_a<first position>", next to its partition's "<table>_e<first position>".
std::string aggregate_index_name(const Config &cfg, const Partition &p) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "_a%014lld", static_cast<long long>(p.from));
    return cfg.table + buf;
}

struct IndexJob {
    std::string drop;   // an invalid index a failed build left, to drop first (or empty)
    std::string create; // the build
    std::string name;
};

// The first closed partition without a valid aggregate index, oldest first.
std::optional<IndexJob> next_index_job(pg::Conn &conn, const Config &cfg) {
    const int64_t cursor =
        conn.exec("SELECT cursor FROM " + stream::relay_table(cfg) + " WHERE name = 'default'").get_int(0, 0);
    pg::Result ix = conn.exec("SELECT ci.relname, x.indisvalid FROM pg_inherits i JOIN pg_index x ON x.indrelid ="
                              " i.inhrelid JOIN pg_class ci ON ci.oid = x.indexrelid WHERE i.inhparent = CAST($1 AS"
                              " regclass) AND NOT x.indisprimary",
                              {stream::events_table(cfg)});
    std::vector<std::pair<std::string, bool>> have;
    for (int i = 0; i < ix.rows(); ++i) {
        have.emplace_back(std::string(ix.get(i, 0)), ix.get(i, 1) == "t");
    }
    for (const Partition &p : partitions(conn, cfg)) {
        if (p.to - 1 > cursor) {
            break;
        }
        const std::string name = aggregate_index_name(cfg, p);
        const auto found = std::find_if(have.begin(), have.end(), [&](const auto &h) { return h.first == name; });
        if (found != have.end() && found->second) {
            continue;
        }
        IndexJob job;
        job.name = name;
        if (found != have.end()) {
            job.drop = "DROP INDEX CONCURRENTLY IF EXISTS " + ident::qualified(cfg.schema, name);
        }
        job.create = "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + ident::quoted(name) + " ON " +
                     ident::qualified(cfg.schema, p.name) + " (aggregate_type, aggregate_id, seq)";
        return job;
    }
    return std::nullopt;
}

} // namespace

int64_t index_closed_partitions(pg::Conn &conn, const Config &cfg) {
    if (conn.tx_status() != PQTRANS_IDLE) {
        fail(Errc::invalid_argument, "indexes are built outside a transaction");
    }
    int64_t built = 0;
    while (std::optional<IndexJob> job = next_index_job(conn, cfg)) {
        if (!job->drop.empty()) {
            conn.exec_simple(job->drop);
        }
        conn.exec_simple(job->create);
        ++built;
    }
    return built;
}

Indexer::~Indexer() {
    if (!building_.empty() && conn_ && conn_->ok()) {
        if (PGcancel *c = PQgetCancel(conn_->raw())) {
            char err[256];
            PQcancel(c, err, sizeof err);
            PQfreeCancel(c);
        }
    }
}

std::string Indexer::collect() {
    PGconn *c = conn_->raw();
    if (PQconsumeInput(c) == 0) {
        building_.clear();
        conn_.reset();
        return "the connection building an index was lost; it is built again later";
    }
    if (PQisBusy(c) != 0) {
        return {};
    }
    std::string warning;
    while (PGresult *r = PQgetResult(c)) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK && warning.empty()) {
            warning = "cannot build index " + building_ +
                      " (outbox migrate builds it as the tables' owner): " + PQresultErrorMessage(r);
        }
        PQclear(r);
    }
    building_.clear();
    if (!warning.empty()) {
        pause_until_ = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    }
    return warning;
}

std::string Indexer::tick(pg::Conn &main, const Config &cfg) {
    if (!building_.empty()) {
        std::string warning = collect();
        if (!building_.empty() || !warning.empty()) {
            return warning;
        }
    }
    if (std::chrono::steady_clock::now() < pause_until_) {
        return {};
    }
    std::optional<IndexJob> job = next_index_job(main, cfg);
    if (!job) {
        return {};
    }
    if (!conn_ || !conn_->ok()) {
        conn_.reset();
        conn_.emplace(pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-indexer"));
    }
    if (!job->drop.empty()) {
        conn_->exec_simple(job->drop); // an invalid index: dropping it is quick
    }
    if (PQsendQuery(conn_->raw(), job->create.c_str()) == 0) {
        conn_.reset();
        return "cannot start building index " + job->name;
    }
    building_ = job->name;
    return {};
}

int64_t estimate(pg::Conn &conn, const Config &cfg, int64_t older_than_s) {
    const std::string age = std::to_string(older_than_s);
    int64_t n = 0;
    for (const Partition &p : droppable(conn, cfg, age)) {
        n += conn.exec("SELECT GREATEST(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass($1)",
                       {ident::qualified(cfg.schema, p.name)})
                 .get_int(0, 0);
    }
    return n + conn.exec("SELECT count(*) FROM " + stream::v1_table(cfg) +
                             " WHERE status = 'PUBLISHED' AND published_at < now() - CAST($1 AS bigint) * interval '1 "
                             "second'",
                         {age})
                   .get_int(0, 0);
}

} // namespace outbox::retention
