// The scenarios of relay_bench, one file each under bench/scenarios/, registered in the table of
// bench/relay_bench.cpp in the order they run (--only picks from it, --help lists it):
//
//   B         baseline.cpp     a plain librabbitmq-c publisher with confirms: the baseline of D, P, X
//   D         drain.cpp        the relay draining each --drain-sizes backlog in the drain child (peak RSS)
//   E         drain.cpp        B and D's drains again with a subscriber consuming the queue (Bc, Rc-*)
//   P         sweep.cpp        the relay's drain vs relay.batch_size and vs relay.window
//   R-nojit   diagnostics.cpp  a drain with options='-c jit=off' (only when named)
//   R-pinned  diagnostics.cpp  a drain with options='-c jit=off -c enable_sort=off' (only when named)
//   Z         size.cpp         the relay's drain on top of --size-beneath published events (only when named)
//   R-w1      window1.cpp      the relay with relay.window=1: what confirm pipelining buys
//   S         seed.cpp         the documents' publishPendingEvents loop, without and with its sleep
//   X         scale.cpp        1, 2, 4 `outbox relay` daemons on one table, per-aggregate order check
//   L         latency.cpp      COMMIT -> consumer latency at 25/50/80% of the maximum rate
//   C         consumer.cpp     the consumer runtime with dedupe vs without
//   W         writes.cpp       write overhead: a business row alone vs plus outbox_write
//   K         bindings.cpp     the bindings' per-write cost (Python, Node) vs C
//   H         health.cpp       table health under steady load with relay, consumers and purges
//   Q         partitions.cpp   one partitioned subscriber at 1, 2, 4 instances: throughput, once, order
//   F         failing.cpp      the other aggregates' throughput and p99 while 1 aggregate in 100 keeps failing
//
// Each scenario appends its rows, figures, series and notes to the Run and records its wall time
// with Bench::phase; bench/README.md says what each measures and against which target.
#pragma once

#include "support/amqp.hpp"
#include "support/events.hpp"
#include "support/options.hpp"
#include "support/pg.hpp"
#include "support/run.hpp"
#include "support/util.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace bench {

// What a scenario works with: this run's servers, schema, exchange and queue, and the options.
struct Bench {
    Run &run;
    const Options &o;
    Pg &pg;
    Amqp &admin;    // declares, counts, purges and samples the bench queue
    Generator base; // the events at --events (B's messages); every backlog is a copy with its own code
    Clock::time_point phase_t0 = Clock::now();

    // The events of one backlog: `base` with its own uuid code, aggregate prefix, count and aggregates.
    [[nodiscard]] Generator events(uint16_t code, char prefix, long count, long aggregates) const;
    // Empties the outbox, then writes g's events as a backlog (COPY, VACUUM ANALYZE, CHECKPOINT).
    void load(const Generator &g);
    // Records the wall time since the previous phase under `name` (the report's scenario_seconds).
    void phase(const std::string &name);
    // The drain whose ratio the relay-only rows (R-w1, S) refer to: the one at --events, else the largest.
    [[nodiscard]] const Row *main_drain() const;
};

void scenario_baseline(Bench &b);       // B
void scenario_drain(Bench &b);          // D
void scenario_drain_consumed(Bench &b); // E
void scenario_sweep(Bench &b);          // P
void scenario_nojit(Bench &b);          // R-nojit
void scenario_pinned(Bench &b);         // R-pinned
void scenario_async(Bench &b);          // R-async
void scenario_size(Bench &b);           // Z
void scenario_window1(Bench &b);        // R-w1
void scenario_seed(Bench &b);           // S
void scenario_scale(Bench &b);          // X
void scenario_latency(Bench &b);        // L
void scenario_consumer(Bench &b);       // C
void scenario_writes(Bench &b);         // W
void scenario_bindings(Bench &b);       // K
void scenario_health(Bench &b);         // H
void scenario_partitions(Bench &b);     // Q
void scenario_failing(Bench &b);        // F

// The table, in the order the scenarios run.
const std::vector<Scenario> &scenario_table();

// B's publisher (also C's: it fills the consumers' queues): g's messages through one connection
// with confirms, at most --window unconfirmed. Its row, checked for nacks and returns.
Row publish_baseline(Run &run, const Options &o, const Generator &g);
// B's publisher with a subscriber consuming the queue (E, Z): g's messages, row key Bc-<size>.
Row consumed_baseline(Bench &b, const Generator &g);

} // namespace bench
