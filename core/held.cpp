#include "held.hpp"

#include "consumer.hpp"
#include "error.hpp"
#include "identifiers.hpp"
#include "inbox.hpp"
#include "json.hpp"
#include "stream.hpp"
#include "uuid.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace outbox::held {
namespace {

std::string table(const Config &cfg, const char *suffix) {
    return ident::qualified(cfg.schema, cfg.inbox_table + suffix);
}

// Header values that are not UTF-8 text without NUL (a byte array) are kept as hex.
std::string hex(const std::string &s) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char c : s) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    return out;
}

std::string unhex(const std::string &s) {
    std::string out;
    for (size_t i = 0; i + 1 < s.size(); i += 2) {
        out.push_back(static_cast<char>(std::strtol(s.substr(i, 2).c_str(), nullptr, 16)));
    }
    return out;
}

bool text_ok(const std::string &s) {
    return valid_utf8(s) && s.find('\0') == std::string::npos;
}

void add_text(cJSON *obj, const char *key, const std::string &v) {
    if (!v.empty()) {
        cJSON_AddStringToObject(obj, key, text_ok(v) ? v.c_str() : "");
    }
}

std::string text_of(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? std::string(v->valuestring) : std::string();
}

int64_t number_of(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? static_cast<int64_t>(v->valuedouble) : 0;
}

std::optional<std::string> opt(const std::string &s) {
    return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

// The columns every held message is stored with, as parameters $n.. in this order.
const char *event_columns = "consumer, aggregate_type, aggregate_id, seq, outbox_id, event_type, properties, body";

pg::Params event_params(const std::string &consumer, const Delivery &d) {
    const Aggregate a = aggregate_of(d);
    return {consumer,     a.type,         a.id, d.seq > 0 ? opt(std::to_string(d.seq)) : std::nullopt,
            d.event_id,   d.event_type,   encode_properties(d.raw), d.raw.body};
}

// The VALUES of one held message, its parameters starting at $first.
std::string event_values(int first) {
    std::string s = "SELECT ";
    const char *casts[] = {"text", "text", "text", "bigint", "uuid", "text", "text", "text"};
    const char *names[] = {"consumer",  "aggregate_type", "aggregate_id", "seq",
                           "outbox_id", "event_type",     "properties",   "body"};
    for (int i = 0; i < 8; ++i) {
        s += (i > 0 ? ", " : "") + std::string("CAST(CAST($") + std::to_string(first + i) + " AS text) AS " +
             casts[i] + ") AS " + names[i];
    }
    return s;
}

} // namespace

Aggregate aggregate_of(const Delivery &d) {
    if (d.aggregate_type.empty() || d.aggregate_id.empty()) {
        return {"", d.event_id};
    }
    return {d.aggregate_type, d.aggregate_id};
}

std::string encode_properties(const amqp::Message &m) {
    json::Ptr o(cJSON_CreateObject());
    add_text(o.get(), "exchange", m.exchange);
    add_text(o.get(), "routing_key", m.routing_key);
    const amqp::Properties &p = m.props;
    add_text(o.get(), "content_type", p.content_type);
    add_text(o.get(), "message_id", p.message_id);
    add_text(o.get(), "type", p.type);
    add_text(o.get(), "correlation_id", p.correlation_id);
    add_text(o.get(), "app_id", p.app_id);
    if (p.delivery_mode != 0) {
        cJSON_AddNumberToObject(o.get(), "delivery_mode", p.delivery_mode);
    }
    if (p.timestamp != 0) {
        cJSON_AddNumberToObject(o.get(), "timestamp", static_cast<double>(p.timestamp));
    }
    cJSON *headers = cJSON_AddArrayToObject(o.get(), "headers");
    for (const auto &[key, value] : p.headers) {
        if (!text_ok(key) || key == "x-delivery-count") {
            continue;
        }
        cJSON *h = cJSON_CreateArray();
        cJSON_AddItemToArray(h, cJSON_CreateString(key.c_str()));
        if (const auto *s = std::get_if<std::string>(&value)) {
            cJSON_AddItemToArray(h, cJSON_CreateString(text_ok(*s) ? "s" : "x"));
            cJSON_AddItemToArray(h, cJSON_CreateString(text_ok(*s) ? s->c_str() : hex(*s).c_str()));
        } else if (const auto *i = std::get_if<int64_t>(&value)) {
            // As text: a double would round integers past 2^53.
            cJSON_AddItemToArray(h, cJSON_CreateString("i"));
            cJSON_AddItemToArray(h, cJSON_CreateString(std::to_string(*i).c_str()));
        } else {
            cJSON_AddItemToArray(h, cJSON_CreateString("b"));
            cJSON_AddItemToArray(h, cJSON_CreateBool(std::get<bool>(value)));
        }
        cJSON_AddItemToArray(headers, h);
    }
    return json::print(o.get());
}

amqp::Message decode_message(const std::string &properties, const std::string &body) {
    amqp::Message m;
    m.body = body;
    json::Ptr o = json::parse(properties);
    if (!o || !cJSON_IsObject(o.get())) {
        fail(Errc::internal, "a held message's properties are not a JSON object");
    }
    m.exchange = text_of(o.get(), "exchange");
    m.routing_key = text_of(o.get(), "routing_key");
    m.props.content_type = text_of(o.get(), "content_type");
    m.props.message_id = text_of(o.get(), "message_id");
    m.props.type = text_of(o.get(), "type");
    m.props.correlation_id = text_of(o.get(), "correlation_id");
    m.props.app_id = text_of(o.get(), "app_id");
    m.props.delivery_mode = static_cast<uint8_t>(number_of(o.get(), "delivery_mode"));
    m.props.timestamp = number_of(o.get(), "timestamp");
    const cJSON *headers = cJSON_GetObjectItemCaseSensitive(o.get(), "headers");
    const cJSON *h = nullptr;
    cJSON_ArrayForEach(h, headers) {
        const cJSON *k = cJSON_GetArrayItem(h, 0), *t = cJSON_GetArrayItem(h, 1), *v = cJSON_GetArrayItem(h, 2);
        if (!cJSON_IsString(k) || !cJSON_IsString(t) || v == nullptr) {
            continue;
        }
        const std::string type = t->valuestring;
        if (type == "b") {
            m.props.headers.emplace_back(k->valuestring, amqp::FieldValue(cJSON_IsTrue(v) != 0));
        } else if (type == "i" && cJSON_IsString(v)) {
            m.props.headers.emplace_back(k->valuestring,
                                         amqp::FieldValue(static_cast<int64_t>(std::strtoll(v->valuestring, nullptr, 10))));
        } else if (cJSON_IsString(v)) {
            m.props.headers.emplace_back(
                k->valuestring, amqp::FieldValue(type == "x" ? unhex(v->valuestring) : std::string(v->valuestring)));
        }
    }
    return m;
}

int64_t backoff_ms(const Config &cfg, int64_t attempts) {
    int64_t wait = cfg.consumer_retry_initial_ms;
    for (int64_t i = 1; i < attempts && wait < cfg.consumer_retry_max_ms; ++i) {
        wait *= 2;
    }
    return std::min<int64_t>(wait, cfg.consumer_retry_max_ms);
}

const char *state_after(const Config &cfg, Failure f, int64_t attempts, bool redriving_now) {
    if (f == Failure::permanent || redriving_now || attempts >= cfg.consumer_max_attempts) {
        return parked;
    }
    return retrying;
}

store::Statement park_behind(const Config &cfg, const std::string &consumer, const Delivery &d) {
    std::string sql = "WITH v AS (" + event_values(1) + "), ins AS (INSERT INTO " + table(cfg, "_held_events") + " (" +
                      event_columns + ") SELECT * FROM v ON CONFLICT (consumer, outbox_id) DO NOTHING RETURNING 1)"
                      " SELECT count(*) FROM ins";
    return {std::move(sql), event_params(consumer, d), {}};
}

store::Statement hold(const Config &cfg, const std::string &consumer, const Delivery &d, Failure f,
                      const std::string &error) {
    const char *state = state_after(cfg, f, 1, false);
    std::string sql =
        "WITH v AS (" + event_values(1) +
        "), w AS (SELECT CAST($9 AS text) AS state, CAST(CAST($10 AS text) AS bigint) AS wait_ms, CAST($11 AS text) AS"
        " error), a AS (INSERT INTO " +
        table(cfg, "_held") +
        " AS a (consumer, aggregate_type, aggregate_id, state, attempts, next_attempt_at, first_failed_at,"
        " last_failed_at, last_error) SELECT v.consumer, v.aggregate_type, v.aggregate_id, w.state, 1,"
        " now() + w.wait_ms * interval '1 millisecond', now(), now(), w.error FROM v, w"
        " ON CONFLICT (consumer, aggregate_type, aggregate_id) DO NOTHING RETURNING a.state),"
        " e AS (INSERT INTO " +
        table(cfg, "_held_events") + " (" + event_columns +
        ") SELECT * FROM v ON CONFLICT (consumer, outbox_id) DO NOTHING RETURNING 1)"
        " SELECT (SELECT state FROM a), (SELECT count(*) FROM e)";
    pg::Params p = event_params(consumer, d);
    p.emplace_back(state);
    p.emplace_back(std::to_string(backoff_ms(cfg, 1)));
    p.emplace_back(error);
    return {std::move(sql), std::move(p), {}};
}

store::Statement claim(const Config &cfg, const std::string &consumer) {
    const std::string agg = table(cfg, "_held"), events = table(cfg, "_held_events");
    std::string sql = "SELECT c.* FROM (SELECT CAST($1 AS text) AS consumer) v LEFT JOIN LATERAL ("
                      "SELECT a.aggregate_type, a.aggregate_id, a.state, a.attempts, CAST(e.outbox_id AS text),"
                      " e.properties, e.body FROM " +
                      agg + " a LEFT JOIN LATERAL (SELECT * FROM " + events +
                      " e WHERE e.consumer = a.consumer AND e.aggregate_type = a.aggregate_type"
                      " AND e.aggregate_id = a.aggregate_id ORDER BY e.seq NULLS LAST, e.held_order LIMIT 1) e ON true"
                      " WHERE a.consumer = v.consumer AND a.state IN ('retrying', 'redriving')"
                      " AND a.next_attempt_at <= now() ORDER BY a.next_attempt_at LIMIT 1"
                      " FOR UPDATE OF a SKIP LOCKED) c ON true";
    return {std::move(sql), {consumer}, {}};
}

store::Statement release(const Config &cfg, const std::string &consumer, const Aggregate &a,
                         const std::string &event_id) {
    const std::string agg = table(cfg, "_held"), events = table(cfg, "_held_events");
    std::string sql =
        "WITH v AS (SELECT CAST($1 AS text) AS consumer, CAST($2 AS text) AS aggregate_type, CAST($3 AS text) AS"
        " aggregate_id, CAST(CAST($4 AS text) AS uuid) AS outbox_id),"
        " d AS (DELETE FROM " +
        events +
        " e USING v WHERE e.consumer = v.consumer AND e.outbox_id = v.outbox_id RETURNING 1),"
        " rest AS (SELECT EXISTS (SELECT 1 FROM " +
        events +
        " e, v WHERE e.consumer = v.consumer AND e.aggregate_type = v.aggregate_type"
        " AND e.aggregate_id = v.aggregate_id AND e.outbox_id <> v.outbox_id) AS more),"
        " gone AS (DELETE FROM " +
        agg +
        " a USING v WHERE a.consumer = v.consumer AND a.aggregate_type = v.aggregate_type"
        " AND a.aggregate_id = v.aggregate_id AND NOT (SELECT more FROM rest) RETURNING 1),"
        " next AS (UPDATE " +
        agg +
        " a SET state = 'retrying', attempts = 0, next_attempt_at = now(), first_failed_at = NULL,"
        " last_failed_at = NULL, last_error = NULL FROM v WHERE a.consumer = v.consumer"
        " AND a.aggregate_type = v.aggregate_type AND a.aggregate_id = v.aggregate_id AND (SELECT more FROM rest)"
        " RETURNING 1)"
        " SELECT (SELECT more FROM rest), (SELECT count(*) FROM d) + (SELECT count(*) FROM gone)"
        " + (SELECT count(*) FROM next)";
    return {std::move(sql), {consumer, a.type, a.id, event_id}, {}};
}

store::Statement failed(const Config &cfg, const std::string &consumer, const Aggregate &a, const char *state,
                        int64_t attempts, int64_t wait_ms, const std::string &error) {
    std::string sql = "WITH v AS (SELECT CAST($1 AS text) AS consumer, CAST($2 AS text) AS aggregate_type,"
                      " CAST($3 AS text) AS aggregate_id, CAST($4 AS text) AS state,"
                      " CAST(CAST($5 AS text) AS integer) AS attempts, CAST(CAST($6 AS text) AS bigint) AS wait_ms,"
                      " CAST($7 AS text) AS error), u AS (UPDATE " +
                      table(cfg, "_held") +
                      " a SET state = v.state, attempts = v.attempts, last_error = v.error,"
                      " last_failed_at = now(), first_failed_at = COALESCE(a.first_failed_at, now()),"
                      " next_attempt_at = now() + v.wait_ms * interval '1 millisecond' FROM v"
                      " WHERE a.consumer = v.consumer AND a.aggregate_type = v.aggregate_type"
                      " AND a.aggregate_id = v.aggregate_id RETURNING a.state)"
                      " SELECT (SELECT state FROM u)";
    return {std::move(sql),
            {consumer, a.type, a.id, std::string(state), std::to_string(attempts), std::to_string(wait_ms), error},
            {}};
}

} // namespace outbox::held
