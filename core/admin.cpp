#include "admin.hpp"

#include "amqp.hpp"
#include "connect.hpp"
#include "envelope.hpp"
#include "error.hpp"
#include "json.hpp"
#include "retention.hpp"
#include "stream.hpp"
#include "uuid.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

namespace outbox::admin {

namespace {

std::optional<double> opt_double(const pg::Result &r, int row, int col) {
    if (r.is_null(row, col)) {
        return std::nullopt;
    }
    return std::strtod(std::string(r.get(row, col)).c_str(), nullptr);
}

void append_number(std::string &out, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    out += buf;
}

void append_field(std::string &out, const char *name, int64_t v) {
    out += '"';
    out += name;
    out += "\":" + std::to_string(v) + ",";
}

void append_field(std::string &out, const char *name, const std::optional<double> &v) {
    out += '"';
    out += name;
    out += "\":";
    if (v) {
        append_number(out, *v);
    } else {
        out += "null";
    }
    out += ',';
}

// Text compared with a column: checked here, so bad input is an argument error, not a late
// "invalid byte sequence" from the server.
void require_text(const std::string &v, const char *what) {
    if (v.size() > 64 * 1024 || v.find('\0') != std::string::npos || !valid_utf8(v)) {
        fail(Errc::invalid_argument, std::string(what) + " must be UTF-8 text without NUL bytes, at most 65536 bytes");
    }
}

} // namespace

double lag_seconds(pg::Conn &conn, const Config &cfg) {
    pg::Result r = conn.exec("SELECT COALESCE(GREATEST(extract(epoch FROM now() - min(next_attempt_at)), 0), 0)::float8"
                             " FROM " +
                             cfg.outbox_qualified() + " WHERE status = 'PENDING' AND next_attempt_at <= now()");
    return opt_double(r, 0, 0).value_or(0);
}

Stats stats(pg::Conn &conn, const Config &cfg, double lag_threshold_s) {
    const std::string t = cfg.outbox_qualified();
    const std::string rc = stream::receipts_table(cfg);
    Stats s;
    // One statement, one snapshot. The status filters reach only the view's branches that can match
    // (events above the relay's cursor, parked events): bounded by the backlog.
    pg::Result r = conn.exec(
        "SELECT"
        " (SELECT count(*) FROM " +
            t +
            " WHERE status = 'PENDING'),"
            " (SELECT count(*) FROM " +
            t +
            " WHERE status = 'PENDING' AND next_attempt_at <= now()),"
            " (SELECT count(*) FROM " +
            t +
            " WHERE status = 'FAILED'),"
            " (SELECT COALESCE(sum(to_position - from_position + 1), 0) FROM " +
            rc +
            " WHERE published_at > now() - interval '1 minute'),"
            " (SELECT COALESCE(sum(to_position - from_position + 1), 0) FROM " +
            rc +
            " WHERE published_at > now() - interval '1 hour'),"
            " (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM " +
            t +
            " WHERE status = 'PENDING'),"
            " (SELECT COALESCE(GREATEST(extract(epoch FROM now() - min(next_attempt_at)), 0), 0)::float8 FROM " +
            t +
            " WHERE status = 'PENDING' AND next_attempt_at <= now()),"
            " (SELECT extract(epoch FROM now() - max(published_at))::float8 FROM " +
            rc +
            "),"
            // Planner estimates: the events partitions and the version-1 table.
            " (SELECT COALESCE(sum(GREATEST(c.reltuples, 0)), 0)::bigint FROM pg_class c WHERE c.oid = to_regclass($1)"
            " OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass($2)))",
        {stream::v1_table(cfg), stream::events_table(cfg)});
    s.pending = r.get_int(0, 0);
    s.pending_due = r.get_int(0, 1);
    s.failed = r.get_int(0, 2);
    s.published_last_minute = r.get_int(0, 3);
    s.published_last_hour = r.get_int(0, 4);
    s.oldest_pending_age_s = opt_double(r, 0, 5);
    s.lag_s = opt_double(r, 0, 6).value_or(0);
    s.last_published_age_s = opt_double(r, 0, 7);
    s.total_estimate = r.is_null(0, 8) ? 0 : r.get_int(0, 8);
    s.published_estimate = std::max<int64_t>(s.total_estimate - s.pending - s.failed, 0);
    // Events not published: above the cursor or parked, so bounded by the backlog.
    pg::Result g = conn.exec("SELECT aggregate_type, count(*) FILTER (WHERE status = 'PENDING'),"
                             " count(*) FILTER (WHERE status = 'FAILED') FROM " +
                             t + " WHERE status <> 'PUBLISHED' GROUP BY aggregate_type ORDER BY aggregate_type");
    for (int i = 0; i < g.rows(); ++i) {
        s.per_type.push_back({std::string(g.get(i, 0)), g.get_int(i, 1), g.get_int(i, 2)});
    }
    s.relay_health = s.pending == 0 ? "idle" : s.lag_s <= lag_threshold_s ? "ok" : "lagging";
    return s;
}

std::string stats_json(const Stats &s) {
    std::string out = "{";
    append_field(out, "pending", s.pending);
    append_field(out, "pending_due", s.pending_due);
    append_field(out, "failed", s.failed);
    append_field(out, "published_last_minute", s.published_last_minute);
    append_field(out, "published_last_hour", s.published_last_hour);
    append_field(out, "oldest_pending_age_s", s.oldest_pending_age_s);
    append_field(out, "lag_s", std::optional<double>(s.lag_s));
    append_field(out, "last_published_age_s", s.last_published_age_s);
    append_field(out, "total_estimate", s.total_estimate);
    append_field(out, "published_estimate", s.published_estimate);
    out += "\"estimates\":[\"total_estimate\",\"published_estimate\"],\"relay_health\":";
    json::append_string(out, s.relay_health);
    out += ",\"per_aggregate_type\":[";
    for (size_t i = 0; i < s.per_type.size(); ++i) {
        out += i == 0 ? "{\"aggregate_type\":" : ",{\"aggregate_type\":";
        json::append_string(out, s.per_type[i].aggregate_type);
        out += ",\"pending\":" + std::to_string(s.per_type[i].pending) +
               ",\"failed\":" + std::to_string(s.per_type[i].failed) + "}";
    }
    out += "]}";
    return out;
}

int64_t retry_failed(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type, const std::string &event_id,
                     int max_retries) {
    if (!event_id.empty() && !uuid::valid(event_id)) {
        fail(Errc::invalid_argument, "event id must be a UUID");
    }
    require_text(aggregate_type, "aggregate type");
    pg::Result r = conn.exec(
        "UPDATE " + stream::parked_table(cfg) +
            " SET status = 'PENDING', next_attempt_at = now() WHERE status = 'FAILED'"
            " AND (CAST($1 AS text) IS NULL OR aggregate_type = $1)"
            " AND (CAST($2 AS text) IS NULL OR outbox_id = CAST(CAST($2 AS text) AS uuid))"
            " AND (CAST(CAST($3 AS text) AS int) <= 0 OR retry_count < CAST(CAST($3 AS text) AS int))",
        {aggregate_type.empty() ? std::nullopt : std::optional<std::string>(aggregate_type),
         event_id.empty() ? std::nullopt : std::optional<std::string>(event_id), std::to_string(max_retries)});
    return std::strtoll(r.cmd_tuples(), nullptr, 10);
}

namespace {
// Ages past 100 years overflow PostgreSQL's interval arithmetic: refused, not a late error.
void check_purge_age(int64_t older_than_s) {
    if (older_than_s < 0 || older_than_s > 100LL * 365 * 24 * 3600) {
        fail(Errc::invalid_argument, "purge needs an age of 0 to 100 years and a positive batch size");
    }
}
} // namespace

int64_t purge_published(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch,
                        const std::function<void(int64_t)> &on_progress) {
    check_purge_age(older_than_s);
    if (batch <= 0) {
        fail(Errc::invalid_argument, "purge needs an age of 0 to 100 years and a positive batch size");
    }
    if (conn.tx_status() != PQTRANS_IDLE) {
        fail(Errc::transaction, "purge runs its own short transactions: call it outside a transaction");
    }
    return retention::purge(conn, cfg, older_than_s, batch, on_progress).events;
}

int64_t purge_estimate(pg::Conn &conn, const Config &cfg, int64_t older_than_s) {
    check_purge_age(older_than_s);
    return retention::estimate(conn, cfg, older_than_s);
}

int64_t seq_of_event(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type,
                     const std::string &aggregate_id, const std::string &event_id) {
    if (!uuid::valid(event_id)) {
        fail(Errc::invalid_argument, "event id must be a UUID");
    }
    require_text(aggregate_type, "aggregate type");
    require_text(aggregate_id, "aggregate id");
    pg::Result r = conn.exec("SELECT seq FROM " + cfg.outbox_qualified() +
                                 " WHERE outbox_id = CAST(CAST($1 AS text) AS uuid) AND aggregate_type = $2"
                                 " AND aggregate_id = $3",
                             {event_id, aggregate_type, aggregate_id});
    if (r.rows() == 0) {
        fail(Errc::not_found, "event " + event_id + " is not an event of " + aggregate_type + ":" + aggregate_id);
    }
    return r.get_int(0, 0);
}

int64_t seq_since(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type, const std::string &aggregate_id,
                  const std::string &since) {
    require_text(aggregate_type, "aggregate type");
    require_text(aggregate_id, "aggregate id");
    require_text(since, "since");
    pg::Result r = conn.exec("SELECT min(seq) FROM " + cfg.outbox_qualified() +
                                 " WHERE aggregate_type = $1 AND aggregate_id = $2"
                                 " AND created_at >= CAST($3 AS timestamptz)",
                             {aggregate_type, aggregate_id, since});
    return r.is_null(0, 0) ? 0 : r.get_int(0, 0);
}

namespace {

// Waits until every tag up to `last` is acked; throws on a nack, a return or the deadline.
void await_confirms(amqp::Connection &mq, uint64_t first, uint64_t last, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    uint64_t confirmed = first - 1;
    std::unordered_map<uint64_t, bool> acked;
    while (confirmed < last) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            fail(Errc::timeout, "replay: the broker did not confirm every message in time");
        }
        auto ev = mq.wait(static_cast<int>(std::min<int64_t>(left.count(), 1000)));
        if (!ev) {
            continue;
        }
        if (const auto *a = std::get_if<amqp::Ack>(&*ev)) {
            if (a->multiple) {
                for (uint64_t tag = confirmed + 1; tag <= a->tag; ++tag) {
                    acked[tag] = true;
                }
            } else {
                acked[a->tag] = true;
            }
            while (acked.count(confirmed + 1) != 0) {
                acked.erase(++confirmed);
            }
        } else if (const auto *n = std::get_if<amqp::Nack>(&*ev)) {
            fail(Errc::broker, "replay: the broker refused message " + std::to_string(n->tag));
        } else if (const auto *ret = std::get_if<amqp::Returned>(&*ev)) {
            fail(Errc::broker, "replay: message " + ret->props.message_id + " was unroutable (" +
                                   std::to_string(ret->reply_code) + " " + ret->reply_text + ")");
        }
    }
}

} // namespace

int64_t replay(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type, const std::string &aggregate_id,
               int64_t from_seq) {
    if (aggregate_type.empty() || aggregate_id.empty()) {
        fail(Errc::invalid_argument, "replay needs an aggregate type and id");
    }
    require_text(aggregate_type, "aggregate type");
    require_text(aggregate_id, "aggregate id");
    cfg.require_amqp_url("replay");
    amqp::Connection mq(amqp_options(cfg, "outbox-replay"));
    if (cfg.exchange_declare) {
        mq.declare_exchange(cfg.exchange, cfg.exchange_type, true, false);
    }
    mq.confirm_select();
    const std::string sql =
        "SELECT outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, previous_payload,"
        " metadata, actor, date_part('epoch', created_at) FROM " + // set_created()
        cfg.outbox_qualified() +
        " WHERE aggregate_type = $1 AND aggregate_id = $2 AND seq >= CAST(CAST($3 AS text) AS bigint)"
        " ORDER BY seq LIMIT 500";
    int64_t published = 0;
    int64_t next_seq = std::max<int64_t>(from_seq, 0);
    while (true) {
        pg::Result r = conn.exec(sql, {aggregate_type, aggregate_id, std::to_string(next_seq)});
        if (r.rows() == 0) {
            return published;
        }
        const uint64_t first = mq.next_publish_tag();
        uint64_t last = first - 1;
        for (int i = 0; i < r.rows(); ++i) {
            EventRow row;
            row.outbox_id = std::string(r.get(i, 0));
            row.event_type = std::string(r.get(i, 1));
            row.aggregate_type = std::string(r.get(i, 2));
            row.aggregate_id = std::string(r.get(i, 3));
            row.seq = r.get_int(i, 4);
            row.operation = std::string(r.get(i, 5));
            row.payload = std::string(r.get(i, 6));
            row.previous_payload = r.get_opt(i, 7);
            row.metadata = std::string(r.get(i, 8));
            row.user = r.get_opt(i, 9);
            set_created(row, r.get(i, 10));
            // One channel, in seq order: the broker keeps that order in every bound queue.
            last = mq.publish(cfg.exchange, routing_key(row), true, envelope_properties(row, true), envelope_body(row));
            next_seq = row.seq + 1;
        }
        await_confirms(mq, first, last, cfg.relay_confirm_timeout_ms);
        published += r.rows();
        if (r.rows() < 500) {
            return published;
        }
    }
}

ReplayResult replay_from(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type,
                         const std::string &aggregate_id, const std::string &event_id, const std::string &since) {
    int64_t from_seq = event_id.empty() ? 0 : seq_of_event(conn, cfg, aggregate_type, aggregate_id, event_id);
    if (!since.empty()) {
        const int64_t s = seq_since(conn, cfg, aggregate_type, aggregate_id, since);
        if (s == 0) {
            return {}; // nothing created since then
        }
        from_seq = std::max(from_seq, s);
    }
    return {replay(conn, cfg, aggregate_type, aggregate_id, from_seq), from_seq};
}

} // namespace outbox::admin
