// An AMQP delivery turned into an event (or the reason it is not one): everything a consumer
// believes about a message from the wire is decided here, so it can be fuzzed on its own.
#include "consumer.hpp"

#include "error.hpp"
#include "json.hpp"
#include "uuid.hpp"

namespace outbox {
namespace {

const int64_t *header_int(const amqp::Properties &p, const char *name) {
    for (const auto &[k, v] : p.headers) {
        if (k == name) {
            return std::get_if<int64_t>(&v);
        }
    }
    return nullptr;
}

std::string field_text(const amqp::FieldValue &v) {
    if (const auto *s = std::get_if<std::string>(&v)) {
        return *s;
    }
    if (const auto *i = std::get_if<int64_t>(&v)) {
        return std::to_string(*i);
    }
    return std::get<bool>(v) ? "true" : "false";
}

} // namespace

std::optional<std::string> Delivery::property(const std::string &key) const {
    const auto &p = raw.props;
    std::optional<std::string> value;
    if (key == "message_id") {
        value = p.message_id;
    } else if (key == "type") {
        value = p.type;
    } else if (key == "content_type") {
        value = p.content_type;
    } else if (key == "app_id") {
        value = p.app_id;
    } else if (key == "correlation_id") {
        value = p.correlation_id;
    } else if (key == "routing_key") {
        value = raw.routing_key;
    } else if (key == "exchange") {
        value = raw.exchange;
    } else if (key == "consumer_tag") {
        value = raw.consumer_tag;
    } else if (key == "timestamp") {
        value = p.timestamp != 0 ? std::optional<std::string>(std::to_string(p.timestamp)) : std::nullopt;
    } else if (key == "delivery_mode") {
        value = std::to_string(p.delivery_mode);
    } else {
        for (const auto &[hk, hv] : p.headers) {
            if (hk == key) {
                value = field_text(hv);
                break;
            }
        }
    }
    if (value && value->empty() && key != "routing_key" && key != "exchange") {
        return std::nullopt;
    }
    return value;
}

const std::string *Delivery::field(const std::string &name) const {
    for (const auto &[k, v] : fields) {
        if (k == name) {
            return &v;
        }
    }
    return nullptr;
}

std::string parse_delivery(amqp::Message &&msg, size_t max_body, Delivery &d) {
    d = Delivery{};
    d.raw = std::move(msg);
    const std::string &body = d.raw.body;
    if (body.size() > max_body) {
        return "body is " + std::to_string(body.size()) + " bytes, over consumer.max_body_bytes (" +
               std::to_string(max_body) + ")";
    }
    const std::string &ct = d.raw.props.content_type;
    if (!ct.empty() && ct.rfind("application/json", 0) != 0) {
        return "content type " + quote_input(ct) + " is not application/json";
    }
    if (!valid_utf8(body)) {
        return "body is not valid UTF-8";
    }
    json::Ptr doc = json::parse(body);
    if (!doc) {
        return "body is not valid JSON";
    }
    if (!cJSON_IsObject(doc.get())) {
        return "body is not a JSON object";
    }
    std::vector<json::Member> members;
    if (!json::object_members(body, members)) {
        return "body is not a JSON object";
    }
    for (const auto &m : members) {
        if (m.value == "null") {
            d.null_fields.push_back(m.key);
            continue;
        }
        std::string value;
        if (!m.value.empty() && m.value.front() == '"') {
            if (!json::decode_string(m.value, value)) {
                return "field " + m.key + " is not a valid string";
            }
            // The body is valid UTF-8, but escapes are not checked by that: \u0000 would be cut
            // short by every C string (libpq parameters, outbox_message_field). A lone surrogate
            // escape would decode to bytes that are not UTF-8; cJSON refuses those today, and this
            // keeps it so. No event the library writes holds either.
            if (value.find('\0') != std::string::npos) {
                return "field " + m.key + " contains a NUL character (\\u0000)";
            }
            if (!valid_utf8(value)) {
                return "field " + m.key + " is not valid UTF-8 (a lone surrogate escape)";
            }
        } else {
            value = std::string(m.value);
        }
        d.fields.emplace_back(m.key, std::move(value));
    }
    auto need_string = [&](const char *name, std::string &out) -> std::string {
        for (const auto &m : members) {
            if (m.key == name) {
                if (m.value.empty() || m.value.front() != '"') {
                    return std::string(name) + " must be a string";
                }
                out = *d.field(name);
                return out.empty() ? std::string(name) + " is empty" : std::string();
            }
        }
        return std::string("missing ") + name;
    };
    for (auto [name, out] : {std::pair<const char *, std::string *>{"OUTBOX_ID", &d.event_id},
                             {"EVENT_TYPE", &d.event_type},
                             {"AGGREGATE_TYPE", &d.aggregate_type},
                             {"AGGREGATE_ID", &d.aggregate_id}}) {
        std::string why = need_string(name, *out);
        if (!why.empty()) {
            return why;
        }
    }
    if (!uuid::valid(d.event_id)) {
        return "OUTBOX_ID is not a UUID";
    }
    const std::string *payload = d.field("PAYLOAD");
    if (payload == nullptr || payload->empty() || payload->front() != '{') {
        return "PAYLOAD must be a JSON object";
    }
    if (const int64_t *seq = header_int(d.raw.props, "outbox-seq")) {
        d.seq = *seq > 0 ? *seq : 0;
    }
    if (const int64_t *count = header_int(d.raw.props, "x-delivery-count")) {
        d.delivery_count = *count >= 0 ? *count : -1;
    } else if (d.raw.redelivered) {
        d.delivery_count = -1;
    } else {
        d.delivery_count = 0;
    }
    return {};
}

} // namespace outbox
