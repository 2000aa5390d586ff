// The consumer side's inbox: "have I (consumer) already processed event X?", recorded in the
// handler's own transaction, plus what the per-aggregate sequence says about order.
#pragma once

#include "config.hpp"
#include "pg.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace outbox::inbox {

enum class Order {
    unchecked = 0, // order checking off, no sequence on the message, or a duplicate
    in_order = 1,  // the next sequence number of its aggregate (or the first one seen, when it is 1)
    stale = 2,     // a later (or the same) sequence of its aggregate was already processed
    gap = 3,       // earlier sequence numbers of its aggregate were never processed
};

struct Key {
    std::string consumer;
    std::string event_id;
    std::string aggregate_type; // may be empty (no order check)
    std::string aggregate_id;
    int64_t seq = 0; // 0 = unknown
};

struct Result {
    bool first_time = false;
    Order order = Order::unchecked;
    int64_t last_seq = 0; // highest sequence of the aggregate processed before this one (0 = none)
};

struct Statement {
    std::string sql;
    pg::Params params;
};

// Validates the key (consumer name 1..255 UTF-8, event id a UUID); throws Error(invalid_argument).
void validate(const Key &key);

// The dedupe statement: inserts (consumer, event) into the inbox unless present and, with
// order checking, advances the consumer's position for the aggregate. Returns one row:
// first_time (bool), previous last_seq (bigint or NULL). Parameters used once each, in order.
Statement render(const Config &cfg, const Key &key, bool check_order);

// Interprets the row the statement returned.
Result interpret(const Key &key, bool first_time, std::optional<int64_t> previous, bool check_order);

// Runs the statement in the connection's current transaction (or on its own when idle).
Result dedupe(pg::Conn &conn, const Config &cfg, const Key &key, bool check_order);

// BEGIN and the statement in one round trip (see pg::Conn::begin_and_exec): the connection must
// be idle; on return the handler's transaction is open with the event recorded (or found).
Result begin_and_dedupe(pg::Conn &conn, const Config &cfg, const Key &key, bool check_order);

// Deletes inbox rows processed more than `older_than_s` seconds ago, `batch` rows per
// statement (each its own short transaction when the connection is idle); returns the count.
// An age below inbox.retention_s is refused (Error(invalid_argument)): a redelivery may still
// need those rows.
int64_t purge(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch);

const char *order_name(Order o) noexcept;

} // namespace outbox::inbox
