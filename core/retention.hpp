// Storage version 2's retention: the events table is range-partitioned by position, partitions
// made ahead of the writers, and old events leave by dropping whole partitions that lie below the
// relay's cursor (every event in them published or parked with a copy of its row).
#pragma once

#include "config.hpp"
#include "pg.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace outbox::retention {

// Makes the events partitions up to outbox.partitions_ahead past the one the position sequence
// is in, moving any rows the default partition holds for them. Takes the migrations' advisory
// lock; on an idle connection in a transaction of its own. Cheap when nothing is missing.
// Returns the end of the last partition (positions below it have one).
int64_t ensure_partitions(pg::Conn &conn, const Config &cfg);

struct PurgeResult {
    int64_t partitions = 0; // events partitions dropped
    int64_t events = 0;     // events they held, plus version-1 rows deleted
};

// Removes events published more than older_than_s ago: takes out each partition wholly below the
// relay's cursor whose last receipt is older than that (detached under a short ACCESS EXCLUSIVE
// lock on the events table, tried 100 ms at a time; its file dropped after that lock is gone,
// together with any an interrupted purge left), then deletes the version-1 table's old published rows
// `batch` at a time, and the receipts and idempotency keys of dropped events. Call outside a
// transaction. on_progress(events removed so far) runs after each step.
PurgeResult purge(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch,
                  const std::function<void(int64_t)> &on_progress = {});

// How many events purge(older_than_s) would remove now: rows of the droppable partitions (planner
// estimates) and of the version-1 table. For progress displays only.
int64_t estimate(pg::Conn &conn, const Config &cfg, int64_t older_than_s);

// Closed partitions (wholly at or below the relay's cursor, so no longer written) get an index on
// (aggregate_type, aggregate_id, seq) for replay and the other per-aggregate lookups; the
// partitions being written go without it, so that a write updates one index only.

// Builds the missing indexes of closed partitions now, one CREATE INDEX CONCURRENTLY after the
// other (writers and the relay go on; the tables' owner's right). On an idle connection outside a
// transaction. Returns how many it built.
int64_t index_closed_partitions(pg::Conn &conn, const Config &cfg);

// The relay's way to build them: one at a time, sent on a connection of its own without waiting
// for it (libpq's asynchronous API) and collected at a later tick, so the relay never waits.
class Indexer {
  public:
    Indexer() = default;
    Indexer(const Indexer &) = delete;
    Indexer &operator=(const Indexer &) = delete;
    ~Indexer(); // cancels a build in flight (the next tick of any relay starts it again)

    // Collects a finished build and starts the next one when none runs. Returns what to log as a
    // warning (a failed build, a role that may not build), or an empty string.
    std::string tick(pg::Conn &main, const Config &cfg);

  private:
    std::string collect();
    std::optional<pg::Conn> conn_;
    std::string building_; // the index being built; empty when none
    std::chrono::steady_clock::time_point pause_until_{};
};

} // namespace outbox::retention
