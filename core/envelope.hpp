// The message on the wire: the documents' JSON envelope and the AMQP properties around it.
// One implementation, pinned by the shared test vectors in tests/vectors/.
#pragma once

#include "amqp.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

// One outbox row as the relay (or replay) reads it.
struct EventRow {
    std::string outbox_id;
    std::string event_type;
    std::string aggregate_type;
    std::string aggregate_id;
    int64_t seq = 0;
    std::string operation;
    std::string payload;                         // JSON object text, spliced verbatim
    std::optional<std::string> previous_payload; // JSON object text
    std::string metadata = "{}";                 // JSON object text
    std::optional<std::string> user;
    std::string created_at;      // YYYYMMDDHHMMSS, UTC
    int64_t created_epoch_s = 0; // the same instant, for the timestamp property
};

// {"OUTBOX_ID":..,"EVENT_TYPE":..,"AGGREGATE_ID":..,"AGGREGATE_TYPE":..,"OPERATION":..,"PAYLOAD":{..},
//  ["PREVIOUS_PAYLOAD":{..},]"METADATA":{..},"USER":..,"CREATED_AT":".."}
// PAYLOAD, PREVIOUS_PAYLOAD and METADATA are the stored JSON text, unchanged (no re-encoding of numbers).
std::string envelope_body(const EventRow &row);

// delivery_mode 2, content_type application/json, message_id = OUTBOX_ID, type = EVENT_TYPE,
// timestamp, app_id "outbox", headers: outbox-aggregate-type, outbox-aggregate-id, outbox-seq,
// outbox-partition-key (see partition_key), traceparent/tracestate when the metadata carries them, outbox-replay when
// replay is true.
amqp::Properties envelope_properties(const EventRow &row, bool replay = false);

// The header partitioned subscribers hash (their x-consistent-hash exchange's hash-header):
// "<byte length of the type>:<type>:<id>", so no two aggregates share a key whatever bytes
// their type and id hold ("3:PRD:123").
inline constexpr const char *kPartitionKeyHeader = "outbox-partition-key";
std::string partition_key(const std::string &aggregate_type, const std::string &aggregate_id);

// {aggregate_type}.{operation}, lower-cased.
std::string routing_key(const EventRow &row);

// The relay and replay select an event's instant as date_part('epoch', created_at): its epoch
// seconds, as PostgreSQL gives them cheaply (float8; to_char and a numeric extract per row cost the server a fifth of a
// read). set_created turns that text into created_at and created_epoch_s, as
// to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS') and floor(extract(epoch ...)) would.
// Locale-independent. An instant with no such form ('infinity', written through the view, or
// beyond year 9999's range of doubles) gets "" and 0 rather than failing the read.
void set_created(EventRow &row, std::string_view epoch_text);

} // namespace outbox
