// The operator's view of held aggregates and its actions (core/held.hpp): list, redrive, skip and
// the figures alerts watch. A consumer's aggregates live in <inbox>_held; the relay's parked ones
// in the outbox's parked table (core/stream.hpp), shown in the same list with consumer "".
#include "held.hpp"

#include "error.hpp"
#include "identifiers.hpp"
#include "inbox.hpp"
#include "json.hpp"
#include "stream.hpp"
#include "uuid.hpp"

#include <cstdlib>

namespace outbox::held {
namespace {

std::string table(const Config &cfg, const char *suffix) {
    return ident::qualified(cfg.schema, cfg.inbox_table + suffix);
}

std::string iso(const char *col) {
    return std::string("to_char(") + col + " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";
}

void require_text(const std::string &v, const char *what, bool allow_empty) {
    if ((!allow_empty && v.empty()) || v.size() > 64 * 1024 || v.find('\0') != std::string::npos || !valid_utf8(v)) {
        fail(Errc::invalid_argument, std::string(what) + " must be " + (allow_empty ? "" : "non-empty ") +
                                         "UTF-8 text without NUL bytes, at most 65536 bytes");
    }
}

void require_aggregate(const std::string &consumer, const Aggregate &a, bool relay_ok) {
    if (!relay_ok || !consumer.empty()) {
        require_text(consumer, "consumer name", false);
    }
    require_text(a.type, "aggregate type", true);
    require_text(a.id, "aggregate id", false);
}

bool have_tables(pg::Conn &conn, const Config &cfg) {
    pg::Result r = conn.exec("SELECT to_regclass($1) IS NOT NULL", {table(cfg, "_held")});
    return r.get(0, 0) == "t";
}

std::string consumer_rows(const Config &cfg) {
    const std::string events = table(cfg, "_held_events");
    return "SELECT a.consumer, 'consumer' AS source, a.aggregate_type, a.aggregate_id, a.state, a.attempts,"
           " CAST(h.outbox_id AS text), h.event_type, h.seq, a.last_error, " +
           iso("a.first_failed_at") + ", " + iso("a.last_failed_at") + ", " + iso("a.next_attempt_at") +
           ", (SELECT count(*) FROM " + events +
           " w WHERE w.consumer = a.consumer AND w.aggregate_type = a.aggregate_type"
           " AND w.aggregate_id = a.aggregate_id) - CASE WHEN h.outbox_id IS NULL THEN 0 ELSE 1 END,"
           " extract(epoch FROM now() - COALESCE(a.first_failed_at, now())), a.first_failed_at AS sort_at FROM " +
           table(cfg, "_held") + " a LEFT JOIN LATERAL (SELECT * FROM " + events +
           " e WHERE e.consumer = a.consumer AND e.aggregate_type = a.aggregate_type"
           " AND e.aggregate_id = a.aggregate_id ORDER BY e.seq NULLS LAST, e.held_order LIMIT 1) h ON true"
           " WHERE (CAST($1 AS text) IS NULL OR a.consumer = $1)";
}

std::string relay_rows(const Config &cfg) {
    const std::string parked_t = stream::parked_table(cfg);
    return "SELECT '' AS consumer, 'relay' AS source, h.aggregate_type, h.aggregate_id,"
           " CASE h.status WHEN 'FAILED' THEN 'parked' ELSE 'retrying' END, h.retry_count,"
           " CAST(h.outbox_id AS text), h.event_type, h.seq, h.error_message, " +
           iso("h.parked_at") + ", NULL, " + iso("h.next_attempt_at") + ", (SELECT count(*) - 1 FROM " + parked_t +
           " w WHERE w.aggregate_type = h.aggregate_type AND w.aggregate_id = h.aggregate_id),"
           " extract(epoch FROM now() - h.parked_at), h.parked_at AS sort_at"
           " FROM (SELECT DISTINCT ON (aggregate_type, aggregate_id) * FROM " +
           parked_t + " ORDER BY aggregate_type, aggregate_id, position) h";
}

Parked row_of(const pg::Result &r, int i) {
    Parked p;
    auto text = [&](int c) { return r.is_null(i, c) ? std::string() : std::string(r.get(i, c)); };
    auto number = [&](int c) { return r.is_null(i, c) ? 0LL : r.get_int(i, c); };
    p.consumer = text(0);
    p.source = text(1);
    p.aggregate_type = text(2);
    p.aggregate_id = text(3);
    p.state = text(4);
    p.attempts = number(5);
    p.head_event_id = text(6);
    p.head_event_type = text(7);
    p.head_seq = number(8);
    p.last_error = text(9);
    p.first_failed_at = text(10);
    p.last_failed_at = text(11);
    p.next_attempt_at = text(12);
    p.waiting = number(13);
    p.parked_age_s = r.is_null(i, 14) ? 0 : std::strtod(std::string(r.get(i, 14)).c_str(), nullptr);
    return p;
}

} // namespace

std::vector<Parked> list(pg::Conn &conn, const Config &cfg, const std::string &consumer, bool include_relay,
                         int limit) {
    if (!consumer.empty()) {
        require_text(consumer, "consumer name", false);
    }
    if (limit <= 0) {
        fail(Errc::invalid_argument, "the list needs a positive limit");
    }
    std::string sql = "SELECT * FROM (" + consumer_rows(cfg);
    if (include_relay) {
        sql += " UNION ALL " + relay_rows(cfg);
    }
    sql += ") x ORDER BY sort_at NULLS LAST, consumer, aggregate_type, aggregate_id LIMIT CAST(CAST($2 AS text) AS integer)";
    pg::Result r = conn.exec(sql, {consumer.empty() ? std::nullopt : std::optional<std::string>(consumer),
                                   std::to_string(limit)});
    std::vector<Parked> out;
    for (int i = 0; i < r.rows(); ++i) {
        out.push_back(row_of(r, i));
    }
    return out;
}

std::string to_json(const std::vector<Parked> &rows) {
    std::string s = "[";
    for (const Parked &p : rows) {
        s += s.size() > 1 ? ",{" : "{";
        auto field = [&s](const char *k, const std::string &v, bool first = false) {
            s += std::string(first ? "\"" : ",\"") + k + "\":";
            if (v.empty()) {
                s += "null";
            } else {
                json::append_string(s, v);
            }
        };
        field("consumer", p.consumer, true);
        field("source", p.source);
        field("aggregate_type", p.aggregate_type);
        field("aggregate_id", p.aggregate_id);
        field("state", p.state);
        s += ",\"attempts\":" + std::to_string(p.attempts);
        field("head_event_id", p.head_event_id);
        field("head_event_type", p.head_event_type);
        s += ",\"head_seq\":" + std::to_string(p.head_seq);
        field("last_error", p.last_error);
        field("first_failed_at", p.first_failed_at);
        field("last_failed_at", p.last_failed_at);
        field("next_attempt_at", p.next_attempt_at);
        s += ",\"waiting\":" + std::to_string(p.waiting);
        char age[32];
        std::snprintf(age, sizeof age, "%.3f", p.parked_age_s);
        s += std::string(",\"parked_age_s\":") + age + "}";
    }
    return s + "]";
}

int64_t redrive(pg::Conn &conn, const Config &cfg, const std::string &consumer, const Aggregate &a) {
    require_aggregate(consumer, a, true);
    if (consumer.empty()) {
        pg::Result r = conn.exec("UPDATE " + stream::parked_table(cfg) +
                                     " SET status = 'PENDING', next_attempt_at = now()"
                                     " WHERE aggregate_type = $1 AND aggregate_id = $2",
                                 {a.type, a.id});
        return std::strtoll(r.cmd_tuples(), nullptr, 10) > 0 ? 1 : 0;
    }
    pg::Result r = conn.exec("UPDATE " + table(cfg, "_held") +
                                 " SET state = 'redriving', next_attempt_at = now()"
                                 " WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3",
                             {consumer, a.type, a.id});
    return std::strtoll(r.cmd_tuples(), nullptr, 10);
}

int64_t redrive_all(pg::Conn &conn, const Config &cfg, const std::string &consumer) {
    require_text(consumer, "consumer name", false);
    pg::Result r = conn.exec("UPDATE " + table(cfg, "_held") +
                                 " SET state = 'redriving', next_attempt_at = now()"
                                 " WHERE consumer = $1 AND state = 'parked'",
                             {consumer});
    return std::strtoll(r.cmd_tuples(), nullptr, 10);
}

namespace {

// The relay's side: its FAILED head (publishing it was given up) is never published; recorded in
// <inbox>_skipped with consumer "", the event's row as the body. The aggregate's next parked event,
// if any, is due now. A head the relay still retries (PENDING) is refused: it may be in flight.
std::string skip_relay(pg::Conn &conn, const Config &cfg, const Aggregate &a, const std::string &event_id,
                       const std::string &by, const std::string &reason) {
    const std::string parked_t = stream::parked_table(cfg);
    return pg::in_transaction(conn, [&] {
        pg::Result head = conn.exec("SELECT CAST(outbox_id AS text), status, position FROM " + parked_t +
                                        " WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY position FOR UPDATE",
                                    {a.type, a.id});
        if (head.rows() == 0) {
            fail(Errc::not_found, "the relay holds no parked event of " + a.type + ":" + a.id);
        }
        const std::string id(head.get(0, 0));
        if (!event_id.empty() && event_id != id) {
            fail(Errc::not_found, "the head of " + a.type + ":" + a.id + " at the relay is event " + id + ", not " +
                                      event_id);
        }
        if (head.get(0, 1) != "FAILED") {
            fail(Errc::not_found, "the relay is still retrying event " + id + " of " + a.type + ":" + a.id +
                                      "; it can be skipped once it is parked (FAILED)");
        }
        conn.exec("INSERT INTO " + table(cfg, "_skipped") +
                      " (consumer, outbox_id, aggregate_type, aggregate_id, seq, event_type, properties, body,"
                      " attempts, last_error, skipped_by, reason) SELECT '', p.outbox_id, p.aggregate_type,"
                      " p.aggregate_id, p.seq, p.event_type, '{}', CAST(json_build_object('payload', p.payload,"
                      " 'previous_payload', p.previous_payload, 'metadata', p.metadata, 'operation', p.operation,"
                      " 'actor', p.actor, 'created_at', p.created_at) AS text), p.retry_count, p.error_message,"
                      " CAST($1 AS text), CAST($2 AS text) FROM " +
                      parked_t + " p WHERE p.position = CAST(CAST($3 AS text) AS bigint)"
                      " ON CONFLICT (consumer, outbox_id) DO NOTHING",
                  {by, reason, std::string(head.get(0, 2))});
        conn.exec("DELETE FROM " + parked_t + " WHERE position = CAST(CAST($1 AS text) AS bigint)",
                  {std::string(head.get(0, 2))});
        if (head.rows() > 1) {
            conn.exec("UPDATE " + parked_t + " SET next_attempt_at = now() WHERE position = CAST(CAST($1 AS text) AS bigint)",
                      {std::string(head.get(1, 2))});
        }
        return id;
    });
}

} // namespace

std::string skip(pg::Conn &conn, const Config &cfg, const std::string &consumer, const Aggregate &a,
                 const std::string &event_id, const std::string &by, const std::string &reason) {
    require_aggregate(consumer, a, true);
    require_text(by, "who skips (by)", false);
    require_text(reason, "the reason", true);
    if (!event_id.empty() && !uuid::valid(event_id)) {
        fail(Errc::invalid_argument, "event id must be a UUID");
    }
    if (conn.tx_status() != PQTRANS_IDLE) {
        fail(Errc::transaction, "skip runs a transaction of its own: call it outside a transaction");
    }
    if (consumer.empty()) {
        return skip_relay(conn, cfg, a, event_id, by, reason);
    }
    return pg::in_transaction(conn, [&] {
        // The aggregate's row is locked first: a loop retrying its head finishes before this goes on.
        pg::Result agg = conn.exec("SELECT attempts, last_error FROM " + table(cfg, "_held") +
                                       " WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 FOR UPDATE",
                                   {consumer, a.type, a.id});
        if (agg.rows() == 0) {
            fail(Errc::not_found, "consumer " + consumer + " holds no aggregate " + a.type + ":" + a.id);
        }
        pg::Result head = conn.exec("SELECT CAST(outbox_id AS text), seq FROM " + table(cfg, "_held_events") +
                                        " WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3"
                                        " ORDER BY seq NULLS LAST, held_order LIMIT 1",
                                    {consumer, a.type, a.id});
        if (head.rows() == 0) {
            fail(Errc::not_found, "aggregate " + a.type + ":" + a.id + " of consumer " + consumer + " holds no event");
        }
        const std::string id(head.get(0, 0));
        if (!event_id.empty() && event_id != id) {
            fail(Errc::not_found, "the head of " + a.type + ":" + a.id + " is event " + id + ", not " + event_id);
        }
        conn.exec("INSERT INTO " + table(cfg, "_skipped") +
                      " (consumer, outbox_id, aggregate_type, aggregate_id, seq, event_type, properties, body,"
                      " attempts, last_error, skipped_by, reason) SELECT e.consumer, e.outbox_id, e.aggregate_type,"
                      " e.aggregate_id, e.seq, e.event_type, e.properties, e.body, a.attempts, a.last_error,"
                      " CAST($1 AS text), CAST($2 AS text) FROM " +
                      table(cfg, "_held_events") + " e JOIN " + table(cfg, "_held") +
                      " a USING (consumer, aggregate_type, aggregate_id) WHERE e.consumer = $3 AND e.outbox_id = "
                      "CAST(CAST($4 AS text) AS uuid) ON CONFLICT (consumer, outbox_id) DO NOTHING",
                  {by, reason, consumer, id});
        // Recorded as processed: a redelivery of it is a duplicate, and the order check moves past it.
        const int64_t seq = head.is_null(0, 1) ? 0 : head.get_int(0, 1);
        inbox::dedupe(conn, cfg, {consumer, id, a.type, a.type.empty() ? std::string() : a.id, seq},
                      cfg.inbox_order_check);
        store::Statement rel = release(cfg, consumer, a, id);
        conn.exec(rel.sql, rel.params);
        return id;
    });
}

namespace {

// The Unix milliseconds in a uuid v7's first 48 bits (SQL over the text column `col`).
std::string v7_ms(const std::string &col) {
    return "CASE WHEN substr(CAST(" + col + " AS text), 15, 1) = '7' THEN CAST(CAST(CAST('x' || substr(replace(CAST(" +
           col + " AS text), '-', ''), 1, 12) AS bit(48)) AS bigint) AS double precision) END";
}

// Per consumer: held aggregates (parked, retrying, the oldest parked age) and the lag. Consumers are
// found by a skip scan of the inbox's key (its first column), the newest event each processed by
// the last entry of that key per partition: a few index probes per consumer, never a count.
std::string consumers_sql(const Config &cfg) {
    const std::string inbox = cfg.inbox_qualified(), held_t = table(cfg, "_held");
    return "WITH RECURSIVE c AS (SELECT min(consumer) AS consumer, 1 AS n FROM " + inbox +
           " UNION ALL SELECT (SELECT min(i.consumer) FROM " + inbox +
           " i WHERE i.consumer > c.consumer), c.n + 1 FROM c WHERE c.consumer IS NOT NULL AND c.n < 200),"
           " names AS (SELECT consumer FROM c WHERE consumer IS NOT NULL UNION SELECT DISTINCT consumer FROM " +
           held_t + "), newest AS (SELECT " + v7_ms("e.outbox_id") + " AS ms FROM " + stream::events_table(cfg) +
           " e WHERE e.position <= (SELECT max(cursor) FROM " + stream::relay_table(cfg) +
           ") ORDER BY e.position DESC LIMIT 1)"
           " SELECT n.consumer, count(*) FILTER (WHERE h.state = 'parked'), count(*) FILTER (WHERE h.state <> 'parked'),"
           " COALESCE(extract(epoch FROM now() - min(h.first_failed_at) FILTER (WHERE h.state = 'parked')), 0),"
           " COALESCE(GREATEST(0, ((SELECT ms FROM newest) - (SELECT " +
           v7_ms("i.outbox_id") + " FROM " + inbox +
           " i WHERE i.consumer = n.consumer ORDER BY i.outbox_id DESC LIMIT 1)) / 1000.0), 0)"
           " FROM names n LEFT JOIN " +
           held_t + " h ON h.consumer = n.consumer GROUP BY n.consumer ORDER BY n.consumer";
}

} // namespace

std::vector<Summary> summary(pg::Conn &conn, const Config &cfg) {
    std::vector<Summary> out;
    auto real = [](const pg::Result &r, int i, int c) { return std::strtod(std::string(r.get(i, c)).c_str(), nullptr); };
    if (have_tables(conn, cfg)) {
        pg::Result r = conn.exec(consumers_sql(cfg));
        for (int i = 0; i < r.rows(); ++i) {
            out.push_back({std::string(r.get(i, 0)), r.get_int(i, 1), r.get_int(i, 2), real(r, i, 3), real(r, i, 4)});
        }
    }
    // The relay: its parked aggregates, and its oldest unpublished event: a parked one, or the first
    // above the cursor (nothing below the cursor is left unpublished but the parked ones).
    const std::string parked_t = stream::parked_table(cfg);
    pg::Result r = conn.exec(
        "SELECT count(DISTINCT (aggregate_type, aggregate_id)) FILTER (WHERE status = 'FAILED'),"
        " count(DISTINCT (aggregate_type, aggregate_id)) FILTER (WHERE status <> 'FAILED'),"
        " COALESCE(extract(epoch FROM now() - min(parked_at) FILTER (WHERE status = 'FAILED')), 0),"
        " COALESCE(extract(epoch FROM now() - LEAST(min(created_at), (SELECT e.created_at FROM " +
        stream::events_table(cfg) + " e WHERE e.position > (SELECT max(cursor) FROM " + stream::relay_table(cfg) +
        ") ORDER BY e.position LIMIT 1))), 0) FROM " + parked_t);
    out.push_back({"", r.get_int(0, 0), r.get_int(0, 1), real(r, 0, 2), real(r, 0, 3)});
    return out;
}

} // namespace outbox::held
