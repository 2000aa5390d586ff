#include "store.hpp"

#include "error.hpp"
#include "identifiers.hpp"
#include "json.hpp"

namespace outbox::store {
namespace {

std::string build_write_sql(const Config &cfg, bool with_key) {
    // Parameters appear once each and in order, so the text converts 1:1 to '?' placeholders.
    // Every parameter is declared text (CAST($n AS text), then converted), so drivers that
    // prepare on the server and bind strictly typed values (asyncpg) accept the strings too.
    // The position is taken after the aggregate's counter row is locked (the CTE runs first), so
    // within an aggregate position order is seq order is commit order.
    const std::string events = ident::qualified(cfg.schema, cfg.table + "_events");
    std::string sql = "WITH s AS (INSERT INTO " + cfg.aggregates_qualified() +
                      " AS a (aggregate_type, aggregate_id, last_seq) VALUES (CAST($1 AS text), CAST($2 AS text), 1)"
                      " ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1"
                      " RETURNING a.aggregate_type, a.aggregate_id, a.last_seq)";
    sql += with_key ? ", e AS (" : " ";
    sql += "INSERT INTO " + events +
           " (position, aggregate_type, aggregate_id, seq, outbox_id, event_type, operation, payload,"
           " previous_payload, metadata, actor, created_at, idempotency_key) "
           "SELECT nextval('" +
           ident::qualified(cfg.schema, cfg.table + "_position_seq") +
           "'), s.aggregate_type, s.aggregate_id, s.last_seq, CAST(CAST($3 AS text) AS uuid), CAST($4 AS text),"
           " CAST($5 AS text), CAST(CAST($6 AS text) AS json), CAST(CAST($7 AS text) AS json), CAST(CAST($8 AS text) "
           "AS json), CAST($9 AS text), CAST(CAST($10 AS text) AS timestamptz), CAST($11 AS text) FROM s" +
           // The channel is a validated identifier, so it is safe as a literal here; the same
           // payload within one transaction is delivered once, at commit.
           (cfg.write_notify ? " CROSS JOIN (SELECT pg_notify('" + cfg.notify_channel + "', '')) AS n" : std::string());
    if (!with_key) {
        return sql + " RETURNING seq";
    }
    // A key is unique across the outbox: its row in the keys table (whose primary key carries the
    // name outbox_idempotency_index() reports) makes a second use a unique violation.
    return sql + " RETURNING position, seq, outbox_id, idempotency_key) INSERT INTO " +
           ident::qualified(cfg.schema, cfg.table + "_keys") +
           " (idempotency_key, outbox_id, position) SELECT idempotency_key, outbox_id, position FROM e RETURNING"
           " (SELECT seq FROM e)";
}

// The write's statement, built once per configuration and thread: every write sends the same text
// (its prepared statement is found by it), and building it, identifiers quoted, took a sixth of
// outbox_write's instructions. What it depends on is compared each time, so a changed
// configuration gets its own text.
const std::string &write_sql_dollar(const Config &cfg, bool with_key) {
    struct Built {
        std::string schema, table, channel;
        bool notify = false, made = false;
        std::string sql;
    };
    thread_local Built built[2]; // without and with an idempotency key
    Built &b = built[with_key ? 1 : 0];
    if (!b.made || b.schema != cfg.schema || b.table != cfg.table || b.notify != cfg.write_notify ||
        b.channel != cfg.notify_channel) {
        b.sql = build_write_sql(cfg, with_key);
        b.schema = cfg.schema;
        b.table = cfg.table;
        b.notify = cfg.write_notify;
        b.channel = cfg.notify_channel;
        b.made = true;
    }
    return b.sql;
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
    return render_write(cfg, ev, cfg.placeholders);
}

Statement render_write(const Config &cfg, Event &ev, const std::string &style) {
    ev.prepare(cfg);
    std::string sql = write_sql_dollar(cfg, ev.idempotency_key.has_value());
    Statement st = with_placeholders(Statement{std::move(sql), write_params(ev), {}}, style);
    ev.written = true;
    return st;
}

namespace {

// What write() checks before sending anything; its statement.
const std::string &write_start(pg::Conn &conn, const Config &cfg, Event &ev) {
    ev.prepare(cfg);
    conn.check_usable();
    const PGTransactionStatusType st = conn.tx_status();
    if (st == PQTRANS_INERROR) {
        fail(Errc::transaction, "the caller's transaction is aborted; roll it back before writing");
    }
    if (st == PQTRANS_ACTIVE) {
        fail(Errc::invalid_argument, "the connection is busy with another query");
    }
    return write_sql_dollar(cfg, ev.idempotency_key.has_value());
}

// The INSERT's result: the event's sequence number.
void write_done(Event &ev, const pg::Result &r) {
    ev.seq = r.get_int(0, 0);
    ev.written = true;
}

Wait wait_for(pg::Io io) {
    switch (io) {
    case pg::Io::none:
        return Wait::done;
    case pg::Io::read:
        return Wait::readable;
    case pg::Io::write:
        return Wait::writable;
    }
    return Wait::readable;
}

} // namespace

void write(pg::Conn &conn, const Config &cfg, Event &ev) {
    const std::string &sql = write_start(conn, cfg, ev);
    const bool savepoint = ev.idempotency_key.has_value() && conn.tx_status() == PQTRANS_INTRANS;
    if (savepoint) {
        conn.exec_simple("SAVEPOINT outbox_write");
    }
    pg::Result r;
    try {
        // Prepared once per owned connection: parsing and planning this statement cost about as
        // much as running it.
        r = conn.exec_cached(sql, write_params(ev));
    } catch (const Error &e) {
        if (e.code() != Errc::duplicate || !ev.idempotency_key) {
            throw;
        }
        if (savepoint) {
            conn.exec_simple("ROLLBACK TO SAVEPOINT outbox_write; RELEASE SAVEPOINT outbox_write");
        }
        std::string existing;
        if (conn.tx_status() != PQTRANS_INERROR) {
            pg::Result k = conn.exec("SELECT outbox_id FROM " + ident::qualified(cfg.schema, cfg.table + "_keys") +
                                         " WHERE idempotency_key = $1",
                                     {*ev.idempotency_key});
            if (k.rows() > 0) {
                existing = " by event " + std::string(k.get(0, 0));
            }
        }
        fail(Errc::duplicate, "idempotency_key is already used" + existing);
    }
    if (savepoint) {
        conn.exec_simple("RELEASE SAVEPOINT outbox_write");
    }
    write_done(ev, r);
}

Wait write_send(pg::Conn &conn, const Config &cfg, Event &ev) {
    if (ev.idempotency_key) {
        return Wait::blocking;
    }
    const std::string &sql = write_start(conn, cfg, ev);
    return wait_for(conn.send_async(sql, write_params(ev)));
}

Wait write_poll(pg::Conn &conn, Event &ev) {
    pg::Result r;
    const pg::Io io = conn.poll_async(r);
    if (io == pg::Io::none) {
        write_done(ev, r);
    }
    return wait_for(io);
}

} // namespace outbox::store
