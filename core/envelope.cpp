#include "envelope.hpp"

#include "json.hpp"

#include <charconv>
#include <cstdio>
#include <ctime>

namespace outbox {

std::string envelope_body(const EventRow &row) {
    std::string out;
    out.reserve(row.payload.size() + row.metadata.size() + (row.previous_payload ? row.previous_payload->size() : 0) +
                256);
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
    p.headers.reserve(6); // the four below, a trace context's two
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

void set_created(EventRow &row, std::string_view epoch_text) {
    row.created_at.clear();
    row.created_epoch_s = 0;
    // float8 text: [-]digits[.digits] for any instant within 1e15 s of 1970; otherwise an exponent,
    // Infinity or NaN, which take the fallback.
    const std::string_view fraction = epoch_text.substr(std::min(epoch_text.find('.'), epoch_text.size()));
    const std::string_view whole = epoch_text.substr(0, epoch_text.size() - fraction.size());
    int64_t secs = 0;
    const auto [end, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), secs);
    if (ec != std::errc() || end != whole.data() + whole.size() ||
        fraction.find_first_not_of("0123456789", 1) != std::string_view::npos) {
        return;
    }
    if (!whole.empty() && whole[0] == '-' && fraction.find_first_not_of('0', 1) != std::string_view::npos) {
        --secs; // floor, not truncation, before 1970
    }
    const auto t = static_cast<std::time_t>(secs);
    std::tm tm{};
    if (gmtime_r(&t, &tm) == nullptr) {
        return;
    }
    const long long year = static_cast<long long>(tm.tm_year) + 1900;
    if (year >= 0 && year <= 9999) { // YYYYMMDDHHMMSS without a format string (once per event read)
        char buf[14];
        const int parts[] = {tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec};
        auto y = static_cast<int>(year);
        for (int i = 3; i >= 0; --i, y /= 10) {
            buf[i] = static_cast<char>('0' + y % 10);
        }
        for (size_t i = 0; i < 5; ++i) {
            buf[4 + 2 * i] = static_cast<char>('0' + parts[i] / 10);
            buf[5 + 2 * i] = static_cast<char>('0' + parts[i] % 10);
        }
        row.created_at.assign(buf, sizeof buf);
    } else {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%04lld%02d%02d%02d%02d%02d", year, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                      tm.tm_min, tm.tm_sec);
        row.created_at = buf;
    }
    row.created_epoch_s = secs;
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
