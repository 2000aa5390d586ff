#include "report.hpp"

#include <outbox.h>

#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <thread>

namespace bench {

namespace {

// The current time, UTC: "2026-01-31T12:00:00Z" (iso) or "2026-01-31 12:00 UTC".
std::string utc_now(bool iso) {
    char when[64];
    const time_t now = std::time(nullptr);
    tm u{};
    gmtime_r(&now, &u);
    if (iso) {
        std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &u);
    } else {
        std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &u);
    }
    return when;
}

Json params_json(const Run &run, const Options &o) {
    Json p = Json::object();
    p.integer("events", o.events).integer("payload_bytes", o.payload_bytes).integer("body_bytes", run.body_bytes);
    p.integer("window", o.window).integer("batch_size", o.batch_size).integer("per_aggregate", o.per_aggregate);
    p.integer("seed_events", o.seed_events).integer("w1_events", o.w1_events).integer("writers", o.writers);
    p.integer("writes", o.writes).integer("w_slices", o.w_slices).integer("w_payload_bytes", o.w_payload_bytes);
    p.set("drain_sizes", Json::numbers(std::vector<double>(o.drain_sizes.begin(), o.drain_sizes.end()), 0));
    p.integer("sweep_events", o.sweep_events).integer("scale_events", o.scale_events);
    p.integer("scale_per_aggregate", o.scale_per_aggregate).num("latency_seconds", o.latency_seconds, 1);
    p.num("health_minutes", o.health_minutes, 2).integer("health_age_s", o.health_age_s);
    const QuietRule rule = quiet_rule(o);
    p.num("max_steal", rule.max_steal, 4).num("quiet_wait_s", rule.wait_s, 0).boolean("retry", rule.retry);
    return p;
}

// CPU seconds over a row's events, in microseconds an event ("12.3").
std::string us_per_event(const Row &r, double cpu_s) {
    return fixed(cpu_s * 1e6 / static_cast<double>(r.events), 1);
}

// A row's CPU per event, "client, RabbitMQ, PostgreSQL" in microseconds (the servers' when measured).
std::string cpu_per_event(const Row &r) {
    if (r.events <= 0 || r.client_cpu_s < 0) {
        return "";
    }
    std::string s = us_per_event(r, r.client_cpu_s);
    if (r.broker_cpu_s >= 0) {
        s += ", " + us_per_event(r, r.broker_cpu_s) + ", " + us_per_event(r, r.pg_cpu_s);
    }
    return s;
}

Json row_json(const Row &r) {
    Json j = Json::object();
    j.str("key", r.key).str("what", r.what).integer("events", r.events).num("seconds", r.seconds, 4);
    j.num("events_per_s", r.rate(), 1);
    if (r.ratio_value >= 0) {
        j.num("ratio", r.ratio_value, 4).str("ratio_label", r.ratio);
    }
    if (!r.target.empty()) {
        j.str("target", r.target);
    }
    if (r.client_cpu_s >= 0) {
        j.num("client_cpu_s", r.client_cpu_s, 3);
    }
    if (r.peak_rss_kib >= 0) {
        j.integer("relay_peak_rss_kib", r.peak_rss_kib);
    }
    if (r.steal >= 0) {
        j.num("cpu_steal", r.steal, 3);
    }
    if (r.broker_cpu_s >= 0) {
        j.num("broker_cpu_s", r.broker_cpu_s, 3).num("pg_cpu_s", r.pg_cpu_s, 3).num("cpu_idle", r.idle, 3);
    }
    return j.merge(r.extra);
}

Json figure_json(const Figure &f) {
    Json j = Json::object();
    j.str("section", f.section).str("name", f.name).str("value", f.value).str("baseline", f.baseline);
    if (f.ratio >= 0) {
        j.num("ratio", f.ratio, 4);
    }
    j.str("target", f.target).str("verdict", f.verdict);
    if (f.attempts > 0) {
        j.integer("attempts", f.attempts).num("cpu_steal", f.steal, 4).num("baseline_cpu_steal", f.baseline_steal, 4);
        j.set("attempt_steals", Json::numbers(f.attempt_steals, 4)).str("judging", f.judging);
    }
    return j;
}

// The Targets table: every figure with its same-run baseline, ratio, target, verdict, the CPU
// stolen around both sides and the attempts its judging took, in the order.
void targets_md(std::ostringstream &m, const Run &run, const Options &o) {
    int pass = 0, miss = 0, unjudged = 0;
    for (const auto &f : run.figures) {
        pass += f.verdict == "PASS" ? 1 : 0;
        miss += f.verdict == "MISS" ? 1 : 0;
        unjudged += f.verdict == "UNJUDGED" ? 1 : 0;
    }
    const QuietRule rule = quiet_rule(o);
    m << "## Targets (" << pass << " PASS, " << miss << " MISS, " << unjudged << " UNJUDGED)\n\n";
    m << "A verdict is given only when both sides of the figure saw at most " << steal_pct(rule.max_steal)
      << " of the CPU stolen; "
      << (rule.retry ? "a noisy pair was measured again after an idle wait, for at most " + fixed(rule.wait_s, 0) +
                           " s per figure"
                     : std::string("this run made one attempt per figure (retrying off)"))
      << ", and without a quiet pair the figure is UNJUDGED (never PASS).\n\n";
    m << "| scenario | figure | value | baseline (same run) | ratio | target | verdict "
         "| CPU stolen (figure / baseline) | attempts |\n";
    m << "| --- | --- | --- | --- | ---: | --- | --- | --- | ---: |\n";
    std::vector<Figure> figs = run.figures;
    std::stable_sort(figs.begin(), figs.end(), [](const Figure &a, const Figure &b) { return a.section < b.section; });
    for (const auto &f : figs) {
        const bool judged = f.attempts > 0;
        m << "| " << f.section << " | " << f.name << " | " << f.value << " | " << f.baseline << " | "
          << (f.ratio >= 0 ? fixed(f.ratio, f.ratio < 10 ? 2 : 1) : "") << " | " << f.target << " | "
          << (f.verdict == "PASS" || f.verdict.empty() ? f.verdict : "**" + f.verdict + "**") << " | "
          << (judged ? steal_pct(f.steal) + " / " + steal_pct(f.baseline_steal) : "") << " | "
          << (judged ? std::to_string(f.attempts) : "") << " |\n";
    }
}

} // namespace

void print_table(const Run &run, const Options &o, const Env &env) {
    std::printf("\n## outbox relay benchmark\n\n");
    std::printf("| scenario | events | seconds | events/s | ratio | target |\n");
    std::printf("| --- | ---: | ---: | ---: | --- | --- |\n");
    for (const auto &r : run.rows) {
        std::printf("| %s: %s | %ld | %.2f | %.0f | %s | %s |\n", r.key.c_str(), r.what.c_str(), r.events, r.seconds,
                    r.rate(), r.ratio.empty() ? "" : r.ratio.c_str(), r.target.c_str());
    }
    std::printf("\n");
    std::printf("- message: %d-byte payload, %d-byte body, persistent, mandatory, routed to one durable %s "
                "queue; exchange %s\n",
                o.payload_bytes, run.body_bytes, o.queue_type.c_str(), run.exchange.c_str());
    std::printf("- peak RSS of the bench process: %.1f MiB\n", static_cast<double>(peak_rss_kib()) / 1024.0);
    std::string cpu;
    for (const auto &r : run.rows) {
        if (r.client_cpu_s >= 0 && r.events > 0) {
            cpu += (cpu.empty() ? "" : ", ") + r.key + " " + us_per_event(r, r.client_cpu_s) + " us/event";
        }
    }
    if (!cpu.empty()) {
        std::printf("- client CPU (user+sys during the timed part: the relay drain child for a relay's drain, "
                    "relay_bench for B, its subscriber thread included): %s\n",
                    cpu.c_str());
    }
    std::string servers;
    for (const auto &r : run.rows) {
        if (r.broker_cpu_s >= 0 && r.events > 0) {
            servers += (servers.empty() ? "" : "; ") + r.key + " RabbitMQ " + us_per_event(r, r.broker_cpu_s) +
                       ", PostgreSQL " + us_per_event(r, r.pg_cpu_s) + " us/event, machine idle " +
                       fixed(100.0 * r.idle, 0) + "%";
        }
    }
    if (!servers.empty()) {
        std::printf("- servers' CPU (user+sys of every beam.smp and postgres process on the machine, ended backends "
                    "included; for a relay's drain over the drain child's whole life, its connects too): %s\n",
                    servers.c_str());
    }
    for (const auto &n : run.notes) {
        std::printf("- %s\n", n.c_str());
    }
    utsname u{};
    uname(&u);
    std::printf("- liboutbox %s, PostgreSQL %s (connections: %s), librabbitmq %s, %s %s, %u CPUs, run took %.0f s\n",
                outbox_version(), env.pg_version.c_str(), env.pg_transport.c_str(), amqp_version(), u.sysname,
                u.release, std::thread::hardware_concurrency(), env.wall);
    if (!run.failures.empty()) {
        std::printf("- **%zu check(s) FAILED** (see stderr): the figures are not to be trusted\n", run.failures.size());
    }
    std::fflush(stdout);
}

// The report: every figure with its same-run baseline, ratio, target and verdict, then every row.
void write_md(const Run &run, const Options &o, const Env &env) {
    std::ostringstream m;
    const std::string when = utc_now(false);
    utsname un{};
    uname(&un);
    m << "# outbox benchmark report (" << (o.quick ? "quick" : "full") << " run, " << when << ")\n\n";
    m << "Measured the code of commit " << source_rev() << ".\n\n";
    m << "Written by `bench/run` (bench/relay_bench). Every ratio is against a baseline measured in the same run, "
         "on the same servers. liboutbox "
      << outbox_version() << ", PostgreSQL " << env.pg_version << " (connections: " << env.pg_transport
      << "), librabbitmq " << amqp_version() << ", " << un.sysname << " " << un.release << ", "
      << std::thread::hardware_concurrency() << " CPUs; the run took " << fixed(env.wall, 0)
      << " s. The bench queue is a durable " << o.queue_type << " queue; "
      << std::count(run.amqp_url.begin(), run.amqp_url.end(), ',') + 1
      << " RabbitMQ address(es) given (the baseline publishes through the first, where the relay connects "
         "first).\n\n";
    if (o.quick) {
        m << "**Quick mode: small sizes for checking the harness; these figures are not the project's figures.**\n\n";
    }
    if (!run.failures.empty()) {
        m << "**" << run.failures.size() << " self-check(s) FAILED: the figures are not to be trusted.**\n\n";
        for (const auto &f : run.failures) {
            m << "- " << f << "\n";
        }
        m << "\n";
    }
    targets_md(m, run, o);
    m << "\n## Every measurement\n\n";
    m << "| key | what | events | seconds | events/s | ratio | relay peak RSS | CPU stolen | CPU us/event: client, "
         "RabbitMQ, PostgreSQL | machine idle |\n";
    m << "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n";
    for (const auto &r : run.rows) {
        m << "| " << r.key << " | " << r.what << " | " << r.events << " | " << fixed(r.seconds, 2) << " | "
          << fixed(r.rate(), 0) << " | " << r.ratio << " | "
          << (r.peak_rss_kib >= 0 ? fixed(static_cast<double>(r.peak_rss_kib) / 1024.0, 1) + " MiB" : "") << " | "
          << (r.steal >= 0 ? fixed(100.0 * r.steal, 0) + "%" : "") << " | " << cpu_per_event(r) << " | "
          << (r.idle >= 0 ? fixed(100.0 * r.idle, 0) + "%" : "") << " |\n";
    }
    m << "\n## Notes\n\n";
    std::string ph;
    for (const auto &[name, secs] : run.phases) {
        ph += (ph.empty() ? "" : ", ") + name + " " + fixed(secs, 0) + " s";
    }
    if (!ph.empty()) {
        m << "- wall time per scenario (setup included): " << ph << "\n";
    }
    for (const auto &n : run.notes) {
        m << "- " << n << "\n";
    }
    m << "\n## Plots\n\n";
    const std::pair<const char *, const char *> plots[] = {
        {"sweep_batch", "throughput_vs_batch_window.png"},
        {"drain", "drain_vs_backlog.png"},
        {"latency", "latency_vs_load.png"},
        {"health", "table_health.png"},
    };
    for (const auto &[series, png] : plots) {
        if (run.series.count(series) != 0) {
            m << "![" << png << "](" << png << ")\n\n";
        }
    }
    write_file_atomically(o.md_file, m.str());
    progress("report written to " + o.md_file);
}

void write_json(const Run &run, const Options &o, const Env &env) {
    utsname un{};
    uname(&un);
    Json j = Json::object();
    j.str("tool", "bench/relay_bench").str("time", utc_now(true));
    j.str("mode", o.quick ? "quick" : "full").str("source_rev", source_rev());
    j.set("params", params_json(run, o));
    j.set("env", Json::object()
                     .str("liboutbox", outbox_version())
                     .str("postgresql", env.pg_version)
                     .str("postgresql_transport", env.pg_transport)
                     .str("librabbitmq", amqp_version())
                     .str("kernel", un.release)
                     .integer("cpus", std::thread::hardware_concurrency()));
    Json rows = Json::array(), figures = Json::array(), series = Json::object(), seconds = Json::object();
    for (const Row &r : run.rows) {
        rows.push(row_json(r));
    }
    for (const Figure &f : run.figures) {
        figures.push(figure_json(f));
    }
    for (const auto &[name, value] : run.series) {
        series.set(name.c_str(), value);
    }
    for (const auto &[name, secs] : run.phases) {
        seconds.num(name.c_str(), secs, 1);
    }
    j.set("scenarios", rows).set("figures", figures).set("series", series);
    j.set("notes", Json::strings(run.notes)).set("failures", Json::strings(run.failures));
    j.set("scenario_seconds", seconds).integer("peak_rss_kib", peak_rss_kib()).num("wall_seconds", env.wall, 1);
    write_file_atomically(o.json_file, j.print());
    progress("figures written to " + o.json_file);
}

} // namespace bench
