// Storage version 2's relay progress (docs/storage-v2.md): the events table is read in position
// order and never rewritten. What the relay has done is kept apart: a cursor (every position at
// or below it is done), receipts (ranges of positions published), and parked events (failed ones
// and the later events of their aggregates).
//
// Positions come from a sequence taken in the write's statement after the aggregate's counter row
// is locked, so they are assigned in order but committed out of order: a read can see position
// p + 1 while p is still in flight. Such a missing position is a gap. A gap is re-read every step
// (an in-flight event is published as soon as it commits) and is final once every transaction that
// could hold it has ended. The writer that took it got its transaction id before taking the
// position (the counter upsert comes first), and that was before the read that noticed the gap,
// because a later position was already committed then. The relay's next record statement gets a
// transaction id of its own, later than all of those: once the oldest running transaction (a
// later read's snapshot xmin) is at or past that id, a gap still missing is a rolled-back write and
// will never appear. (The snapshot's own xmax or running list is not enough: xmax is the latest
// completed id + 1, and a writer with a newer id that is still running appears in neither.)
#pragma once

#include "config.hpp"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox::stream {

// pg_current_snapshot() as text: "xmin:xmax:xip,xip,...".
struct Snapshot {
    uint64_t xmin = 0;
    uint64_t xmax = 0;
    uint64_t max_running = 0; // the largest running transaction id (0: none was running)
};
Snapshot parse_snapshot(std::string_view text);

// The relay's bookkeeping of positions: pure logic, no I/O.
class Progress {
  public:
    // After (re)taking the relay's lock: the stored cursor, and what lies above it already done
    // (receipt ranges and parked positions), so it is not published twice.
    void load(int64_t cursor, const std::vector<std::pair<int64_t, int64_t>> &done_ranges,
              const std::vector<int64_t> &parked);

    [[nodiscard]] int64_t cursor() const { return cursor_; }
    [[nodiscard]] int64_t frontier() const { return frontier_; }
    // Positions at or below the frontier to read again: gaps and events to retry, at most `limit`.
    [[nodiscard]] std::vector<int64_t> recheck(size_t limit) const;
    [[nodiscard]] size_t gaps() const { return gaps_.size(); }
    // Whether `rechecked` (from recheck()) holds every gap and every retry. When it does not, events
    // past the frontier must wait: one of them could be the next of an aggregate whose earlier
    // event is a retry, or a gap that has committed since, left out of the read, and would go
    // first. (Gaps outnumber a batch when many writers roll back, or under load before they are
    // found final.) This also bounds the retries to about two batches.
    [[nodiscard]] bool covers_rechecks(const std::vector<int64_t> &rechecked) const;
    // Whether a position read is done already (loaded from the database after a restart).
    [[nodiscard]] bool done(int64_t position) const;

    // One read with snapshot `snap`: the positions found among the rechecked ones, and the
    // positions of the frontier read (ascending, all above the frontier). Notes new gaps, drops
    // gaps that became final, and moves the frontier.
    void observe(const std::vector<int64_t> &rechecked, const std::vector<int64_t> &found_again,
                 const std::vector<int64_t> &fresh, const Snapshot &snap);
    // A read position whose event was neither published nor parked (not sent, not confirmed):
    // read again next step.
    void retry(int64_t position) { retry_.insert(position); }
    // A read position whose outcome a later step records (the relay's next batch, published while
    // the step's own batch is confirmed): the cursor stays below it until it is released.
    void hold(int64_t position) { held_.insert(position); }
    void release(int64_t position) { held_.erase(position); }
    // The cursor the done positions allow: everything below the lowest gap, retry or held position.
    int64_t advance();
    // The transaction id of a record statement made after the read that noticed the newest gaps: those gaps
    // are final once a snapshot's xmin reaches it.
    void set_bound(uint64_t xid);
    [[nodiscard]] bool awaiting_bound() const;

  private:
    int64_t cursor_ = 0;
    int64_t frontier_ = 0;
    std::map<int64_t, uint64_t> gaps_; // position -> final once a snapshot's xmin reaches this id (0: not yet known)
    std::set<int64_t> retry_;
    std::set<int64_t> held_;
    std::set<int64_t> done_; // above the cursor, done before a restart (pruned as the cursor passes)
};

// (first, last) runs of consecutive positions, each spanning fewer than max_receipt_span;
// `positions` ascending.
std::vector<std::pair<int64_t, int64_t>> ranges(const std::vector<int64_t> &positions);

// Qualified names of storage version 2's tables.
std::string events_table(const Config &cfg);
std::string relay_table(const Config &cfg);
std::string receipts_table(const Config &cfg);
std::string parked_table(const Config &cfg);
std::string keys_table(const Config &cfg);
std::string position_sequence(const Config &cfg);
std::string v1_table(const Config &cfg);

// The relay's statements. read_sql: $1 bigint[] positions to recheck, $2 the frontier, $3 the limit;
// one row at least (the snapshot), then the events by position. Columns: snapshot, position,
// outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, previous_payload,
// metadata, actor, created_at (YYYYMMDDHHMMSS), created_at epoch, retry_count.
std::string read_sql(const Config &cfg);
// The parked events of aggregates whose first parked event is due ($1 limit), same columns from
// position on (no snapshot column).
std::string parked_sql(const Config &cfg);
// Records one step's outcomes and the cursor, one statement; see relay.cpp for the parameters.
std::string record_sql(const Config &cfg);
// The lock that makes one relay per outbox table the active one ($1: the qualified table name).
constexpr const char *lock_sql =
    "SELECT pg_try_advisory_lock(hashtextextended('outbox relay ' || CAST($1 AS text), 0))";

} // namespace outbox::stream
