#include "event.hpp"

#include "error.hpp"
#include "json.hpp"
#include "uuid.hpp"

#include <chrono>
#include <cstring>
#include <ctime>

namespace outbox {
namespace {

constexpr size_t max_aggregate_type = 64;
constexpr size_t max_short_text = 255;

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

void check_text(std::string_view field, std::string_view v) {
    if (std::memchr(v.data(), '\0', v.size()) != nullptr) {
        fail(Errc::invalid_event, std::string(field) + " contains a NUL byte");
    }
    if (!valid_utf8(v)) {
        fail(Errc::invalid_event, std::string(field) + " is not valid UTF-8");
    }
}

void check_short(const char *field, const std::string &v, size_t max) {
    if (v.size() > max) {
        fail(Errc::invalid_event, std::string(field) + " is too long (" + std::to_string(v.size()) +
                                      " bytes, at most " + std::to_string(max) + ")");
    }
}

} // namespace

const char *operation_name(Operation op) noexcept {
    switch (op) {
    case Operation::post:
        return "POST";
    case Operation::put:
        return "PUT";
    case Operation::patch:
        return "PATCH";
    case Operation::del:
        return "DELETE";
    case Operation::none:
        break;
    }
    return "";
}

Operation parse_operation(std::string_view s) {
    std::string up;
    for (char c : s) {
        up.push_back(static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c));
    }
    if (up == "POST") {
        return Operation::post;
    }
    if (up == "PUT") {
        return Operation::put;
    }
    if (up == "PATCH") {
        return Operation::patch;
    }
    if (up == "DELETE") {
        return Operation::del;
    }
    fail(Errc::invalid_event, "operation must be POST, PUT, PATCH, DELETE or FORCE_DELETE");
}

const std::vector<FieldInfo> &event_fields() {
    static const std::vector<FieldInfo> fields = {
        {"aggregate_type", FieldKind::text},
        {"aggregate_id", FieldKind::text},
        {"operation", FieldKind::text},
        {"payload", FieldKind::json},
        {"previous_payload", FieldKind::json},
        {"metadata", FieldKind::json},
        {"user", FieldKind::text},
        {"event_type", FieldKind::text},
        {"idempotency_key", FieldKind::text},
        {"event_id", FieldKind::text},
        {"force_delete", FieldKind::flag},
    };
    return fields;
}

const std::vector<FieldInfo> &envelope_fields() {
    static const std::vector<FieldInfo> fields = {
        {"OUTBOX_ID", FieldKind::text},        {"EVENT_TYPE", FieldKind::text}, {"AGGREGATE_ID", FieldKind::text},
        {"AGGREGATE_TYPE", FieldKind::text},   {"OPERATION", FieldKind::text},  {"PAYLOAD", FieldKind::json},
        {"PREVIOUS_PAYLOAD", FieldKind::json}, {"METADATA", FieldKind::json},   {"USER", FieldKind::text},
        {"CREATED_AT", FieldKind::text},
    };
    return fields;
}

std::string event_type_for(const Config &cfg, const std::string &aggregate_type, Operation op, bool force) {
    auto it = cfg.type_map.find(aggregate_type);
    std::string name = it != cfg.type_map.end() ? it->second : aggregate_type;
    switch (op) {
    case Operation::post:
        return name + "Created";
    case Operation::put:
    case Operation::patch:
        return name + "Updated";
    case Operation::del:
        return name + (force ? "ForceDeleted" : "Deleted");
    case Operation::none:
        break;
    }
    fail(Errc::invalid_event, "operation is required");
}

Timestamp now_utc() {
    auto now = std::chrono::system_clock::now();
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
    std::time_t secs = static_cast<std::time_t>(us / 1000000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[96];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(us % 1000000));
    return {buf, static_cast<uint64_t>(us / 1000)};
}

void Event::set(std::string_view field, std::string_view value) {
    if (field == "operation") {
        std::string up(value);
        for (auto &c : up) {
            c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
        }
        if (up == "FORCE_DELETE") {
            operation = Operation::del;
            force_delete = true;
        } else {
            operation = parse_operation(value);
            force_delete = false;
        }
        return;
    }
    if (field == "force_delete") {
        if (value == "1" || value == "true") {
            force_delete = true;
        } else if (value == "0" || value == "false") {
            force_delete = false;
        } else {
            fail(Errc::invalid_event, "force_delete must be true or false");
        }
        return;
    }
    check_text(field, value);
    std::string v(value);
    if (field == "aggregate_type") {
        aggregate_type = std::move(v);
    } else if (field == "aggregate_id") {
        aggregate_id = std::move(v);
    } else if (field == "payload") {
        payload = std::move(v);
    } else if (field == "previous_payload") {
        previous_payload = std::move(v);
    } else if (field == "metadata") {
        metadata = std::move(v);
    } else if (field == "user") {
        user = std::move(v);
    } else if (field == "event_type") {
        event_type = std::move(v);
    } else if (field == "idempotency_key") {
        idempotency_key = std::move(v);
    } else if (field == "event_id") {
        event_id = std::move(v);
    } else {
        fail(Errc::unknown_key, "unknown event field " + quote_input(field));
    }
}

void Event::unset(std::string_view field) {
    if (field == "previous_payload") {
        previous_payload.reset();
    } else if (field == "metadata") {
        metadata.reset();
    } else if (field == "user") {
        user.reset();
    } else if (field == "event_type") {
        event_type.reset();
    } else if (field == "idempotency_key") {
        idempotency_key.reset();
    } else if (field == "event_id") {
        event_id.reset();
    } else {
        fail(Errc::invalid_argument, "field " + quote_input(field) + " cannot be unset");
    }
}

void Event::prepare(const Config &cfg) {
    if (written) {
        reset_identity();
    }
    if (aggregate_type.empty()) {
        fail(Errc::invalid_event, "aggregate_type is required");
    }
    check_short("aggregate_type", aggregate_type, max_aggregate_type);
    for (char c : aggregate_type) {
        if (!is_name_char(c)) {
            fail(Errc::invalid_event, "aggregate_type may contain only letters, digits, '_' and '-'");
        }
    }
    if (aggregate_id.empty()) {
        fail(Errc::invalid_event, "aggregate_id is required");
    }
    check_short("aggregate_id", aggregate_id, max_short_text);
    if (operation == Operation::none) {
        fail(Errc::invalid_event, "operation is required");
    }
    if (force_delete && operation != Operation::del) {
        fail(Errc::invalid_event, "force_delete applies only to DELETE");
    }
    if (payload.empty()) {
        fail(Errc::invalid_event, "payload is required");
    }
    if (payload.size() > cfg.max_payload_bytes) {
        fail(Errc::too_large, "payload is " + std::to_string(payload.size()) + " bytes, over the limit of " +
                                  std::to_string(cfg.max_payload_bytes) + " (event.max_payload_bytes)");
    }
    json::require_object(payload, "payload");
    if (previous_payload) {
        if (previous_payload->size() > cfg.max_payload_bytes) {
            fail(Errc::too_large, "previous_payload is over the limit of " + std::to_string(cfg.max_payload_bytes) +
                                      " bytes (event.max_payload_bytes)");
        }
        json::require_object(*previous_payload, "previous_payload");
    }
    if (metadata) {
        if (metadata->size() > cfg.max_payload_bytes) {
            fail(Errc::too_large, "metadata is over the limit of " + std::to_string(cfg.max_payload_bytes) + " bytes");
        }
        json::require_object(*metadata, "metadata");
    }
    if (user) {
        check_short("user", *user, max_short_text);
    }
    if (idempotency_key) {
        if (idempotency_key->empty()) {
            fail(Errc::invalid_event, "idempotency_key must not be empty");
        }
        check_short("idempotency_key", *idempotency_key, max_short_text);
    }
    if (event_type) {
        if (event_type->empty()) {
            fail(Errc::invalid_event, "event_type must not be empty");
        }
        check_short("event_type", *event_type, max_short_text);
    }
    if (event_id && !uuid::valid(*event_id)) {
        fail(Errc::invalid_event, "event_id must be a UUID (8-4-4-4-12 hex digits)");
    }

    resolved_type = event_type ? *event_type : event_type_for(cfg, aggregate_type, operation, force_delete);
    if (resolved_id.empty()) {
        Timestamp ts = now_utc();
        created_at = ts.iso;
        resolved_id = event_id ? *event_id : uuid::v7(ts.unix_ms);
        for (auto &c : resolved_id) {
            c = static_cast<char>(c >= 'A' && c <= 'F' ? c + 32 : c);
        }
    }
}

void Event::reset_identity() {
    resolved_id.clear();
    resolved_type.clear();
    created_at.clear();
    seq = 0;
    written = false;
}

} // namespace outbox
