#include "relay.hpp"

#include "config.hpp"
#include "proc.hpp"

#include <algorithm>
#include <sstream>
#include <utility>

namespace bench {

// The same connection string with libpq "options" (session settings such as "-c jit=off") added.
std::string with_options(const std::string &url, const std::string &options) {
    if (url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0) {
        std::string enc;
        for (char c : options) {
            if (c == ' ') {
                enc += "%20";
            } else if (c == '=') {
                enc += "%3D";
            } else {
                enc.push_back(c);
            }
        }
        return url + (url.find('?') == std::string::npos ? "?" : "&") + "options=" + enc;
    }
    return url + " options='" + options + "'";
}

std::string DrainStats::line() const {
    std::ostringstream x;
    x << steps << ' ' << claimed << ' ' << published << ' ' << failed << ' ' << held_back << ' ' << unconfirmed << ' '
      << claim_us << ' ' << publish_us << ' ' << mark_us << ' ' << total_us << ' ' << first_step_us << ' '
      << max_step_us << ' ' << connect_us << ' ' << fixed(seconds, 6) << ' ' << fixed(cpu_s, 6);
    return x.str();
}
bool DrainStats::parse(const std::string &s) {
    std::istringstream x(s);
    x >> steps >> claimed >> published >> failed >> held_back >> unconfirmed >> claim_us >> publish_us >> mark_us >>
        total_us >> first_step_us >> max_step_us >> connect_us >> seconds >> cpu_s;
    return !x.fail();
}

namespace {

// The drain in a child process of its own (relay_drain): the relay's peak RSS is then the
// child's, not this harness's with its buffers and threads.
DrainStats drain_in_child(const Run &run, int batch, int window, const std::string &pg_options, long expected,
                          const std::string &key, const std::string &steps_csv) {
    const std::vector<std::string> args = {run.drain_bin,
                                           run.schema,
                                           run.exchange,
                                           run.channel,
                                           std::to_string(batch),
                                           std::to_string(window),
                                           std::to_string(expected),
                                           key,
                                           steps_csv.empty() ? "-" : steps_csv,
                                           pg_options.empty() ? "-" : pg_options};
    Proc p = spawn_proc(args, 1, "");
    const std::string out = read_all(p.out);
    ProcExit e = reap(p);
    DrainStats d;
    if (e.status != 0 || !d.parse(out)) {
        die(key + ": the relay process failed (exit " + std::to_string(e.status) + ")");
    }
    d.peak_rss_kib = e.maxrss_kib;
    return d;
}

double per_event(const DrainStats &d, int64_t us) {
    return d.published > 0 ? static_cast<double>(us) / static_cast<double>(d.published) : 0;
}

Json drain_json(const DrainStats &d, long backlog) {
    Json x = Json::object();
    x.integer("steps", d.steps).integer("claimed", d.claimed).integer("published", d.published);
    x.integer("failed", d.failed).integer("held_back", d.held_back).integer("unconfirmed", d.unconfirmed);
    x.integer("claim_us", d.claim_us).integer("publish_us", d.publish_us).integer("mark_us", d.mark_us);
    x.integer("step_total_us", d.total_us).integer("first_step_us", d.first_step_us);
    x.integer("connect_us", d.connect_us);
    x.integer("max_step_us", d.max_step_us).num("claim_us_per_event", per_event(d, d.claim_us), 2);
    x.num("publish_us_per_event", per_event(d, d.publish_us), 2).num("mark_us_per_event", per_event(d, d.mark_us), 2);
    x.integer("backlog", backlog);
    return x;
}

// Where a drain's time went: claim, publish+confirm, mark+commit.
std::string phases_note(const std::string &key, const DrainStats &d) {
    const double tot = static_cast<double>(std::max<int64_t>(1, d.claim_us + d.publish_us + d.mark_us));
    auto part = [&](const char *name, int64_t us) {
        return std::string(name) + " " + fixed(static_cast<double>(us) / 1e6, 2) + " s (" +
               fixed(100.0 * static_cast<double>(us) / tot, 0) + "%, " + fixed(per_event(d, us), 2) + " us/event)";
    };
    return key + " phases (outbox_relay_stats, summed over " + std::to_string(d.steps) +
           " steps): " + part("claim", d.claim_us) + ", " + part("publish+confirm", d.publish_us) + ", " +
           part("mark+commit", d.mark_us) + "; first step " + fixed(static_cast<double>(d.first_step_us) / 1e3, 1) +
           " ms, of which connecting to both servers " + fixed(static_cast<double>(d.connect_us) / 1e3, 1) +
           " ms (not timed, as B's connect is not), slowest step " +
           fixed(static_cast<double>(d.max_step_us) / 1e3, 1) + " ms; relay process peak RSS " +
           fixed(static_cast<double>(d.peak_rss_kib) / 1024.0, 1) + " MiB";
}

} // namespace

Row run_relay(Run &run, const Options &o, const Generator &g, Pg &pg, int batch, int window, const std::string &key,
              const std::string &pg_options) {
    progress(key + ": relay draining a backlog of " + std::to_string(g.count) + " events (batch " +
             std::to_string(batch) + ", window " + std::to_string(window) + ")");
    const CpuTimes machine0 = cpu_times();
    const ServerCpu servers0 = server_cpu();
    const DrainStats d = drain_in_child(run, batch, window, pg_options, g.count, key, o.steps_csv);
    const CpuTimes machine1 = cpu_times();
    const ServerCpu servers1 = server_cpu();
    const double steal = steal_share(machine0, machine1);

    Row r;
    r.client_cpu_s = d.cpu_s;
    r.peak_rss_kib = d.peak_rss_kib;
    r.steal = steal;
    r.idle = idle_share(machine0, machine1);
    r.broker_cpu_s = servers1.broker_s - servers0.broker_s;
    r.pg_cpu_s = servers1.pg_s - servers0.pg_s;
    r.key = key;
    r.what = "outbox relay draining a backlog (batch " + std::to_string(batch) + ", window " + std::to_string(window) +
             ", " + std::to_string(g.count / std::max(1L, g.aggregates)) + " event(s)/aggregate)";
    r.events = d.published;
    r.seconds = d.seconds;
    r.extra = drain_json(d, g.count);
    if (key.rfind("P-", 0) != 0 && key != "R-w1") { // D, E, Z and the diagnostics
        run.notes.push_back(phases_note(key, d));
    }

    expect(run, d.published == g.count && d.failed == 0 && d.unconfirmed == 0,
           key + ": every event confirmed and marked (" + std::to_string(d.published) + "/" + std::to_string(g.count) +
               ")");
    auto res = pg.query("SELECT count(*) FILTER (WHERE status = 'PUBLISHED'), count(*) FROM " +
                            table_of(run, "outbox") + " WHERE aggregate_id LIKE $1",
                        {std::string(1, g.prefix) + "%"});
    expect(run, res->get_ll(0, 0) == g.count && res->get_ll(0, 1) == g.count,
           key + ": all " + std::to_string(g.count) + " rows are PUBLISHED (" + res->get(0, 0) + " of " +
               res->get(0, 1) + ")");
    return r;
}

} // namespace bench
