#include "inbox.hpp"

#include "error.hpp"
#include "identifiers.hpp"
#include "json.hpp"
#include "uuid.hpp"

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

Statement render(const Config &cfg, const Key &key, bool check_order) {
    validate(key);
    const std::string inbox = cfg.inbox_qualified();
    const std::string positions = ident::qualified(cfg.schema, cfg.inbox_table + "_positions");
    const bool track = tracks_order(key, check_order);
    std::string sql = "WITH v AS (SELECT CAST($1 AS text) AS consumer, CAST(CAST($2 AS text) AS uuid) AS outbox_id,"
                      " CAST($3 AS text) AS aggregate_type, CAST($4 AS text) AS aggregate_id,"
                      " CAST(CAST($5 AS text) AS bigint) AS seq),"
                      " ins AS (INSERT INTO " +
                      inbox +
                      " (consumer, outbox_id, aggregate_type, aggregate_id, seq)"
                      " SELECT consumer, outbox_id, aggregate_type, aggregate_id, seq FROM v"
                      " ON CONFLICT (consumer, outbox_id) DO NOTHING RETURNING 1)";
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
    pg::Params params{key.consumer, key.event_id,
                      key.aggregate_type.empty() ? std::nullopt : std::optional<std::string>(key.aggregate_type),
                      key.aggregate_id.empty() ? std::nullopt : std::optional<std::string>(key.aggregate_id),
                      key.seq > 0 ? std::optional<std::string>(std::to_string(key.seq)) : std::nullopt};
    return {std::move(sql), std::move(params)};
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

Result begin_and_dedupe(pg::Conn &conn, const Config &cfg, const Key &key, bool check_order) {
    Statement st = render(cfg, key, check_order);
    pg::Result r = conn.begin_and_exec(st.sql, st.params);
    std::optional<int64_t> previous;
    if (!r.is_null(0, 1)) {
        previous = r.get_int(0, 1);
    }
    return interpret(key, r.get(0, 0) == "t", previous, check_order);
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

int64_t purge(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch) {
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
    const std::string sql = "DELETE FROM " + cfg.inbox_qualified() + " WHERE ctid = ANY(ARRAY(SELECT ctid FROM " +
                            cfg.inbox_qualified() +
                            " WHERE processed_at < now() - CAST($1 AS bigint) * interval '1 second' LIMIT $2))";
    int64_t total = 0;
    while (true) {
        pg::Result r = conn.exec(sql, {std::to_string(older_than_s), std::to_string(batch)});
        int64_t n = std::strtoll(r.cmd_tuples(), nullptr, 10);
        total += n;
        if (n < batch) {
            return total;
        }
    }
}

} // namespace outbox::inbox
