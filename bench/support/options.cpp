#include "options.hpp"

#include "util.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>

namespace bench {

namespace {

std::vector<std::string> split(const std::string &list) {
    std::vector<std::string> out;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        out.push_back(item);
    }
    return out;
}

std::string names(const std::vector<Scenario> &table, bool defaults_only) {
    std::string out;
    for (const auto &s : table) {
        if (s.by_default || !defaults_only) {
            out += (out.empty() ? "" : ",") + std::string(s.name);
        }
    }
    return out;
}

void usage(FILE *to, const std::vector<Scenario> &table) {
    std::fprintf(to,
                 "usage: relay_bench [options]\n"
                 "scenarios (--only, comma-separated; default all of %s):\n",
                 names(table, true).c_str());
    for (const auto &s : table) {
        std::fprintf(to, "  %-9s %s%s\n", s.name, s.help, s.by_default ? "" : " (only when named)");
    }
    std::fprintf(to,
                 "options:\n"
                 "  --events N          baseline B message count (default 100000)\n"
                 "  --drain-sizes LIST  D and E backlogs (default 10000,100000,1000000)\n"
                 "  --payload-bytes N   size of each event's JSON payload in B, D, P, X, S (default 1024)\n"
                 "  --window N          publisher-confirm window, relay and baseline alike (default 512)\n"
                 "  --batch-size N      relay.batch_size (default 2000)\n"
                 "  --queue-type T      the bench queue: classic (default) or quorum (bench/run --cluster)\n"
                 "  --per-aggregate K   events per aggregate in the D backlog, seq 1..K (default 1)\n"
                 "  --sweep-events N    P backlog per point (default 10000)\n"
                 "  --size-beneath N    Z: published events beneath the backlogs (default 10000000)\n"
                 "  --size-backlog N    Z: the backlog drained on top of them after a 10k one (default 1000000)\n"
                 "  --sweep-batches LIST, --sweep-windows LIST   P points (default 100,250,500,1000,2000,4000 and\n"
                 "                      16,64,256,512,1024)\n"
                 "  --scale-events N    X backlog (default 50000); --scale-per-aggregate K (default 10)\n"
                 "  --scale-relays LIST X relay counts (default 1,2,4)\n"
                 "  --part-events N, --part-aggregates N   Q: events and aggregates (default 20000, 2000)\n"
                 "  --part-partitions N Q: consumer.partitions (default 16); --part-handler-ms N (default 2)\n"
                 "  --latency-seconds S L: seconds per load point (default 8)\n"
                 "  --health-minutes M  H: length of the steady-state run (default 2; 30 for the real check)\n"
                 "  --health-age-s S    H: purge published events and inbox rows older than S s (default 30)\n"
                 "  --health-rate R     H: write R events/s (default 0: 50%% of the maximum rate, L's or measured)\n"
                 "  --seed-events N     backlog of the seed-style loop (default events/20)\n"
                 "  --w1-events N       backlog of the relay with relay.window=1 (default events/100)\n"
                 "  --writers N         concurrent writer threads in W, L, H (default 4)\n"
                 "  --writes N          transactions per write mode, over all writers (default 20000)\n"
                 "  --w-slices N        split each write mode into N slices, interleaved (default 10; --quick 4)\n"
                 "  --w-payload-bytes N W: event payload size (default 256)\n"
                 "  --consume-events N  C: messages each consumer handles (default events/20)\n"
                 "  --outbox-cli PATH   the outbox command for X, L, H (default ../cli/outbox from this binary)\n"
                 "  --drain-bin PATH    the drain child of D, E, P, Z, R-w1 (default relay_drain next to it)\n"
                 "  --bindings-python FILE, --bindings-node FILE  K: JSON written by python/bench_write.py\n"
                 "                      and node/bench/write.js in this run (bench/run passes them)\n"
                 "  --max-steal PCT     a verdict (PASS/MISS) only when both sides of a figure saw at most\n"
                 "                      PCT%% of the CPU stolen (/proc/stat), else UNJUDGED (default 2)\n"
                 "  --quiet-wait S      measure a noisy pair again after an idle wait, for at most S s per\n"
                 "                      figure (default 600); --no-retry: one attempt (--quick's default)\n"
                 "  --quick             small sizes, for checking the harness (well under 2 minutes)\n"
                 "  --only LIST         scenarios to run\n"
                 "  --json FILE         write the figures as JSON to FILE\n"
                 "  --md FILE           write the Markdown report to FILE\n"
                 "  --steps-csv FILE    write every relay step's outbox_relay_stats to FILE\n"
                 "  --keep              keep the schema, exchange and queue afterwards\n"
                 "  --enforce-target    exit 3 when a target is missed or left UNJUDGED\n"
                 "environment: OUTBOX_PG_URL, OUTBOX_AMQP_URL (default: the scripts/services.sh endpoints;\n"
                 "  a list of brokers in OUTBOX_AMQP_URL: the relay gets the list, the baseline its first\n"
                 "  address, the node the relay connects to first)\n");
}

double parse_double(const std::string &opt, const char *v, double lo, double hi) {
    char *end = nullptr;
    errno = 0;
    double d = std::strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !(d >= lo && d <= hi)) {
        die(opt + ": expected a number in [" + fixed(lo, 1) + ", " + fixed(hi, 1) + "], got '" + v + "'");
    }
    return d;
}

std::vector<long> parse_list(const std::string &opt, const char *v, long lo, long hi) {
    std::vector<long> out;
    for (const auto &item : split(v)) {
        out.push_back(parse_long(opt, item.c_str(), lo, hi));
    }
    if (out.empty()) {
        die(opt + ": expected a comma-separated list");
    }
    return out;
}

// Which sizes the command line gave: --quick changes only the others.
struct Given {
    bool events = false, writes = false, slices = false, drains = false, sweep = false, batches = false,
         windows = false, scale = false, lat = false, health = false, part = false, size = false, quiet = false,
         fail = false;
};

// One option: what its value does to the options, and which size it gives (--quick leaves those).
struct Opt {
    const char *name;
    bool takes_value;
    bool Given::*given;
    std::function<void(Options &o, const std::string &name, const char *value)> apply;
};

Opt number(const char *name, long Options::*f, long lo, long hi, bool Given::*given = nullptr) {
    return {name, true, given,
            [=](Options &o, const std::string &a, const char *v) { o.*f = parse_long(a, v, lo, hi); }};
}

Opt number(const char *name, int Options::*f, long lo, long hi, bool Given::*given = nullptr) {
    return {name, true, given, [=](Options &o, const std::string &a, const char *v) {
                o.*f = static_cast<int>(parse_long(a, v, lo, hi));
            }};
}

Opt number(const char *name, double Options::*f, double lo, double hi, bool Given::*given) {
    return {name, true, given,
            [=](Options &o, const std::string &a, const char *v) { o.*f = parse_double(a, v, lo, hi); }};
}

Opt numbers(const char *name, std::vector<long> Options::*f, long lo, long hi, bool Given::*given = nullptr) {
    return {name, true, given,
            [=](Options &o, const std::string &a, const char *v) { o.*f = parse_list(a, v, lo, hi); }};
}

Opt text(const char *name, std::string Options::*f) {
    return {name, true, nullptr, [=](Options &o, const std::string &, const char *v) { o.*f = v; }};
}

Opt flag(const char *name, bool Options::*f) {
    return {name, false, nullptr, [=](Options &o, const std::string &, const char *) { o.*f = true; }};
}

Opt queue_type() {
    return {"--queue-type", true, nullptr, [](Options &o, const std::string &, const char *v) {
                o.queue_type = v;
                if (o.queue_type != "classic" && o.queue_type != "quorum") {
                    die("--queue-type: expected classic or quorum, got '" + o.queue_type + "'");
                }
            }};
}

const std::vector<Opt> &option_table() {
    constexpr long many = 100000000;
    static const std::vector<Opt> opts = {
        number("--events", &Options::events, 1, many, &Given::events),
        numbers("--drain-sizes", &Options::drain_sizes, 1, many, &Given::drains),
        number("--sweep-events", &Options::sweep_events, 1, many, &Given::sweep),
        number("--size-beneath", &Options::size_beneath, 0, 1000000000, &Given::size),
        number("--size-backlog", &Options::size_backlog, 1, many, &Given::size),
        numbers("--sweep-batches", &Options::sweep_batches, 1, 100000, &Given::batches),
        numbers("--sweep-windows", &Options::sweep_windows, 1, 65535, &Given::windows),
        number("--scale-events", &Options::scale_events, 1, many, &Given::scale),
        number("--scale-per-aggregate", &Options::scale_per_aggregate, 1, 1000000),
        numbers("--scale-relays", &Options::scale_relays, 1, 64),
        number("--part-events", &Options::part_events, 1, many, &Given::part),
        number("--part-aggregates", &Options::part_aggregates, 1, many, &Given::part),
        number("--part-partitions", &Options::part_partitions, 1, 1024),
        number("--part-handler-ms", &Options::part_handler_ms, 0, 10000),
        number("--fail-events", &Options::fail_events, 1, many, &Given::fail),
        number("--fail-aggregates", &Options::fail_aggregates, 100, many, &Given::fail),
        number("--fail-rate", &Options::fail_rate, 1.0, 100000.0, nullptr),
        number("--latency-seconds", &Options::latency_seconds, 0.5, 3600, &Given::lat),
        number("--health-minutes", &Options::health_minutes, 0, 24 * 60, &Given::health),
        number("--health-age-s", &Options::health_age_s, 1, 86400),
        number("--health-rate", &Options::health_rate, 0.0, 1000000.0, nullptr),
        number("--payload-bytes", &Options::payload_bytes, 64, 1 << 20),
        number("--w-payload-bytes", &Options::w_payload_bytes, 64, 1 << 20),
        queue_type(),
        number("--window", &Options::window, 1, 65535),
        number("--batch-size", &Options::batch_size, 1, 100000),
        number("--per-aggregate", &Options::per_aggregate, 1, 1000000),
        number("--seed-events", &Options::seed_events, 1, many),
        number("--consume-events", &Options::consume_events, 1, many),
        number("--w1-events", &Options::w1_events, 1, many),
        number("--writers", &Options::writers, 1, 256),
        number("--writes", &Options::writes, 1, many, &Given::writes),
        number("--w-slices", &Options::w_slices, 1, 1000, &Given::slices),
        text("--outbox-cli", &Options::outbox_cli),
        text("--drain-bin", &Options::drain_bin),
        text("--bindings-python", &Options::bindings_python_json),
        text("--bindings-node", &Options::bindings_node_json),
        number("--max-steal", &Options::max_steal_pct, 0.0, 100.0, nullptr),
        number("--quiet-wait", &Options::quiet_wait_s, 0.0, 86400.0, &Given::quiet),
        flag("--no-retry", &Options::no_retry),
        flag("--quick", &Options::quick),
        text("--only", &Options::only),
        text("--json", &Options::json_file),
        text("--md", &Options::md_file),
        text("--steps-csv", &Options::steps_csv),
        flag("--keep", &Options::keep),
        flag("--enforce-target", &Options::enforce_target),
    };
    return opts;
}

void apply_quick(Options &o, const Given &set) {
    if (!set.events) {
        o.events = 5000;
    }
    if (!set.drains) {
        o.drain_sizes = {1000, 5000};
    }
    if (!set.sweep) {
        o.sweep_events = 2000;
    }
    if (!set.size) {
        o.size_beneath = 20000;
        o.size_backlog = 2000;
    }
    if (!set.batches) {
        o.sweep_batches = {100, 500};
    }
    if (!set.windows) {
        o.sweep_windows = {64, 512};
    }
    if (!set.scale) {
        o.scale_events = 4000;
    }
    if (!set.part) {
        o.part_events = 1000;
        o.part_aggregates = 100;
    }
    if (!set.fail) {
        o.fail_events = 2000;
        o.fail_aggregates = 200;
    }
    if (!set.lat) {
        o.latency_seconds = 1.5;
    }
    o.latency_max_seconds = 2;
    o.latency_loads = {0.5};
    o.latency_poll_diag = false;
    if (!set.health) {
        o.health_minutes = 0.15;
    }
    o.health_sample_s = 1;
    o.health_purge_s = 2;
    o.health_age_s = 3;
    if (!set.writes) {
        o.writes = 800;
    }
    if (!set.slices) {
        o.w_slices = 4;
    }
    if (!set.quiet) {
        o.no_retry = true;
    }
}

} // namespace

Options parse_options(int argc, char **argv, const std::vector<Scenario> &table) {
    Options o;
    Given set;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> const char * {
            if (i + 1 >= argc) {
                die(a + " needs a value");
            }
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            usage(stdout, table);
            std::exit(0);
        }
        const auto &opts = option_table();
        const auto opt = std::find_if(opts.begin(), opts.end(), [&](const Opt &x) { return a == x.name; });
        if (opt == opts.end()) {
            usage(stderr, table);
            die("unknown option " + a);
        }
        opt->apply(o, a, opt->takes_value ? value() : nullptr);
        if (opt->given != nullptr) {
            set.*(opt->given) = true;
        }
    }
    if (o.quick) {
        apply_quick(o, set);
    }
    if (o.only.empty()) {
        o.only = names(table, true);
    }
    for (const auto &item : split(o.only)) {
        if (std::none_of(table.begin(), table.end(), [&](const Scenario &s) { return item == s.name; })) {
            die("--only: unknown scenario '" + item + "' (known: " + names(table, false) + ")");
        }
    }
    if (o.consume_events < 0) {
        o.consume_events = std::max(200L, o.events / 20);
    }
    if (o.seed_events < 0) {
        o.seed_events = std::max(100L, o.events / 20);
    }
    if (o.w1_events < 0) {
        o.w1_events = std::max(100L, o.events / 100);
    }
    return o;
}

QuietRule quiet_rule(const Options &o) {
    QuietRule r;
    r.max_steal = o.max_steal_pct / 100.0;
    r.wait_s = o.quiet_wait_s;
    r.retry = !o.no_retry && o.quiet_wait_s > 0;
    return r;
}

bool wanted(const Options &o, const std::string &scenario) {
    const auto items = split(o.only);
    return std::find(items.begin(), items.end(), scenario) != items.end();
}

} // namespace bench
