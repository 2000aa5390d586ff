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
    bool held = false;    // (check_held) its aggregate is held (core/held.hpp): not recorded, not to be handled
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
// check_held (the consumer loop): when the event's aggregate is held (core/held.hpp) the event is
// not recorded, and a fourth column says so; the held row is share-locked, so a redrive that
// releases the aggregate waits for this transaction, or this one for it.
Statement render(const Config &cfg, const Key &key, bool check_order, bool check_held = false);

// Interprets the row the statement returned.
Result interpret(const Key &key, bool first_time, std::optional<int64_t> previous, bool check_order);
// The same from the row as a driver prints it: first_time as t/f, true/false (any case) or 1/0,
// previous_seq as digits or null. Throws Error(invalid_argument) for anything else.
Result interpret_text(const Key &key, const char *first_time, const char *previous_seq, bool check_order,
                      const char *held = nullptr);

// Runs the statement in the connection's current transaction (or on its own when idle).
Result dedupe(pg::Conn &conn, const Config &cfg, const Key &key, bool check_order);

// BEGIN and the statement in one round trip (see pg::Conn::begin_and_exec): the connection must
// be idle; on return the handler's transaction is open with the event recorded (or found).
Result begin_and_dedupe(pg::Conn &conn, const Config &cfg, const Key &key, bool check_order, bool check_held = false);

// Removes inbox rows processed more than `older_than_s` seconds ago: whole partitions whose
// events' ids are all older than that and whose rows were all processed before it are dropped;
// elsewhere rows are deleted `batch` per statement (each its own short transaction when the
// connection is idle). A dated partition's rows stay until all of it is past the cutoff, so rows
// live up to inbox.partition_s longer than `older_than_s`. Returns the rows removed.
// An age below inbox.retention_s is refused (Error(invalid_argument)): a redelivery may still
// need those rows.
int64_t purge(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch);

// The inbox is range-partitioned by id_ms, the Unix milliseconds inside the event id (uuid v7; 0
// for other ids, see uuid::v7_millis). Partitions are inbox.partition_s wide and named
// <inbox>_pYYYYMMDDtHHMM (UTC start). <inbox>_before holds id_ms below the first one (ids that
// are not v7, and events older than the upgrade); <inbox>_default what lies past the last one.
// <inbox>_v1 is the version-1 table, kept with its rows; the dedupe statement reads it too.

// Makes the partitions from the last one made through inbox.partitions_ahead past the one holding
// now_ms, moving any rows the default partition holds for them. Needs the table's owner. Runs in
// the connection's transaction; `outbox migrate` and purge call it.
void ensure_partitions(pg::Conn &conn, const Config &cfg, int64_t now_ms);

// The server's clock in Unix milliseconds.
int64_t db_now_ms(pg::Conn &conn);

// purge() with the clock given (tests): drops dated partitions wholly older than the cutoff whose
// rows were all processed before it (the owner only), deletes older rows from the undated ones and
// the version-1 table, or, for a role that does not own the table, deletes rows as version 1 did.
int64_t purge_at(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch, int64_t now_ms);

const char *order_name(Order o) noexcept;

} // namespace outbox::inbox
