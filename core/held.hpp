// Parked aggregates of a subscriber (issue 31): a handler's failure parks the event's aggregate
// instead of holding the queue. The failing event and every later event of that aggregate are kept
// in PostgreSQL, in the inbox's schema, and acknowledged; the consumer loop retries the aggregate's
// head with backoff (consumer.retry_initial_ms doubling to consumer.retry_max_ms) until it
// succeeds, or parks it for an operator after consumer.max_attempts attempts or at once for a
// permanent failure. Redrive and skip are state changes here that the running loops carry out.
//
// Tables (schema.cpp, inbox step 4): <inbox>_held one row per held aggregate of a consumer, with
// its state (retrying, redriving, parked), the head's attempts, errors and times; <inbox>_held_events
// the held messages (properties and body, as delivered); <inbox>_skipped what operators skipped.
//
// Every loop statement returns exactly one row and uses its parameters once each, in order, so a
// face's driver can run it with any placeholder style.
#pragma once

#include "amqp.hpp"
#include "config.hpp"
#include "pg.hpp"
#include "store.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outbox {
struct Delivery;
}

namespace outbox::held {

// How a failing handler classified its failure.
enum class Failure { transient = 1, permanent = 2 };

// The states of a held aggregate.
inline constexpr const char *retrying = "retrying";   // its head is retried when next_attempt_at comes
inline constexpr const char *redriving = "redriving"; // an operator asked for one more try, now
inline constexpr const char *parked = "parked";       // waits for an operator

// The aggregate a delivery is held under: its own, or ("", event id) when it has none.
struct Aggregate {
    std::string type;
    std::string id;
};
Aggregate aggregate_of(const Delivery &d);

// The message as stored: its properties (and exchange, routing key) as JSON, and back.
std::string encode_properties(const amqp::Message &m);
amqp::Message decode_message(const std::string &properties, const std::string &body);

// The wait before the attempt after `attempts` failed ones: retry_initial_ms doubling, at most retry_max_ms.
int64_t backoff_ms(const Config &cfg, int64_t attempts);
// The state after a failure that made `attempts` attempts of the head.
const char *state_after(const Config &cfg, Failure f, int64_t attempts, bool redriving);

// ---- statements of the consumer loop ----

// In the delivery's transaction, when the dedupe said its aggregate is held: keeps the message
// behind the head. Returns one row: how many rows were added (0: it was held already).
store::Statement park_behind(const Config &cfg, const std::string &consumer, const Delivery &d);
// After a handler's failure of a live delivery (its transaction rolled back), in one of its own:
// holds the aggregate with this event as its head (or behind the head when another instance held
// it meanwhile). Returns one row: the state the aggregate took (NULL: it was held already).
store::Statement hold(const Config &cfg, const std::string &consumer, const Delivery &d, Failure f,
                      const std::string &error);
// In a transaction of its own: the due held aggregate first in line (locked; others' skipped) with
// its head. Returns one row: aggregate_type, aggregate_id, state, attempts, outbox_id, properties,
// body (all NULL when none is due; the event columns NULL when the aggregate holds no event).
store::Statement claim(const Config &cfg, const std::string &consumer);
// The claimed head was handled (or was a duplicate): removes it; the aggregate is live again when
// nothing else is held, else its next event is due now. Returns one row: whether events are still
// held (bool), rows changed.
store::Statement release(const Config &cfg, const std::string &consumer, const Aggregate &a,
                         const std::string &event_id);
// The claimed head failed again (its transaction rolled back), in a transaction of its own.
// Returns one row: the state the aggregate took.
store::Statement failed(const Config &cfg, const std::string &consumer, const Aggregate &a, const char *state,
                        int64_t attempts, int64_t wait_ms, const std::string &error);

// ---- the operator's view and actions ----

struct Parked {
    std::string consumer; // "" for the relay's parked aggregates (source "relay")
    std::string source;   // "consumer" or "relay"
    std::string aggregate_type, aggregate_id;
    std::string state;
    int64_t attempts = 0;
    std::string head_event_id, head_event_type;
    int64_t head_seq = 0;
    std::string last_error;
    std::string first_failed_at, last_failed_at, next_attempt_at; // ISO 8601, UTC
    int64_t waiting = 0;       // events held behind the head
    double parked_age_s = 0;   // now - first_failed_at
};

// Held aggregates, oldest failure first: of `consumer` (empty: every subscriber), and with
// `include_relay` the relay's parked aggregates too. At most `limit` rows.
std::vector<Parked> list(pg::Conn &conn, const Config &cfg, const std::string &consumer, bool include_relay,
                         int limit);
std::string to_json(const std::vector<Parked> &rows);

// One more try of the aggregate's head, now, by whichever instance of `consumer` claims it first;
// failing, it is parked again with its new error. Returns the aggregates redriven (0 or 1).
// consumer "": the relay's parked events of the aggregate are due again now.
int64_t redrive(pg::Conn &conn, const Config &cfg, const std::string &consumer, const Aggregate &a);
// The same for every parked aggregate of `consumer`.
int64_t redrive_all(pg::Conn &conn, const Config &cfg, const std::string &consumer);

// Gives up the aggregate's head: recorded in <inbox>_skipped with who and why, and in the inbox
// (a redelivery of it is a duplicate); the aggregate's next event is due now. `event_id`, when
// given, must be the head (so an operator never skips an event they did not see). Throws
// Error(not_found) when the aggregate is not held or its head is another event. Runs in a
// transaction of its own. Returns the id of the event skipped.
// consumer "": the relay's parked aggregate, whose head must be FAILED (publishing it given up):
// it is never published, recorded in <inbox>_skipped with consumer "", and the next parked event
// of the aggregate is due now.
std::string skip(pg::Conn &conn, const Config &cfg, const std::string &consumer, const Aggregate &a,
                 const std::string &event_id, const std::string &by, const std::string &reason);

struct Summary {
    std::string consumer; // "": the relay
    int64_t parked = 0;   // aggregates parked (waiting for an operator)
    int64_t retrying = 0; // aggregates being retried
    double oldest_parked_age_s = 0;
    // A subscriber's lag: how far the newest event it processed is behind the newest event the
    // relay published, in the events' own time (their uuid v7 ids); 0 when caught up. The relay's
    // row: the age of its oldest unpublished event (0 when none).
    double lag_s = 0;
};
// Per subscriber (every consumer with rows in the inbox, at most 200, and every one holding
// aggregates), then the relay: what an operator alerts on (the relay's /metrics, the console).
std::vector<Summary> summary(pg::Conn &conn, const Config &cfg);
// The summary as Prometheus text exposition (0.0.4): per subscriber (label subscriber)
// outbox_parked_aggregates, outbox_retrying_aggregates, outbox_oldest_parked_age_seconds and
// outbox_subscriber_lag_seconds; the relay's outbox_relay_parked_aggregates,
// outbox_relay_oldest_parked_age_seconds and outbox_oldest_unpublished_age_seconds.
std::string metrics_text(const std::vector<Summary> &rows);

} // namespace outbox::held
