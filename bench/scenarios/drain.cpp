// D: the relay (public C API, in the drain child relay_drain so its peak RSS is its own) draining
// each --drain-sizes backlog with --batch-size and --window. Targets: each drain >= 0.85 x B; the
// largest >= 0.8 x the smallest; the relay's peak RSS < 64 MiB at 1M.
// E: the same drains, and B, with a subscriber taking the queue as it fills (support/subscriber.hpp),
// the shape of production. Targets (issue 19, goal 2): each drain >= 0.85 x Bc (B so measured); the
// largest >= 0.85 x the smallest.
#include "../scenarios.hpp"

#include "../support/relay.hpp"
#include "../support/subscriber.hpp"

#include <algorithm>
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

// B at the smallest backlog's size, so the report shows what a queue that grows by less costs the
// broker: a short publish is a burst RabbitMQ takes faster than it sustains.
void baseline_at_smallest(Bench &b) {
    Run &run = b.run;
    const long n = *std::min_element(b.o.drain_sizes.begin(), b.o.drain_sizes.end());
    const Row *base = find_row(run, "B");
    if (base == nullptr || n >= base->events) {
        return;
    }
    const Generator g = b.events(0x001f, b.base.prefix, n, n);
    b.pg.exec("CHECKPOINT");
    Row r = publish_baseline(run, b.o, g);
    expect_queue_holds(run, b.admin, n, "B-" + count_label(n));
    b.admin.purge(run.queue);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    r.key = "B-" + count_label(n);
    r.what = "plain librabbitmq-c publisher as B, " + count_label(n) + " messages";
    r.ratio_value = r.rate() / base->rate();
    r.ratio = r.key + "/B = " + fixed(r.ratio_value, 2);
    run.rows.push_back(r);
}

} // namespace

void scenario_drain(Bench &b) {
    Run &run = b.run;
    baseline_at_smallest(b);
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

namespace {

Figure consumed_ratio(const std::string &name, const Row &r, const Row &base, double target) {
    Figure f;
    f.section = "1 relay drain";
    f.name = name;
    f.value = rate_with_steal(r);
    f.baseline = base.key + " " + rate_with_steal(base);
    f.ratio = r.rate() / base.rate();
    f.target = "≥ " + fixed(target, 2);
    f.verdict = verdict(f.ratio >= target);
    return f;
}

} // namespace

Row consumed_baseline(Bench &b, const Generator &g) {
    Run &run = b.run;
    const std::string key = "Bc-" + count_label(g.count);
    b.pg.exec("CHECKPOINT");
    Row r;
    {
        Subscriber s(run.amqp_url, run.queue, g);
        r = publish_baseline(run, b.o, g);
        expect_got_all(run, b.admin, s, key);
    }
    r.key = key;
    r.what = "plain librabbitmq-c publisher (confirms, window " + std::to_string(b.o.window) + "), " +
             count_label(g.count) + " messages, a subscriber consuming the queue";
    progress(key + ": " + rate_with_steal(r));
    return r;
}

void scenario_drain_consumed(Bench &b) {
    Run &run = b.run;
    const Options &o = b.o;
    std::vector<size_t> drains; // the rows of the relay's drains
    Json series = Json::array();
    uint16_t code = 0x0060;
    for (long n : o.drain_sizes) {
        // The baseline publishes as many messages as the drain: both last as long, and meet the
        // same share of a shared machine's bad seconds.
        const Generator g = b.events(code++, b.base.prefix, n, (n + o.per_aggregate - 1) / o.per_aggregate);
        run.rows.push_back(consumed_baseline(b, g));
        const size_t base_idx = run.rows.size() - 1;
        const std::string key = "Rc-" + count_label(n);
        progress(key + ": loading the backlog (COPY, VACUUM ANALYZE, CHECKPOINT)");
        b.load(g);
        Row r;
        {
            Subscriber s(run.amqp_url, run.queue, g);
            r = run_relay(run, o, g, b.pg, o.batch_size, o.window, key);
            expect_got_all(run, b.admin, s, key);
        }
        r.what = "outbox relay draining a backlog (batch " + std::to_string(o.batch_size) + ", window " +
                 std::to_string(o.window) + "), a subscriber consuming the queue";
        const Row &bc = run.rows[base_idx];
        Figure f = consumed_ratio("relay drain, backlog " + count_label(n) + ", queue consumed", r, bc, 0.85);
        r.ratio_value = f.ratio;
        r.ratio = key + "/" + bc.key + " = " + fixed(f.ratio, 2);
        r.target = "≥ 0.85: " + f.verdict;
        add_figure(run, f);
        series.push(Json::object()
                        .integer("backlog", n)
                        .num("events_per_s", r.rate(), 1)
                        .num("baseline_events_per_s", bc.rate(), 1)
                        .integer("peak_rss_kib", r.peak_rss_kib));
        run.rows.push_back(r);
        drains.push_back(run.rows.size() - 1);
    }
    run.series["drain_consumed"] = series;
    if (drains.size() > 1) {
        const Row &lo = run.rows[drains.front()];
        const Row &hi = run.rows[drains.back()];
        add_figure(run, consumed_ratio("throughput at the largest backlog vs the smallest, queue consumed (" + hi.key +
                                           " vs " + lo.key + ")",
                                       hi, lo, 0.85));
    }
    run.notes.push_back("E: B and D's drains again with a subscriber (basic.consume, no_ack, on a thread of "
                        "relay_bench) taking the bench queue as it fills, as the services' consumers do: the "
                        "queue stays short, and RabbitMQ confirms a persistent message once it is delivered "
                        "(or written to disk). Each drain is compared with B publishing as many messages "
                        "(Bc-<size>), run just before it. Each run checks the subscriber got every message once "
                        "and the queue is empty. 'CPU stolen': the share of the machine's CPU time /proc/stat "
                        "counts as steal (taken by the hypervisor for other guests) during that measurement.");
    reset_outbox(b.pg, run);
    b.phase("E");
}

} // namespace bench
