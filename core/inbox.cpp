#include "inbox.hpp"

#include "error.hpp"
#include "identifiers.hpp"
#include "json.hpp"
#include "range_partitions.hpp"
#include "schema.hpp"
#include "uuid.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

namespace outbox::inbox {

const char *order_name(Order o) noexcept {
    switch (o) {
    case Order::unchecked:
        return "unchecked";
    case Order::in_order:
        return "in_order";
    case Order::stale:
        return "stale";
    case Order::gap:
        return "gap";
    }
    return "unknown";
}

void validate(const Key &key) {
    if (key.consumer.empty() || key.consumer.size() > 255 || !valid_utf8(key.consumer)) {
        fail(Errc::invalid_argument, "consumer name must be 1 to 255 bytes of UTF-8");
    }
    if (!uuid::valid(key.event_id)) {
        fail(Errc::invalid_argument, "event id must be a UUID (the message's OUTBOX_ID)");
    }
    if (key.seq < 0) {
        fail(Errc::invalid_argument, "sequence number must not be negative");
    }
    if (!valid_utf8(key.aggregate_type) || !valid_utf8(key.aggregate_id)) {
        fail(Errc::invalid_argument, "aggregate type and id must be UTF-8");
    }
}

namespace {
// The order check needs the whole aggregate (type and id) and a sequence number; without any of
// them the event is only deduplicated, as the C API documents for NULL aggregate fields.
bool tracks_order(const Key &key, bool check_order) {
    return check_order && key.seq > 0 && !key.aggregate_type.empty() && !key.aggregate_id.empty();
}
} // namespace

Statement render(const Config &cfg, const Key &key, bool check_order, bool check_held) {
    validate(key);
    const std::string inbox = cfg.inbox_qualified();
    const std::string v1 = ident::qualified(cfg.schema, cfg.inbox_table + "_v1");
    const std::string positions = ident::qualified(cfg.schema, cfg.inbox_table + "_positions");
    const bool track = tracks_order(key, check_order);
    // id_ms is a function of the id alone, so a redelivery carries the same key and partition.
    // Rows recorded before the upgrade to the partitioned inbox stay in the version-1 table.
    std::string sql = "WITH v AS (SELECT CAST($1 AS text) AS consumer, CAST(CAST($2 AS text) AS uuid) AS outbox_id,"
                      " CAST($3 AS text) AS aggregate_type, CAST($4 AS text) AS aggregate_id,"
                      " CAST(CAST($5 AS text) AS bigint) AS seq, CAST(CAST($6 AS text) AS bigint) AS id_ms),";
    if (check_held) {
        // An event without an aggregate is held under ("", its id), as core/held.cpp holds it.
        sql += " held AS (SELECT 1 FROM " + ident::qualified(cfg.schema, cfg.inbox_table + "_held") +
               " h, v WHERE h.consumer = v.consumer AND h.aggregate_type = COALESCE(v.aggregate_type, '')"
               " AND h.aggregate_id = CASE WHEN v.aggregate_type IS NULL OR v.aggregate_id IS NULL"
               " THEN CAST(v.outbox_id AS text) ELSE v.aggregate_id END FOR SHARE OF h),";
    }
    sql += " ins AS (INSERT INTO " +
                      inbox +
                      " (consumer, outbox_id, aggregate_type, aggregate_id, seq, id_ms)"
                      " SELECT consumer, outbox_id, aggregate_type, aggregate_id, seq, id_ms FROM v"
                      " WHERE NOT EXISTS (SELECT 1 FROM " +
                      v1 + " o WHERE o.consumer = v.consumer AND o.outbox_id = v.outbox_id)" +
                      (check_held ? " AND NOT EXISTS (SELECT 1 FROM held)" : "") +
                      " ON CONFLICT (consumer, outbox_id, id_ms) DO NOTHING RETURNING 1)";
    if (track) {
        // The position row is read before this statement's own upsert (CTEs share one snapshot)
        // and only advanced when this is the first delivery.
        sql += ", pos AS (SELECT p.last_seq FROM " + positions +
               " p, v WHERE p.consumer = v.consumer AND p.aggregate_type = v.aggregate_type"
               " AND p.aggregate_id = v.aggregate_id),"
               " up AS (INSERT INTO " +
               positions +
               " AS p (consumer, aggregate_type, aggregate_id, last_seq)"
               " SELECT consumer, aggregate_type, aggregate_id, seq FROM v WHERE EXISTS (SELECT 1 FROM ins)"
               " ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE"
               " SET last_seq = GREATEST(p.last_seq, EXCLUDED.last_seq), updated_at = now() RETURNING 1)"
               " SELECT EXISTS (SELECT 1 FROM ins), (SELECT last_seq FROM pos), (SELECT count(*) FROM up)";
    } else {
        sql += " SELECT EXISTS (SELECT 1 FROM ins), CAST(NULL AS bigint), 0";
    }
    if (check_held) {
        sql += ", EXISTS (SELECT 1 FROM held)";
    }
    pg::Params params{key.consumer,
                      key.event_id,
                      key.aggregate_type.empty() ? std::nullopt : std::optional<std::string>(key.aggregate_type),
                      key.aggregate_id.empty() ? std::nullopt : std::optional<std::string>(key.aggregate_id),
                      key.seq > 0 ? std::optional<std::string>(std::to_string(key.seq)) : std::nullopt,
                      std::to_string(uuid::v7_millis(key.event_id))};
    return {std::move(sql), std::move(params)};
}

namespace {

// A boolean as drivers print one: PostgreSQL's t/f, true/false in any case, 1/0.
bool truthy(const char *text) {
    std::string s;
    for (const char *p = text; p != nullptr && *p != '\0'; ++p) {
        s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(*p))));
    }
    if (s == "t" || s == "true" || s == "1") {
        return true;
    }
    if (s == "f" || s == "false" || s == "0") {
        return false;
    }
    fail(Errc::invalid_argument,
         "the dedupe statement's first column is not a boolean: " + quote_input(text != nullptr ? text : "NULL"));
}

} // namespace

Result interpret_text(const Key &key, const char *first_time, const char *previous_seq, bool check_order,
                      const char *held) {
    std::optional<int64_t> previous;
    if (previous_seq != nullptr) {
        char *end = nullptr;
        errno = 0;
        const long long v = std::strtoll(previous_seq, &end, 10);
        if (end == previous_seq || *end != '\0' || errno != 0) {
            fail(Errc::invalid_argument,
                 "the dedupe statement's second column is not a number: " + quote_input(previous_seq));
        }
        previous = v;
    }
    Result r = interpret(key, truthy(first_time), previous, check_order);
    r.held = held != nullptr && truthy(held);
    return r;
}

Result interpret(const Key &key, bool first_time, std::optional<int64_t> previous, bool check_order) {
    Result r;
    r.first_time = first_time;
    r.last_seq = previous.value_or(0);
    if (!first_time || !tracks_order(key, check_order)) {
        return r;
    }
    if (previous && key.seq <= *previous) {
        r.order = Order::stale;
    } else if (key.seq > r.last_seq + 1) {
        r.order = Order::gap;
    } else {
        r.order = Order::in_order;
    }
    return r;
}

Result begin_and_dedupe(pg::Conn &conn, const Config &cfg, const Key &key, bool check_order, bool check_held) {
    Statement st = render(cfg, key, check_order, check_held);
    pg::Result r = conn.begin_and_exec(st.sql, st.params);
    std::optional<int64_t> previous;
    if (!r.is_null(0, 1)) {
        previous = r.get_int(0, 1);
    }
    Result res = interpret(key, r.get(0, 0) == "t", previous, check_order);
    res.held = check_held && r.get(0, 3) == "t";
    return res;
}

Result dedupe(pg::Conn &conn, const Config &cfg, const Key &key, bool check_order) {
    Statement st = render(cfg, key, check_order);
    if (conn.tx_status() == PQTRANS_INERROR) {
        fail(Errc::transaction, "the caller's transaction is aborted; roll it back before deduplicating");
    }
    pg::Result r = conn.exec_cached(st.sql, st.params);
    std::optional<int64_t> previous;
    if (!r.is_null(0, 1)) {
        previous = r.get_int(0, 1);
    }
    return interpret(key, r.get(0, 0) == "t", previous, check_order);
}

namespace {

using Partition = ranges::RangePartition;

// The inbox's partitions, from the catalog.
std::vector<Partition> partitions(pg::Conn &conn, const Config &cfg) {
    return ranges::list(conn, cfg.inbox_qualified());
}

std::string partition_name(const Config &cfg, int64_t from_ms) {
    const std::time_t t = static_cast<std::time_t>(from_ms / 1000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "_p%Y%m%dt%H%M", &tm);
    return cfg.inbox_table + buf;
}

// "<inbox>_x<date>" for the partition "<inbox>_p<date>" taken out by a purge, to be dropped.
std::string detached_name(const Config &cfg, const Partition &p) {
    return cfg.inbox_table + "_x" + p.name.substr(cfg.inbox_table.size() + 2);
}

// One dated partition [from, to): made detached, filled with the rows the default partition holds
// for it, then attached (which checks the default no longer holds any, under its lock).
void add_partition(pg::Conn &conn, const Config &cfg, int64_t from, int64_t to) {
    const std::string name = ident::qualified(cfg.schema, partition_name(cfg, from));
    const std::string dflt = ident::qualified(cfg.schema, cfg.inbox_table + "_default");
    const std::string range = " id_ms >= " + std::to_string(from) + " AND id_ms < " + std::to_string(to);
    conn.exec_simple("LOCK TABLE " + dflt + " IN ACCESS EXCLUSIVE MODE");
    conn.exec_simple("CREATE TABLE " + name + " (LIKE " + cfg.inbox_qualified() + " INCLUDING DEFAULTS)");
    conn.exec_simple(
        "WITH m AS (DELETE FROM " + dflt + " WHERE" + range +
        " RETURNING consumer, outbox_id, aggregate_type, aggregate_id, seq, processed_at, id_ms) INSERT INTO " + name +
        " (consumer, outbox_id, aggregate_type, aggregate_id, seq, processed_at, id_ms) SELECT * FROM m");
    // The constraint spares ATTACH a scan of the new table; it is redundant once attached.
    conn.exec_simple("ALTER TABLE " + name + " ADD CONSTRAINT in_range CHECK (" + range + ")");
    conn.exec_simple("ALTER TABLE " + cfg.inbox_qualified() + " ATTACH PARTITION " + name + " FOR VALUES FROM (" +
                     std::to_string(from) + ") TO (" + std::to_string(to) + ")");
    conn.exec_simple("ALTER TABLE " + name + " DROP CONSTRAINT in_range");
}

bool owns_inbox(pg::Conn &conn, const Config &cfg) {
    pg::Result r = conn.exec("SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class"
                             " WHERE oid = CAST($1 AS regclass)",
                             {cfg.inbox_qualified()});
    return r.rows() == 1 && r.get(0, 0) == "t";
}

// Deletes, `batch` rows a statement, rows processed before the cutoff that `where` selects.
int64_t delete_batches(pg::Conn &conn, const std::string &table, const std::string &key, const std::string &where,
                       const std::string &cutoff_s, int batch) {
    const std::string sql = "DELETE FROM " + table + " WHERE (" + key + ") IN (SELECT " + key + " FROM " + table +
                            " WHERE processed_at < to_timestamp(CAST($1 AS double precision))" + where + " LIMIT $2)";
    int64_t total = 0;
    while (true) {
        pg::Result r = conn.exec(sql, {cutoff_s, std::to_string(batch)});
        const int64_t n = std::strtoll(r.cmd_tuples(), nullptr, 10);
        total += n;
        if (n < batch) {
            return total;
        }
    }
}

// Drops those of the partitions whose rows were all processed before the cutoff; returns their
// rows. A partition a late delivery keeps is dropped by a later purge. Taking them out of the inbox
// needs its ACCESS EXCLUSIVE lock, which waits for the consumers' open transactions while new ones
// queue behind it: in a transaction of its own it waits at most 100 ms a try and tries again, and
// it only detaches them (renamed "<inbox>_x..."), a change to the catalog of milliseconds. The
// files go afterwards (drop_detached), when returning their space to the file system keeps no
// consumer waiting. The check is made under the lock, so no late delivery is dropped; the counts
// (only reported) are taken before it.
int64_t drop_done(pg::Conn &conn, const Config &cfg, const std::vector<Partition> &old, const std::string &cutoff_s) {
    if (old.empty()) {
        return 0;
    }
    const bool own = conn.tx_status() == PQTRANS_IDLE;
    std::vector<int64_t> rows;
    for (const Partition &p : old) {
        try {
            rows.push_back(conn.exec("SELECT count(*) FROM " + ident::qualified(cfg.schema, p.name)).get_int(0, 0));
        } catch (const Error &e) {
            if (!own || std::string(e.what()).find("SQLSTATE 42P01") == std::string::npos) {
                throw;
            }
            rows.push_back(0); // another purge dropped it since the list was read
        }
    }
    // In a transaction of its own: the lock is tried 100 ms at a time (ranges::with_short_locks).
    return ranges::with_short_locks(conn, 50, [&]() -> int64_t {
        conn.exec_simple(schema::ddl_lock_sql);
        conn.exec_simple("LOCK TABLE " + cfg.inbox_qualified() + " IN ACCESS EXCLUSIVE MODE");
        int64_t dropped = 0;
        for (size_t i = 0; i < old.size(); ++i) {
            const std::string name = ident::qualified(cfg.schema, old[i].name);
            if (conn.exec("SELECT to_regclass($1) IS NULL", {name}).get(0, 0) == "t") {
                continue; // another purge dropped it first
            }
            pg::Result r = conn.exec("SELECT coalesce(max(processed_at) < to_timestamp(CAST($1 AS double "
                                     "precision)), true) FROM " +
                                         name,
                                     {cutoff_s});
            if (r.get(0, 0) == "t") {
                conn.exec_simple("ALTER TABLE " + cfg.inbox_qualified() + " DETACH PARTITION " + name);
                conn.exec_simple("ALTER TABLE " + name + " RENAME TO " + ident::quoted(detached_name(cfg, old[i])));
                dropped += rows[i];
            }
        }
        return dropped;
    });
}

// Drops the inbox partitions drop_done took out, and any a purge stopped in between left.
void drop_detached(pg::Conn &conn, const Config &cfg) {
    const std::string prefix = cfg.inbox_table + "_x";
    pg::Result r = conn.exec("SELECT c.relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace"
                             " WHERE ns.nspname = $1 AND c.relkind = 'r' AND NOT c.relispartition"
                             " AND left(c.relname, length($2)) = $2 AND substr(c.relname, length($2) + 1) ~"
                             " '^[0-9]{8}t[0-9]{4}$' ORDER BY c.relname",
                             {cfg.schema, prefix});
    for (int i = 0; i < r.rows(); ++i) {
        // IF EXISTS: another purge may drop it first.
        conn.exec_simple("DROP TABLE IF EXISTS " + ident::qualified(cfg.schema, std::string(r.get(i, 0))));
    }
}

} // namespace

namespace {
void make_partitions(pg::Conn &conn, const Config &cfg, int64_t now_ms);
} // namespace

int64_t db_now_ms(pg::Conn &conn) {
    return conn.exec("SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS bigint)").get_int(0, 0);
}

void ensure_partitions(pg::Conn &conn, const Config &cfg, int64_t now_ms) {
    pg::in_transaction(conn, [&] {
        make_partitions(conn, cfg, now_ms);
        return 0;
    });
}

namespace {
void make_partitions(pg::Conn &conn, const Config &cfg, int64_t now_ms) {
    conn.exec_simple(schema::ddl_lock_sql); // another purge or migrate may be making the same ones
    const int64_t width = cfg.inbox_partition_s * 1000;
    const std::vector<Partition> parts = partitions(conn, cfg);
    int64_t last = 0;
    bool have_before = false;
    for (const Partition &p : parts) {
        have_before = have_before || p.before;
        last = std::max(last, p.to);
    }
    const int64_t current = ranges::floor_to(now_ms, width);
    if (!have_before) {
        // The first dated partition starts at the current one: older ids stay in _before.
        conn.exec_simple("CREATE TABLE " + ident::qualified(cfg.schema, cfg.inbox_table + "_before") +
                         " PARTITION OF " + cfg.inbox_qualified() + " FOR VALUES FROM (MINVALUE) TO (" +
                         std::to_string(current) + ")");
        last = current;
    }
    // Partitions the clock has passed are not made afterwards: late rows for them stay in the
    // default partition, which purges delete from.
    last = std::max(last, current);
    const int64_t until = current + (static_cast<int64_t>(cfg.inbox_partitions_ahead) + 1) * width;
    while (last < until) {
        add_partition(conn, cfg, last, last + width);
        last += width;
    }
}
} // namespace

int64_t purge(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch) {
    return purge_at(conn, cfg, older_than_s, batch, db_now_ms(conn));
}

int64_t purge_at(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch, int64_t now_ms) {
    // Ages past 100 years overflow PostgreSQL's interval arithmetic: refused, not a late error.
    if (older_than_s < 0 || older_than_s > 100LL * 365 * 24 * 3600 || batch <= 0) {
        fail(Errc::invalid_argument, "purge needs an age of 0 to 100 years and a positive batch size");
    }
    if (older_than_s < cfg.inbox_retention_s) {
        fail(Errc::invalid_argument, "refusing to purge inbox rows younger than inbox.retention_s (" +
                                         std::to_string(cfg.inbox_retention_s) +
                                         " s): a redelivery may still need them; lower inbox.retention_s "
                                         "deliberately if you mean it");
    }
    const int64_t cutoff_ms = now_ms - older_than_s * 1000;
    char cutoff_s[40];
    std::snprintf(cutoff_s, sizeof cutoff_s, "%.3f", static_cast<double>(cutoff_ms) / 1000.0);
    const std::string key = "consumer, outbox_id, id_ms";
    int64_t total = delete_batches(conn, ident::qualified(cfg.schema, cfg.inbox_table + "_v1"), "consumer, outbox_id",
                                   "", cutoff_s, batch);
    if (!owns_inbox(conn, cfg)) {
        // Only the owner may drop partitions: any other role deletes rows, as version 1 did.
        return total + delete_batches(conn, cfg.inbox_qualified(), key, "", cutoff_s, batch);
    }
    std::vector<Partition> old;
    for (const Partition &p : partitions(conn, cfg)) {
        if (!p.before && p.to <= cutoff_ms) {
            old.push_back(p);
        }
    }
    total += drop_done(conn, cfg, old, cutoff_s);
    drop_detached(conn, cfg);
    // Ids that are not v7 or older than the first partition, and rows past the partitions made.
    for (const char *undated : {"_before", "_default"}) {
        total +=
            delete_batches(conn, ident::qualified(cfg.schema, cfg.inbox_table + undated), key, "", cutoff_s, batch);
    }
    ensure_partitions(conn, cfg, now_ms);
    return total;
}

} // namespace outbox::inbox
