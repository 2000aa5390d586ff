// D: the relay (public C API, in the drain child relay_drain so its peak RSS is its own) draining
// each --drain-sizes backlog with --batch-size and --window. Targets: each drain >= 0.85 x B; the
// largest >= 0.8 x the smallest; the relay's peak RSS < 64 MiB at 1M.
#include "../scenarios.hpp"

#include "../support/relay.hpp"

#include <chrono>
#include <thread>

namespace bench {

namespace {

// One drain of a backlog of n events: its row, its figures against B and its point of the series.
Row drain_backlog(Bench &b, long n, uint16_t code, Json &series) {
    Run &run = b.run;
    const Options &o = b.o;
    const Generator g = b.events(code, b.base.prefix, n, (n + o.per_aggregate - 1) / o.per_aggregate);
    const std::string key = "R-" + count_label(n);
    progress(key + ": loading the backlog (COPY, VACUUM ANALYZE, CHECKPOINT)");
    const auto l0 = Clock::now();
    b.load(g);
    progress(key + ": loaded in " + fixed(seconds_between(l0, Clock::now()), 1) + " s");
    Row r = run_relay(run, o, g, b.pg, o.batch_size, o.window, key);
    expect_queue_holds(run, b.admin, g.count, key);
    check_sample(run, b.admin, g, key);
    Figure f;
    f.section = "1 relay drain";
    f.name = "relay drain, backlog " + count_label(n) + " (batch " + std::to_string(o.batch_size) + ", window " +
             std::to_string(o.window) + ")";
    f.value = rate_str(r.rate());
    if (const Row *base = find_row(run, "B")) {
        f.baseline = "B " + rate_str(base->rate());
        f.ratio = r.rate() / base->rate();
        f.target = "≥ 0.85";
        f.verdict = verdict(f.ratio >= 0.85);
        r.ratio_value = f.ratio;
        r.ratio = key + "/B = " + fixed(f.ratio, 2);
        r.target = "≥ 0.85: " + f.verdict;
    }
    add_figure(run, f);
    Figure m;
    m.section = "1 relay drain";
    m.name = "relay process peak RSS, backlog " + count_label(n);
    m.value = fixed(static_cast<double>(r.peak_rss_kib) / 1024.0, 1) + " MiB";
    if (n >= 1000000) {
        m.target = "< 64 MiB";
        m.verdict = verdict(r.peak_rss_kib < 64L * 1024);
    }
    add_figure(run, m);
    series.push(
        Json::object().integer("backlog", n).num("events_per_s", r.rate(), 1).integer("peak_rss_kib", r.peak_rss_kib));
    return r;
}

} // namespace

void scenario_drain(Bench &b) {
    Run &run = b.run;
    Json series = Json::array();
    const size_t first_idx = run.rows.size(); // the row of the first backlog (the smallest by default)
    uint16_t code = 0x0020;
    for (long n : b.o.drain_sizes) {
        run.rows.push_back(drain_backlog(b, n, code++, series));
        b.admin.purge(run.queue);
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (b.o.drain_sizes.size() > 1) {
        const Row &lo = run.rows[first_idx];
        const Row &hi = run.rows.back();
        Figure f;
        f.section = "1 relay drain";
        f.name = "throughput at the largest backlog vs the smallest (" + hi.key + " vs " + lo.key + ")";
        f.value = rate_str(hi.rate());
        f.baseline = lo.key + " " + rate_str(lo.rate());
        f.ratio = hi.rate() / lo.rate();
        f.target = "≥ 0.80 (within 20%)";
        f.verdict = verdict(f.ratio >= 0.8);
        add_figure(run, f);
    }
    run.series["drain"] = series;
    reset_outbox(b.pg, run);
    b.phase("D");
}

} // namespace bench
