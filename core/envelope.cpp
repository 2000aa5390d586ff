#include "envelope.hpp"

#include "json.hpp"

namespace outbox {

std::string envelope_body(const EventRow &row) {
    std::string out;
    out.reserve(row.payload.size() + row.metadata.size() +
                (row.previous_payload ? row.previous_payload->size() : 0) + 256);
    out += "{\"OUTBOX_ID\":";
    json::append_string(out, row.outbox_id);
    out += ",\"EVENT_TYPE\":";
    json::append_string(out, row.event_type);
    out += ",\"AGGREGATE_ID\":";
    json::append_string(out, row.aggregate_id);
    out += ",\"AGGREGATE_TYPE\":";
    json::append_string(out, row.aggregate_type);
    out += ",\"OPERATION\":";
    json::append_string(out, row.operation);
    out += ",\"PAYLOAD\":";
    out += row.payload;
    if (row.previous_payload) {
        out += ",\"PREVIOUS_PAYLOAD\":";
        out += *row.previous_payload;
    }
    out += ",\"METADATA\":";
    out += row.metadata.empty() ? std::string("{}") : row.metadata;
    out += ",\"USER\":";
    if (row.user) {
        json::append_string(out, *row.user);
    } else {
        out += "null";
    }
    out += ",\"CREATED_AT\":";
    json::append_string(out, row.created_at);
    out += "}";
    return out;
}

amqp::Properties envelope_properties(const EventRow &row, bool replay) {
    amqp::Properties p;
    p.content_type = "application/json";
    p.delivery_mode = 2;
    p.message_id = row.outbox_id;
    p.type = row.event_type;
    p.timestamp = row.created_epoch_s;
    p.app_id = "outbox";
    p.headers.emplace_back("outbox-aggregate-type", row.aggregate_type);
    p.headers.emplace_back("outbox-aggregate-id", row.aggregate_id);
    p.headers.emplace_back("outbox-seq", row.seq);
    p.headers.emplace_back(kPartitionKeyHeader, partition_key(row.aggregate_type, row.aggregate_id));
    // Trace context only costs a parse when the metadata can contain one.
    if (row.metadata.find("trace") != std::string::npos) {
        if (json::Ptr meta = json::parse(row.metadata)) {
            for (const char *key : {"traceparent", "tracestate"}) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta.get(), key);
                if (cJSON_IsString(v) && v->valuestring != nullptr) {
                    p.headers.emplace_back(key, std::string(v->valuestring));
                }
            }
        }
    }
    if (replay) {
        p.headers.emplace_back("outbox-replay", true);
    }
    return p;
}

std::string partition_key(const std::string &aggregate_type, const std::string &aggregate_id) {
    std::string key = std::to_string(aggregate_type.size());
    key.reserve(key.size() + aggregate_type.size() + aggregate_id.size() + 2);
    key += ':';
    key += aggregate_type;
    key += ':';
    key += aggregate_id;
    return key;
}

std::string routing_key(const EventRow &row) {
    std::string rk;
    rk.reserve(row.aggregate_type.size() + row.operation.size() + 1);
    for (char c : row.aggregate_type) {
        rk.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    }
    rk.push_back('.');
    for (char c : row.operation) {
        rk.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    }
    return rk;
}

} // namespace outbox
