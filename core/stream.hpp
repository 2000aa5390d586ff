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
#include <limits>
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

// Positions read again, as runs: (first, last), ascending.
using Runs = std::vector<std::pair<int64_t, int64_t>>;

// The relay's bookkeeping of positions: pure logic, no I/O. Gaps are kept as runs of consecutive
// positions, so a sequence that jumped (a rolled-back write of a million events, a truncated
// table) is one run to read again, not a million positions.
class Progress {
  public:
    // After (re)taking the relay's lock: the stored cursor, and what lies above it already done
    // (receipt ranges and parked positions), so it is not published twice.
    void load(int64_t cursor, const std::vector<std::pair<int64_t, int64_t>> &done_ranges,
              const std::vector<int64_t> &parked);

    [[nodiscard]] int64_t cursor() const { return cursor_; }
    [[nodiscard]] int64_t frontier() const { return frontier_; }
    // Runs at or below the frontier to read again, ascending: the gaps' runs and each event to
    // retry, at most `limit` runs.
    [[nodiscard]] Runs recheck(size_t limit) const;
    // How many positions are gaps.
    [[nodiscard]] size_t gaps() const;
    // Whether `rechecked` (from recheck()) holds every gap and every retry. When it does not, events
    // past the frontier must wait: one of them could be the next of an aggregate whose earlier
    // event is a retry, or a gap that has committed since, left out of the read, and would go
    // first. (Gap runs outnumber a batch when many writers roll back one by one.) This also bounds
    // the retries to about two batches.
    [[nodiscard]] bool covers_rechecks(const Runs &rechecked) const;
    // Whether a position read is done already (loaded from the database after a restart).
    [[nodiscard]] bool done(int64_t position) const;

    // One read with snapshot `snap`: the positions found in the rechecked runs (ascending), and the
    // positions of the frontier read (ascending, all above the frontier). The rechecked runs were
    // read up to `examined` (inclusive; a read of them stops at its limit): only there does a gap
    // become final or a retry count as deleted. Notes new gaps, drops gaps that became final, and
    // moves the frontier.
    void observe(const Runs &rechecked, const std::vector<int64_t> &found_again, const std::vector<int64_t> &fresh,
                 const Snapshot &snap, int64_t examined = std::numeric_limits<int64_t>::max());
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
    struct GapRun {
        int64_t last;
        uint64_t bound; // final once a snapshot's xmin reaches this id (0: not yet known)
    };
    void add_gaps(int64_t first, int64_t last);
    void fill_gap(int64_t position);
    void drop_final_gaps(const Runs &rechecked, uint64_t xmin, int64_t examined);

    int64_t cursor_ = 0;
    int64_t frontier_ = 0;
    std::map<int64_t, GapRun> gaps_; // first position -> the run
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

// The relay's statements. read_sql: $1 bigint[] and $4 bigint[] the first and last positions of the
// runs to recheck, $2 the frontier, $3 the limit (of the rechecked events, and of those past the
// frontier); one row at least (the snapshot), then the events by position. Columns: snapshot, position,
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
