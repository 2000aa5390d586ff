// D: the relay (public C API, in the drain child relay_drain so its peak RSS is its own) draining
// each --drain-sizes backlog with --batch-size and --window, each against B (the same publisher as
// scenario B, --events messages) measured just before it. Targets: each drain >= 0.85 x B; the
// largest >= 0.8 x the smallest; the relay's peak RSS < 64 MiB at 1M.
// E: the same drains, and B publishing as many messages, with a subscriber taking the queue as it
// fills (support/subscriber.hpp), the shape of production. Targets (issue 30): each drain
// >= 0.90 x Bc (B so measured), and the largest >= 0.90 x the smallest and x the next size (Rc-1M
// vs Rc-100k); through the cluster's quorum queue (--queue-type quorum, bench/run --cluster) >= 0.85.
// Every ratio is judged on a quiet pair (support/quiet.hpp): both sides measured back to back, again
// while either lost more than --max-steal of the CPU.
#include "../scenarios.hpp"

#include "../support/relay.hpp"
#include "../support/subscriber.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

namespace bench {

namespace {

void purge_and_settle(Bench &b) {
    b.admin.purge(b.run.queue);
    std::this_thread::sleep_for(std::chrono::seconds(1)); // let the broker settle after the purge
}

// The backlog of n events of D (code) or E, loaded: COPY, VACUUM ANALYZE, CHECKPOINT.
Generator load_backlog_of(Bench &b, long n, uint16_t code, const std::string &key) {
    const Generator g = b.events(code, b.base.prefix, n, (n + b.o.per_aggregate - 1) / b.o.per_aggregate);
    progress(key + ": loading the backlog (COPY, VACUUM ANALYZE, CHECKPOINT)");
    const auto l0 = Clock::now();
    b.load(g);
    progress(key + ": loaded in " + fixed(seconds_between(l0, Clock::now()), 1) + " s");
    return g;
}

// One drain of D on a loaded backlog, checked; the queue purged afterwards.
Row plain_drain(Bench &b, const Generator &g, const std::string &key) {
    Row r = run_relay(b.run, b.o, g, b.pg, b.o.batch_size, b.o.window, key);
    expect_queue_holds(b.run, b.admin, g.count, key);
    check_sample(b.run, b.admin, g, key);
    purge_and_settle(b);
    return r;
}

// B as scenario B measures it (--events messages), checked; the queue purged afterwards.
Row fresh_baseline(Bench &b, const std::string &for_key) {
    b.pg.exec("CHECKPOINT");
    Row r = publish_baseline(b.run, b.o, b.base);
    expect_queue_holds(b.run, b.admin, b.base.count, "B before " + for_key);
    purge_and_settle(b);
    r.key = "B@" + for_key;
    r.what = "plain librabbitmq-c publisher as B, just before " + for_key;
    return r;
}

// One attempt of D's pair at size n: the backlog loaded, then B, then the relay's drain.
std::vector<Row> drain_pair(Bench &b, long n, uint16_t code, int attempt) {
    const std::string key = "R-" + count_label(n);
    const Generator g = load_backlog_of(b, n, code, key);
    Row base = fresh_baseline(b, key);
    Row r = plain_drain(b, g, key);
    return {retried(base, attempt), retried(r, attempt)};
}

// One drain of a backlog of n events: its pair with B judged, its figures and its point of the series.
Row drain_backlog(Bench &b, long n, uint16_t code, Json &series) {
    Run &run = b.run;
    const Options &o = b.o;
    const std::string key = "R-" + count_label(n);
    const auto q = measure_quiet<std::vector<Row>>(
        key + " vs B", quiet_rule(o), [&](int attempt) { return drain_pair(b, n, code, attempt); }, steals);
    const Row &base = q.value[0];
    Row r = q.value[1];
    Figure f;
    f.section = "1 relay drain";
    f.name = "relay drain, backlog " + count_label(n) + " (batch " + std::to_string(o.batch_size) + ", window " +
             std::to_string(o.window) + ")";
    f.value = rate_str(r.rate());
    f.baseline = base.key + " " + rate_str(base.rate());
    f.ratio = r.rate() / base.rate();
    f.target = "≥ 0.85";
    judge(f, q.how, f.ratio >= 0.85, r.steal, base.steal);
    r.ratio_value = f.ratio;
    r.ratio = r.key + "/" + base.key + " = " + fixed(f.ratio, 2);
    r.target = "≥ 0.85: " + f.verdict;
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
    run.rows.push_back(base);
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
    purge_and_settle(b);
    r.key = "B-" + count_label(n);
    r.what = "plain librabbitmq-c publisher as B, " + count_label(n) + " messages";
    r.ratio_value = r.rate() / base->rate();
    r.ratio = r.key + "/B = " + fixed(r.ratio_value, 2);
    run.rows.push_back(r);
}

// The largest drain against the smallest (lo, hi: their rows as measured above): judged on those
// when both were quiet; otherwise both drains again (drain(size, attempt)) until a quiet pair.
Figure size_ratio(Bench &b, const std::string &name, const Row &lo, const Row &hi, double target,
                  const std::function<Row(long, int)> &drain) {
    const long lo_n = lo.events, hi_n = hi.events;
    const auto q = measure_quiet<std::vector<Row>>(
        hi.key + " vs " + lo.key, quiet_rule(b.o),
        [&](int attempt) {
            return attempt == 1 ? std::vector<Row>{lo, hi}
                                : std::vector<Row>{drain(lo_n, attempt), drain(hi_n, attempt)};
        },
        steals);
    const Row &l = q.value[0], &h = q.value[1];
    if (q.how.kept > 1) { // measured again: their rows too
        b.run.rows.push_back(l);
        b.run.rows.push_back(h);
    }
    Figure f;
    f.section = "1 relay drain";
    f.name = name;
    f.value = rate_str(h.rate());
    f.baseline = l.key + " " + rate_str(l.rate());
    f.ratio = h.rate() / l.rate();
    f.target = "≥ " + fixed(target, 2);
    judge(f, q.how, f.ratio >= target, h.steal, l.steal);
    return f;
}

} // namespace

void scenario_drain(Bench &b) {
    Run &run = b.run;
    baseline_at_smallest(b);
    Json series = Json::array();
    std::vector<Row> drains;
    uint16_t code = 0x0020;
    for (long n : b.o.drain_sizes) {
        drains.push_back(drain_backlog(b, n, code++, series));
        run.rows.push_back(drains.back());
    }
    if (drains.size() > 1) {
        const Row &lo = drains.front(), &hi = drains.back();
        add_figure(run,
                   size_ratio(b, "throughput at the largest backlog vs the smallest (" + hi.key + " vs " + lo.key + ")",
                              lo, hi, 0.8, [&](long n, int attempt) {
                                  const std::string key = "R-" + count_label(n);
                                  const Generator g = load_backlog_of(b, n, 0x0020, key);
                                  return retried(plain_drain(b, g, key), attempt);
                              }));
    }
    run.series["drain"] = series;
    reset_outbox(b.pg, run);
    b.phase("D");
}

namespace {

// E's target (issue 30): 0.90 on the local broker, 0.85 through the cluster's quorum queue.
double consumed_target(const Options &o) {
    return o.queue_type == "quorum" ? 0.85 : 0.90;
}

Figure consumed_ratio(const std::string &name, const Row &r, const Row &base, double target) {
    Figure f;
    f.section = "1 relay drain";
    f.name = name;
    f.value = rate_str(r.rate());
    f.baseline = base.key + " " + rate_str(base.rate());
    f.ratio = r.rate() / base.rate();
    f.target = "≥ " + fixed(target, 2);
    return f;
}

// One drain of E on a loaded backlog, with a subscriber consuming the queue as it fills.
Row consumed_drain(Bench &b, const Generator &g, const std::string &key) {
    Row r;
    {
        Subscriber s(b.run.amqp_url, b.run.queue, g);
        r = run_relay(b.run, b.o, g, b.pg, b.o.batch_size, b.o.window, key);
        expect_got_all(b.run, b.admin, s, key);
    }
    r.what = "outbox relay draining a backlog (batch " + std::to_string(b.o.batch_size) + ", window " +
             std::to_string(b.o.window) + "), a subscriber consuming the queue";
    return r;
}

// One attempt of E's pair at size n: the backlog loaded, then B publishing as many messages
// (Bc-<n>), then the relay's drain (Rc-<n>), each with a subscriber: the timed parts back to back.
std::vector<Row> consumed_pair(Bench &b, const Generator &g, int attempt) {
    const std::string key = "Rc-" + count_label(g.count);
    progress(key + ": loading the backlog (COPY, VACUUM ANALYZE, CHECKPOINT)");
    b.load(g);
    Row bc = consumed_baseline(b, g);
    Row r = consumed_drain(b, g, key);
    return {retried(bc, attempt), retried(r, attempt)};
}

// E at one size: the pair judged, its figure, its point of the series; the drain's row.
Row consumed_size(Bench &b, long n, uint16_t code, Json &series) {
    Run &run = b.run;
    const Generator g = b.events(code, b.base.prefix, n, (n + b.o.per_aggregate - 1) / b.o.per_aggregate);
    const std::string key = "Rc-" + count_label(n);
    const auto q = measure_quiet<std::vector<Row>>(
        key + " vs Bc", quiet_rule(b.o), [&](int attempt) { return consumed_pair(b, g, attempt); }, steals);
    const Row &bc = q.value[0];
    Row r = q.value[1];
    const double target = consumed_target(b.o);
    Figure f = consumed_ratio("relay drain, backlog " + count_label(n) + ", queue consumed", r, bc, target);
    judge(f, q.how, f.ratio >= target, r.steal, bc.steal);
    r.ratio_value = f.ratio;
    r.ratio = r.key + "/" + bc.key + " = " + fixed(f.ratio, 2);
    r.target = f.target + ": " + f.verdict;
    add_figure(run, f);
    series.push(Json::object()
                    .integer("backlog", n)
                    .num("events_per_s", r.rate(), 1)
                    .num("baseline_events_per_s", bc.rate(), 1)
                    .integer("peak_rss_kib", r.peak_rss_kib));
    run.rows.push_back(bc);
    return r;
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
    std::vector<Row> drains;
    Json series = Json::array();
    uint16_t code = 0x0060;
    for (long n : o.drain_sizes) {
        drains.push_back(consumed_size(b, n, code++, series));
        run.rows.push_back(drains.back());
    }
    run.series["drain_consumed"] = series;
    const auto again = [&](long n, int attempt) {
        const std::string key = "Rc-" + count_label(n);
        const Generator g = load_backlog_of(b, n, 0x0060, key);
        return retried(consumed_drain(b, g, key), attempt);
    };
    if (drains.size() > 1) {
        const Row &lo = drains.front(), &hi = drains.back();
        add_figure(run, size_ratio(b,
                                   "throughput at the largest backlog vs the smallest, queue consumed (" + hi.key +
                                       " vs " + lo.key + ")",
                                   lo, hi, consumed_target(o), again));
    }
    if (drains.size() > 2) { // issue 30: the largest against the next size too (Rc-1M vs Rc-100k)
        const Row &lo = drains[drains.size() - 2], &hi = drains.back();
        add_figure(run, size_ratio(b,
                                   "throughput at the largest backlog vs the next, queue consumed (" + hi.key +
                                       " vs " + lo.key + ")",
                                   lo, hi, consumed_target(o), again));
    }
    run.notes.push_back("E: B and D's drains again with a subscriber (basic.consume, no_ack, on a thread of "
                        "relay_bench) taking the bench queue as it fills, as the services' consumers do: the "
                        "queue stays short, and RabbitMQ confirms a persistent message once it is delivered "
                        "(or written to disk). Each drain is compared with B publishing as many messages "
                        "(Bc-<size>), run just before it on the loaded backlog. Each run checks the subscriber got "
                        "every message once and the queue is empty. 'CPU stolen': the share of the machine's CPU "
                        "time /proc/stat counts as steal (taken by the hypervisor for other guests) during that "
                        "measurement.");
    reset_outbox(b.pg, run);
    b.phase("E");
}

} // namespace bench
