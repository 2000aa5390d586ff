#include "store.hpp"

#include "error.hpp"
#include "json.hpp"

namespace outbox::store {
namespace {

std::string write_sql_dollar(const Config &cfg) {
    // Parameters appear once each and in order, so the text converts 1:1 to '?' placeholders.
    // Every parameter is declared text (CAST($n AS text), then converted), so drivers that
    // prepare on the server and bind strictly typed values (asyncpg) accept the strings too.
    return "WITH s AS (INSERT INTO " + cfg.aggregates_qualified() +
           " AS a (aggregate_type, aggregate_id, last_seq) VALUES (CAST($1 AS text), CAST($2 AS text), 1)"
           " ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1"
           " RETURNING a.aggregate_type, a.aggregate_id, a.last_seq) "
           "INSERT INTO " +
           cfg.outbox_qualified() +
           " (aggregate_type, aggregate_id, seq, outbox_id, event_type, operation, payload, previous_payload,"
           " metadata, actor, created_at, next_attempt_at, idempotency_key) "
           "SELECT s.aggregate_type, s.aggregate_id, s.last_seq, CAST(CAST($3 AS text) AS uuid), CAST($4 AS text),"
           " CAST($5 AS text), CAST(CAST($6 AS text) AS json), CAST(CAST($7 AS text) AS json), CAST(CAST($8 AS text) "
           "AS json), CAST($9 AS text),"
           " CAST(CAST($10 AS text) AS timestamptz), now(), CAST($11 AS text) FROM s" +
           // The channel is a validated identifier, so it is safe as a literal here; the same
           // payload within one transaction is delivered once, at commit.
           (cfg.write_notify ? " CROSS JOIN (SELECT pg_notify('" + cfg.notify_channel + "', '')) AS n"
                             : std::string()) +
           " RETURNING seq";
}

pg::Params write_params(const Event &ev) {
    return {ev.aggregate_type,
            ev.aggregate_id,
            ev.resolved_id,
            ev.resolved_type,
            std::string(operation_name(ev.operation)),
            ev.payload,
            ev.previous_payload,
            ev.metadata ? *ev.metadata : std::string("{}"),
            ev.user,
            ev.created_at,
            ev.idempotency_key};
}

} // namespace

Statement with_placeholders(Statement st, const std::string &style) {
    const bool named = style == "named" || style == "pyformat";
    const bool percent = style == "format" || style == "pyformat";
    if (style == "dollar") {
        return st;
    }
    if (!named && !percent && style != "qmark") {
        fail(Errc::invalid_argument,
             "placeholders must be dollar, qmark, format, named or pyformat, not '" + style + "'");
    }
    std::string out;
    out.reserve(st.sql.size() + st.params.size() * 4);
    for (size_t i = 0; i < st.sql.size(); ++i) {
        const char c = st.sql[i];
        if (c == '$' && i + 1 < st.sql.size() && st.sql[i + 1] >= '0' && st.sql[i + 1] <= '9') {
            std::string n;
            while (i + 1 < st.sql.size() && st.sql[i + 1] >= '0' && st.sql[i + 1] <= '9') {
                n.push_back(st.sql[++i]);
            }
            out += style == "qmark" ? "?" : style == "format" ? "%s" : style == "named" ? ":p" + n : "%(p" + n + ")s";
        } else if (percent && c == '%') {
            out += "%%";
        } else {
            out.push_back(c);
        }
    }
    st.sql = std::move(out);
    st.names.clear();
    if (named) {
        for (size_t i = 0; i < st.params.size(); ++i) {
            st.names.push_back("p" + std::to_string(i + 1));
        }
    }
    return st;
}

std::string statement_json(const Statement &st) {
    std::string j = "{\"sql\":";
    json::append_string(j, st.sql);
    const auto list = [&j](const char *key, size_t n, const auto &item) {
        j += std::string(",\"") + key + "\":[";
        for (size_t i = 0; i < n; ++i) {
            j += i > 0 ? "," : "";
            item(i);
        }
        j += "]";
    };
    list("params", st.params.size(), [&](size_t i) {
        if (st.params[i]) {
            json::append_string(j, *st.params[i]);
        } else {
            j += "null";
        }
    });
    if (!st.names.empty()) {
        list("names", st.names.size(), [&](size_t i) { json::append_string(j, st.names[i]); });
    }
    return j + "}";
}

Statement render_write(const Config &cfg, Event &ev) {
    ev.prepare(cfg);
    std::string sql = write_sql_dollar(cfg);
    Statement st = with_placeholders(Statement{std::move(sql), write_params(ev), {}}, cfg.placeholders);
    ev.written = true;
    return st;
}

void write(pg::Conn &conn, const Config &cfg, Event &ev) {
    ev.prepare(cfg);
    conn.check_usable();
    const PGTransactionStatusType st = conn.tx_status();
    if (st == PQTRANS_INERROR) {
        fail(Errc::transaction, "the caller's transaction is aborted; roll it back before writing");
    }
    if (st == PQTRANS_ACTIVE) {
        fail(Errc::invalid_argument, "the connection is busy with another query");
    }
    const std::string sql = write_sql_dollar(cfg);
    const bool savepoint = ev.idempotency_key.has_value() && st == PQTRANS_INTRANS;
    if (savepoint) {
        conn.exec_simple("SAVEPOINT outbox_write");
    }
    try {
        // Prepared once per owned connection: parsing and planning this statement cost about as
        // much as running it.
        pg::Result r = conn.exec_cached(sql, write_params(ev));
        ev.seq = r.get_int(0, 0);
    } catch (const Error &e) {
        if (e.code() != Errc::duplicate || !ev.idempotency_key) {
            throw;
        }
        if (savepoint) {
            conn.exec_simple("ROLLBACK TO SAVEPOINT outbox_write; RELEASE SAVEPOINT outbox_write");
        }
        std::string existing;
        if (conn.tx_status() != PQTRANS_INERROR) {
            pg::Result r = conn.exec("SELECT outbox_id FROM " + cfg.outbox_qualified() + " WHERE idempotency_key = $1",
                                     {*ev.idempotency_key});
            if (r.rows() > 0) {
                existing = " by event " + std::string(r.get(0, 0));
            }
        }
        fail(Errc::duplicate, "idempotency_key is already used" + existing);
    }
    if (savepoint) {
        conn.exec_simple("RELEASE SAVEPOINT outbox_write");
    }
    ev.written = true;
}

std::string visit_sql(const Config &cfg) {
    const std::string t = cfg.outbox_qualified();
    // A loose index scan over the unpublished-events index: each step of the recursion is one
    // index probe that jumps to the next aggregate with unpublished events and returns its
    // head (lowest unpublished seq). The outer LIMIT stops the recursion, so the cost is the
    // number of aggregates visited, whatever the backlog or how it is spread.
    const std::string probe = "SELECT o.aggregate_type, o.aggregate_id, o.seq FROM " + t +
                              " o WHERE o.status <> 'PUBLISHED' AND (o.aggregate_type, o.aggregate_id) > ";
    const std::string order = " ORDER BY o.aggregate_type, o.aggregate_id, o.seq LIMIT 1";
    return "WITH RECURSIVE agg AS ((" + probe + "(CAST($1 AS text), CAST($2 AS text))" + order +
           ") UNION ALL SELECT n.aggregate_type, n.aggregate_id, n.seq FROM agg a CROSS JOIN LATERAL (" + probe +
           "(a.aggregate_type, a.aggregate_id)" + order +
           ") n) "
           "SELECT v.aggregate_type, v.aggregate_id, v.seq, h.status = 'PENDING' AND h.next_attempt_at <= now() "
           "FROM (SELECT * FROM agg LIMIT CAST($3 AS integer)) v JOIN " +
           t + " h ON h.aggregate_type = v.aggregate_type AND h.aggregate_id = v.aggregate_id AND h.seq = v.seq";
}

std::string claim_sql(const Config &cfg) {
    const std::string t = cfg.outbox_qualified();
    // Locks the chosen heads (skipping any another relay holds), re-checking they are still
    // pending and due, and fetches the events that follow each head, heads first.
    return "WITH heads AS (SELECT o.aggregate_type, o.aggregate_id, o.seq FROM " + t +
           " o JOIN unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS bigint[])) AS c(aggregate_type,"
           " aggregate_id, seq) ON o.aggregate_type = c.aggregate_type AND o.aggregate_id = c.aggregate_id"
           " AND o.seq = c.seq WHERE o.status = 'PENDING' AND o.next_attempt_at <= now()"
           " FOR UPDATE OF o SKIP LOCKED) "
           "SELECT e.outbox_id, e.event_type, e.aggregate_type, e.aggregate_id, e.seq, e.operation, e.payload,"
           " e.previous_payload, e.metadata, e.actor, e.created_at_text, e.created_at_epoch, e.retry_count,"
           " e.seq - h.seq AS depth "
           "FROM heads h CROSS JOIN LATERAL (SELECT f.outbox_id, f.event_type, f.aggregate_type, f.aggregate_id,"
           " f.seq, f.operation, f.payload, f.previous_payload, f.metadata, f.actor,"
           " to_char(f.created_at AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS') AS created_at_text,"
           " floor(extract(epoch FROM f.created_at))::bigint AS created_at_epoch, f.retry_count, f.status,"
           " f.next_attempt_at FROM " +
           t +
           " f WHERE f.aggregate_type = h.aggregate_type AND f.aggregate_id = h.aggregate_id AND f.seq >= h.seq"
           " AND f.status <> 'PUBLISHED' ORDER BY f.seq LIMIT " +
           std::to_string(claim_depth) +
           ") e WHERE e.status = 'PENDING' AND e.next_attempt_at <= now()"
           " ORDER BY depth, e.aggregate_type, e.aggregate_id LIMIT CAST($4 AS integer)";
}

} // namespace outbox::store
