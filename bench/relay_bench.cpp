// relay_bench: the project's measuring instrument (bench/run runs it; bench/README.md says what it
// measures). Every figure is a ratio against a baseline measured in the same run, on the same
// servers (OUTBOX_PG_URL, OUTBOX_AMQP_URL).
//
// This file sets a run up and runs the scenarios of the table below in order (bench/scenarios.hpp
// lists them; one file each in bench/scenarios/), then writes the report (bench/support/report.hpp).
// Everything lives in a fresh schema (bench_<rand>), a fresh fanout exchange (bench.<rand>) and one
// durable queue bound to it, so every message is routed and persisted; the queue is purged between
// scenarios, and queue, exchange and schema are dropped at the end (--keep leaves them). The relay's
// drains run in the drain child, relay_drain (bench/drain_child.cpp).
#include "scenarios.hpp"

#include "support/config.hpp"
#include "support/report.hpp"

#include <outbox.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>

using namespace bench;

const std::vector<Scenario> &bench::scenario_table() {
    static const std::vector<Scenario> table = {
        {"B", "plain librabbitmq-c publisher (the baseline of D, P, X)", scenario_baseline, true},
        {"D", "relay drain of each --drain-sizes backlog (drain child: peak RSS)", scenario_drain, true},
        {"E", "B and D's drains with a subscriber consuming the queue (Bc, Rc-*)", scenario_drain_consumed, true},
        {"P", "relay drain vs relay.batch_size and vs relay.window (--sweep-*)", scenario_sweep, true},
        {"R-nojit", "diagnostic: a drain with options='-c jit=off' in pg.url", scenario_nojit, false},
        {"R-pinned", "diagnostic: a drain with options='-c jit=off -c enable_sort=off'", scenario_pinned, false},
        {"R-async", "diagnostic: a drain with options='-c synchronous_commit=off'", scenario_async, false},
        {"Z", "drain at size: 10k and --size-backlog backlogs on --size-beneath published events", scenario_size,
         false},
        {"R-w1", "relay with relay.window=1", scenario_window1, true},
        {"S", "the documents' publisher loop, without and with its sleep (S, S-sleep)", scenario_seed, true},
        {"X", "scale-out: 1, 2, 4 `outbox relay` daemons on one table, per-aggregate order check", scenario_scale,
         true},
        {"L", "end-to-end latency at 25/50/80% of the measured maximum rate, write.notify off/on", scenario_latency,
         true},
        {"C", "consumer with dedupe vs without", scenario_consumer, true},
        {"W", "write overhead: business row alone vs plus outbox_write (notify off/on)", scenario_writes, true},
        {"K", "bindings (Python, Node) vs C, from --bindings-*", scenario_bindings, true},
        {"Q", "partitioned subscriber: 1, 2, 4 instances, handler --part-handler-ms (throughput, once, order)",
         scenario_partitions, true},
        {"F", "failing aggregates: the others' throughput and p99 while 1 in 100 keeps failing, vs none failing",
         scenario_failing, true},
        {"H", "table health: steady load with relay, consumer and purges (--health-minutes)", scenario_health, true},
    };
    return table;
}

namespace {

// A program next to this one (relay_bench's build directory), as `rel` from there.
std::string next_to_self(const std::string &rel) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
    dir = dir.substr(0, dir.rfind('/'));
    return dir + "/" + rel;
}

// The servers, the programs and this run's names (schema, exchange, queue, channel, log files).
Run new_run(const Options &o, uint32_t tag) {
    Run run;
    run.pg_url = pg_url_from_env();
    run.amqp_url = amqp_url_from_env();
    // Child processes (the drain child, `outbox relay` daemons) read the URLs from the environment.
    setenv("OUTBOX_PG_URL", run.pg_url.c_str(), 1);
    setenv("OUTBOX_AMQP_URL", run.amqp_url.c_str(), 1);
    run.outbox_cli = o.outbox_cli.empty() ? next_to_self("../cli/outbox") : o.outbox_cli;
    if (access(run.outbox_cli.c_str(), X_OK) != 0 &&
        (wanted(o, "X") || wanted(o, "L") || (wanted(o, "H") && o.health_minutes > 0))) {
        die("the outbox command is not at " + run.outbox_cli + " (build the CLI, or give --outbox-cli PATH)");
    }
    run.drain_bin = o.drain_bin.empty() ? next_to_self("relay_drain") : o.drain_bin;
    if (access(run.drain_bin.c_str(), X_OK) != 0 &&
        (wanted(o, "D") || wanted(o, "E") || wanted(o, "P") || wanted(o, "Z") || wanted(o, "R-w1") ||
         wanted(o, "R-nojit") || wanted(o, "R-pinned") || wanted(o, "R-async"))) {
        die("the drain child is not at " + run.drain_bin + " (build relay_drain, or give --drain-bin PATH)");
    }
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", tag);
    run.schema = std::string("bench_") + hex;
    run.exchange = std::string("bench.") + hex;
    run.queue = run.exchange + ".q";
    run.channel = std::string("bench_") + hex;
    run.log_prefix = env_or("TMPDIR", "/tmp") + "/relay_bench-" + hex + "-";
    return run;
}

// Undoes the set-up at the end, also after an error: queue, exchange, schema, relay logs.
struct Cleanup {
    Run &run;
    Pg &pg;
    Amqp &admin;
    bool keep;
    ~Cleanup() {
        if (keep) {
            std::fprintf(stderr, "bench: kept schema %s, exchange %s, queue %s\n", run.schema.c_str(),
                         run.exchange.c_str(), run.queue.c_str());
            return;
        }
        try {
            admin.delete_queue(run.queue);
            admin.delete_exchange(run.exchange);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "bench: cleanup (RabbitMQ): %s\n", e.what());
        }
        try {
            pg.exec("DROP SCHEMA IF EXISTS \"" + run.schema + "\" CASCADE");
        } catch (const std::exception &e) {
            std::fprintf(stderr, "bench: cleanup (PostgreSQL): %s\n", e.what());
        }
        if (run.failures.empty() && std::uncaught_exceptions() == 0) {
            for (const auto &f : run.daemon_logs) {
                std::remove(f.c_str());
            }
        }
    }
};

// The exchange, the queue bound to it, and the outbox tables in this run's schema.
void set_up(const Run &run, const Options &o, Amqp &admin) {
    progress("schema " + run.schema + ", exchange " + run.exchange + ", queue " + run.queue);
    admin.declare_exchange(run.exchange);
    admin.declare_queue(run.queue, o.queue_type);
    admin.bind(run.queue, run.exchange);
    outbox_config *cfg = relay_config(run, o.batch_size, o.window, run.pg_url);
    outbox_db *db = nullptr;
    outbox_status rc = outbox_db_open(&db, run.pg_url.c_str(), cfg);
    outbox_config_free(cfg);
    if (rc != OUTBOX_OK) {
        die(std::string("outbox_db_open: ") + outbox_last_error());
    }
    rc = outbox_migrate(nullptr, db, OUTBOX_MIGRATE_OUTBOX);
    std::string err = rc == OUTBOX_OK ? "" : outbox_last_error();
    outbox_db_close(db);
    if (rc != OUTBOX_OK) {
        die("outbox_migrate: " + err);
    }
}

// The events at --events: B's messages, and the template of every backlog.
Generator base_events(const Options &o, uint32_t tag) {
    Generator gr;
    gr.run = tag;
    gr.code = 0x0001;
    gr.prefix = 'r';
    gr.count = o.events;
    gr.aggregates = (o.events + o.per_aggregate - 1) / o.per_aggregate;
    gr.payload_bytes = o.payload_bytes;
    gr.base_us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count() -
        60 * 1000000LL; // a minute ago: due now
    return gr;
}

int exit_status(const Run &run, const Options &o) {
    if (!run.failures.empty()) {
        return 2;
    }
    if (o.enforce_target) {
        for (const auto &f : run.figures) {
            if (f.verdict == "MISS" || f.verdict == "UNJUDGED") {
                return 3;
            }
        }
    }
    return 0;
}

int run_bench(const Options &o) {
    const auto wall0 = Clock::now();
    std::random_device rd;
    const uint32_t tag = static_cast<uint32_t>(rd()) ^ (static_cast<uint32_t>(getpid()) << 16);
    Run run = new_run(o, tag);
    Pg pg(run.pg_url);
    pg.exec("SET client_min_messages = warning");
    Env env;
    env.pg_version = pg.query("SHOW server_version")->get(0, 0);
    {
        auto ssl = pg.query("SELECT ssl, COALESCE(version, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()");
        env.pg_transport = ssl->rows() > 0 && ssl->get(0, 0) == "t" ? "TLS (" + ssl->get(0, 1) + ")" : "plain";
    }
    Amqp admin(run.amqp_url, 0);
    const Cleanup cleanup{run, pg, admin, o.keep};
    set_up(run, o, admin);
    Bench b{run, o, pg, admin, base_events(o, tag)};
    run.notes.push_back("R backlog: " + std::to_string(b.base.count) + " events over " +
                        std::to_string(b.base.aggregates) + " aggregates (" + std::to_string(o.per_aggregate) +
                        " per aggregate), written by COPY, then VACUUM ANALYZE and CHECKPOINT before timing");
    b.phase_t0 = Clock::now();
    for (const Scenario &s : scenario_table()) {
        if (wanted(o, s.name)) {
            s.run(b);
        }
    }
    env.wall = seconds_between(wall0, Clock::now());
    print_table(run, o, env);
    if (!o.json_file.empty()) {
        write_json(run, o, env);
    }
    if (!o.md_file.empty()) {
        write_md(run, o, env);
    }
    return exit_status(run, o);
}

} // namespace

int main(int argc, char **argv) {
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    try {
        const Options o = parse_options(argc, argv, scenario_table());
        return run_bench(o);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "bench: error: %s\n", e.what());
        return 1;
    }
}
