// Table-partition upkeep: the active relay makes the events partitions ahead of the writers and
// has the closed partitions' aggregate indexes built.
#include "relay.hpp"

#include "relay_internal.hpp"
#include "retention.hpp"

#include <chrono>
#include <string>

namespace outbox {

// Every 10 s, and as soon as the events read come within a partition of the last one's end, the
// active relay makes the events partitions ahead of the writers (so small partitions filling fast
// do not overflow into the default one). A role that may not (least privilege) leaves it to
// outbox migrate and purge: the default partition holds the events meanwhile, and nothing is lost.
void Relay::maintain_partitions(pg::Conn &db) {
    const auto now = Clock::now();
    const bool near_end = partitions_end_ > 0 && progress_.frontier() + cfg_.outbox_partition_events >= partitions_end_;
    if (now < next_partition_check_ && !near_end) {
        return;
    }
    const bool timed = now >= next_partition_check_;
    next_partition_check_ = now + std::chrono::seconds(10);
    try {
        partitions_end_ = retention::ensure_partitions(db, cfg_);
        if (timed) {
            // Closed partitions' aggregate indexes, built on a connection of the indexer's own.
            if (const std::string warning = indexer_.tick(db, cfg_); !warning.empty()) {
                log(LogLevel::warn, warning);
            }
        }
    } catch (const Error &e) {
        if (!db.ok()) {
            throw;
        }
        partitions_end_ = 0; // until the next check, every 10 s
        db.rollback_quietly();
        log(LogLevel::warn,
            std::string("cannot make the outbox's partitions ahead (outbox migrate or purge will): ") + e.what());
    }
}

} // namespace outbox
