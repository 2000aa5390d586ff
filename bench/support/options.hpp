// relay_bench's command line: every option with its default, and what --quick makes of them.
#pragma once

#include "quiet.hpp"

#include <string>
#include <vector>

namespace bench {

struct Bench;

// One entry of the scenario table (bench/scenarios.hpp): --only names it, --help describes it.
struct Scenario {
    const char *name;
    const char *help; // one line of --help
    void (*run)(Bench &);
    bool by_default; // false: a diagnostic, run only when --only names it
};

struct Options {
    long events = 100000;
    int payload_bytes = 1024;
    int window = 512;
    int batch_size = 2000;
    std::string queue_type = "classic"; // the bench queue: classic, or quorum (replicated on a cluster)
    int writers = 4;
    long writes = 20000;
    int w_slices = 10;         // W: each mode's writes in this many slices, interleaved against drift
    int w_payload_bytes = 256; // W: the event payload of a one-row business transaction
    int per_aggregate = 1;     // events per aggregate in the relay backlog (seq 1..k)
    long seed_events = -1;     // S backlog; default events / 20
    long w1_events = -1;       // R-w1 backlog; default events / 100
    long consume_events = -1;  // C: messages per consumer; default events / 20
    std::vector<long> drain_sizes{10000, 100000, 1000000}; // D: relay drains of these backlogs
    long sweep_events = 10000;                             // P: backlog per sweep point
    long size_beneath = 10000000;                          // Z: published events beneath the backlogs
    long size_backlog = 1000000; // Z: the large backlog drained on top of them (after a 10k one)
    std::vector<long> sweep_batches{100, 250, 500, 1000, 2000, 4000};
    std::vector<long> sweep_windows{16, 64, 256, 512, 1024};
    long scale_events = 50000;    // X: backlog drained by 1, 2 and 4 relay processes
    int scale_per_aggregate = 10; // X: events per aggregate (order is checked per aggregate)
    std::vector<long> scale_relays{1, 2, 4};
    long part_events = 20000;       // Q: events for the partitioned subscriber at 1, 2 and 4 instances
    long part_aggregates = 2000;    // Q: over this many aggregates
    int part_partitions = 16;       // Q: consumer.partitions
    int part_handler_ms = 2;        // Q: the handler's sleep per event
    long fail_events = 20000;       // F: the backlog each side of F drains (over fail_aggregates aggregates)
    long fail_aggregates = 1000;    // F: aggregates of F's events; 1 in 100 fails on F's failing side
    double fail_rate = 200;         // F: events/s written during F's latency phase (--latency-seconds long)
    double latency_seconds = 8;     // L: offered load held this long per point
    double latency_max_seconds = 6; // L: unpaced writes to find the maximum rate
    std::vector<double> latency_loads{0.25, 0.5, 0.8};
    bool latency_poll_diag = true; // L: also the relay with --poll-interval-ms 5 at 50%
    double health_minutes = 2;     // H: steady writes + relay + consumer + purge (0: skip)
    double health_sample_s = 5;
    double health_purge_s = 10;
    int health_age_s = 30;            // H: purge PUBLISHED events / inbox rows older than this
    double health_rate = 0;           // H: events/s written (0: 50% of the maximum rate)
    long health_aggregates = 10000;   // H: writes cycle over this many aggregates
    std::string outbox_cli;           // the `outbox` command (default: next to this binary's build tree)
    std::string drain_bin;            // the drain child, relay_drain (default: next to this binary)
    std::string bindings_python_json; // K: python/bench_write.py --json output of this run
    std::string bindings_node_json;   // K: node/bench/write.js --json output of this run
    double max_steal_pct = 2;         // a figure's sides are quiet when at most this % of the CPU was stolen
    double quiet_wait_s = 600;        // per figure: how long to keep measuring again for a quiet pair
    bool no_retry = false;            // one attempt per figure (--quick, unless --quiet-wait is given)
    bool quick = false;
    bool keep = false;
    bool enforce_target = false;
    std::string only; // default: every scenario of the table that runs by default
    std::string json_file;
    std::string md_file;
    std::string steps_csv; // per-step relay stats, for looking into a slow relay
};

// Parses the command line; --help prints the usage, with the table's scenarios, and exits.
Options parse_options(int argc, char **argv, const std::vector<Scenario> &table);

// The judging of figures on quiet pairs (support/quiet.hpp) by --max-steal, --quiet-wait, --no-retry.
QuietRule quiet_rule(const Options &o);

// True when the scenarios to run (--only, else the table's default ones) include this one.
bool wanted(const Options &o, const std::string &scenario);

} // namespace bench
