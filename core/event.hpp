// The event as the write path sees it: the documents' fields, validated and named once here,
// whichever language or driver the write comes from.
#pragma once

#include "config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

enum class Operation { none, post, put, patch, del };

// What an event field's value is: text, JSON text (payload, previous_payload, metadata), or a
// flag ("true"/"false": force_delete).
enum class FieldKind { text = 0, json = 1, flag = 2 };
struct FieldInfo {
    const char *name;
    FieldKind kind;
};
// The fields Event::set() takes, in the one order every binding passes them.
const std::vector<FieldInfo> &event_fields();
// The envelope's fields (a message's, outbox_message_field()), in the envelope's order.
const std::vector<FieldInfo> &envelope_fields();

struct Event {
    // As set by the caller.
    std::string aggregate_type;
    std::string aggregate_id;
    Operation operation = Operation::none;
    bool force_delete = false;
    std::string payload;
    std::optional<std::string> previous_payload;
    std::optional<std::string> metadata;
    std::optional<std::string> user;
    std::optional<std::string> event_type; // explicit; wins over naming
    std::optional<std::string> idempotency_key;
    std::optional<std::string> event_id; // explicit id (any UUID); otherwise a new v7

    // Filled in by prepare() and by the write.
    std::string resolved_id;
    std::string resolved_type;
    std::string created_at; // ISO 8601 UTC with microseconds
    int64_t seq = 0;        // per-aggregate sequence, known after the write
    bool written = false;   // set after a successful write or render: the next prepare() makes a new id

    // Sets a field by name ("aggregate_type", "payload", ...); value bytes are checked for NULs
    // and UTF-8 here, so the error names the field. Throws Error(invalid_argument/invalid_event).
    void set(std::string_view field, std::string_view value);
    // Clears an optional field (previous_payload, metadata, user, event_type, idempotency_key, event_id).
    void unset(std::string_view field);

    // Validates everything, assigns id, type and created_at. A failed write keeps the id, so a
    // retry in a new transaction writes the same event; after a successful write the next
    // prepare() starts a new event (a builder can be reused in a loop).
    void prepare(const Config &cfg);
    // Drops the resolved id/type/seq so the same builder can make a new event.
    void reset_identity();
};

const char *operation_name(Operation op) noexcept;
Operation parse_operation(std::string_view s); // case-insensitive; throws Error(invalid_event)

// Event type naming of the documents: POST -> {Name}Created, PUT/PATCH -> {Name}Updated,
// DELETE -> {Name}Deleted, forced DELETE -> {Name}ForceDeleted.
std::string event_type_for(const Config &cfg, const std::string &aggregate_type, Operation op, bool force);

// Current time as ISO 8601 UTC with microseconds, and the same instant in Unix milliseconds.
struct Timestamp {
    std::string iso;
    uint64_t unix_ms;
};
Timestamp now_utc();

} // namespace outbox
