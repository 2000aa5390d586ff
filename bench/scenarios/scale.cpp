// X: 1, 2 and 4 (--scale-relays) `outbox relay` daemons with their defaults draining one backlog of
// --scale-events spread --scale-per-aggregate events per aggregate. Timed from starting them to the
// batch log line that completes the count (the table is not polled). Then the whole queue is
// consumed and, per aggregate, the first delivery of each seq must arrive in seq order with
// nothing missing. Per-relay peak RSS from wait4 after SIGTERM. With storage version 2 one relay
// of a table is active at a time and the others stand by: more relays give availability, and this
// checks that their start-up and handover keep the order, not that they add throughput.
#include "../scenarios.hpp"

#include "../support/proc.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace bench {

namespace {

struct ScaleDrain {
    double seconds = 0;
    std::vector<double> rss_mib; // per relay
    long max_rss_kib = 0;
};

// k daemons draining g's backlog; done when their batch lines add up to g.count.
ScaleDrain drain_with_daemons(Run &run, long k, const Generator &g) {
    const std::string key = "X-" + std::to_string(k);
    std::vector<std::unique_ptr<Daemon>> ds;
    const auto t0 = Clock::now();
    for (long i = 0; i < k; ++i) {
        ds.push_back(start_counting_daemon(run, "bench-x" + std::to_string(k) + "-" + std::to_string(i), {}));
    }
    long done = 0, last_done = -1;
    auto last_progress = Clock::now();
    std::string trouble;
    while (trouble.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        done = 0;
        for (auto &d : ds) {
            done += d->published.load();
            if (!daemon_alive(*d)) {
                trouble = d->name + " exited: " + d->tail;
            }
        }
        if (done >= g.count) {
            break;
        }
        if (done != last_done) {
            last_done = done;
            last_progress = Clock::now();
        } else if (seconds_between(last_progress, Clock::now()) > 60) {
            trouble = "no progress for 60 s at " + std::to_string(done) + " of " + std::to_string(g.count);
        }
        if (g_interrupted.load()) {
            trouble = "interrupted";
        }
    }
    ScaleDrain sd;
    int64_t end_ns = 0;
    for (auto &d : ds) {
        end_ns = std::max(end_ns, d->last_ns.load());
    }
    sd.seconds = static_cast<double>(end_ns - ns_of(t0)) / 1e9;
    for (auto &d : ds) {
        ProcExit e = stop_daemon(*d);
        sd.rss_mib.push_back(static_cast<double>(e.maxrss_kib) / 1024.0);
        sd.max_rss_kib = std::max(sd.max_rss_kib, e.maxrss_kib);
        expect(run, e.status == 0, d->name + ": exited with status 0 on SIGTERM (" + std::to_string(e.status) + ")");
    }
    if (!trouble.empty()) {
        die(key + ": " + trouble);
    }
    return sd;
}

struct OrderCheck {
    long received = 0, dups = 0, out_of_order = 0, foreign = 0, missing = 0;
    [[nodiscard]] bool ok(long count) const {
        return out_of_order == 0 && missing == 0 && foreign == 0 && received >= count;
    }
};

// Consumes the whole queue: per aggregate, the first delivery of each seq must come in seq order.
OrderCheck check_order(const Run &run, const Generator &g) {
    OrderCheck c;
    std::vector<int64_t> last(static_cast<size_t>(g.aggregates), 0);
    {
        Amqp mq(run.amqp_url, 0);
        mq.consume(run.queue);
        Amqp::Delivery dv;
        while (mq.next(dv, c.received < g.count ? 10000 : 300)) {
            ++c.received;
            const long a = dv.aggregate_id.size() > 1 && dv.aggregate_id[0] == 'x'
                               ? std::strtol(dv.aggregate_id.c_str() + 1, nullptr, 10)
                               : -1;
            if (a < 0 || a >= g.aggregates || dv.seq < 1) {
                ++c.foreign;
                continue;
            }
            int64_t &l = last[static_cast<size_t>(a)];
            if (dv.seq == l + 1) {
                l = dv.seq;
            } else if (dv.seq <= l) {
                ++c.dups;
            } else {
                ++c.out_of_order;
                l = dv.seq;
            }
        }
    }
    for (long a = 0; a < g.aggregates; ++a) {
        const int64_t want = (g.count - a + g.aggregates - 1) / g.aggregates;
        if (last[static_cast<size_t>(a)] != want) {
            ++c.missing;
        }
    }
    return c;
}

// One relay count: load, drain, check; its row and figure (vs B for the first count, else vs it).
void scale_point(Bench &b, long k, double &rate1, Json &series) {
    Run &run = b.run;
    const Options &o = b.o;
    const std::string key = "X-" + std::to_string(k);
    const Generator g = b.events(static_cast<uint16_t>(0x0100 + k), 'x', o.scale_events,
                                 std::max(1L, o.scale_events / o.scale_per_aggregate));
    progress(key + ": loading a backlog of " + std::to_string(g.count) + " events over " +
             std::to_string(g.aggregates) + " aggregates");
    b.load(g);
    progress(key + ": " + std::to_string(k) + " `outbox relay` process(es) draining it");
    const ScaleDrain sd = drain_with_daemons(run, k, g);
    auto res =
        b.pg.query("SELECT count(*) FILTER (WHERE status = 'PUBLISHED'), count(*) FROM " + table_of(run, "outbox"));
    expect(run, res->get_ll(0, 0) == g.count,
           key + ": all " + std::to_string(g.count) + " rows PUBLISHED (" + res->get(0, 0) + ")");
    const OrderCheck c = check_order(run, g);
    const bool order_ok = c.ok(g.count);
    expect(run, order_ok,
           key + ": per-aggregate order (received " + std::to_string(c.received) + ", " +
               std::to_string(c.out_of_order) + " out of order, " + std::to_string(c.missing) +
               " aggregates incomplete, " + std::to_string(c.foreign) + " unexpected, " + std::to_string(c.dups) +
               " duplicates)");
    Row r;
    r.key = key;
    r.what = std::to_string(k) + " `outbox relay` process(es) draining one table (" +
             std::to_string(o.scale_per_aggregate) + " events/aggregate)";
    r.events = g.count;
    r.seconds = sd.seconds;
    r.peak_rss_kib = sd.max_rss_kib;
    r.extra = Json::object().integer("relays", k).set("relay_peak_rss_mib", Json::numbers(sd.rss_mib, 1));
    r.extra.boolean("order_ok", order_ok).integer("received", c.received).integer("duplicates", c.dups);
    Figure f;
    f.section = "3 scale-out";
    f.name = std::to_string(k) + " relay(s): throughput, order check " + (order_ok ? "passed" : "FAILED");
    f.value = rate_str(r.rate());
    const Row *base = find_row(run, "B");
    if (k == o.scale_relays.front() && base != nullptr) {
        rate1 = r.rate();
        f.baseline = "B " + rate_str(base->rate());
        f.ratio = r.rate() / base->rate();
    } else if (rate1 > 0) {
        f.baseline = std::to_string(o.scale_relays.front()) + " relay(s) " + rate_str(rate1);
        f.ratio = r.rate() / rate1;
    }
    if (k == o.scale_relays.front() && rate1 < 0) {
        rate1 = r.rate();
    }
    r.ratio_value = f.ratio;
    r.ratio = f.ratio >= 0 ? "ratio " + fixed(f.ratio, 2) : "";
    f.target = "order check passes";
    f.verdict = order_ok ? "PASS" : "MISS";
    series.push(Json::object().integer("relays", k).num("events_per_s", r.rate(), 1).boolean("order_ok", order_ok));
    run.rows.push_back(r);
    add_figure(run, f);
    b.admin.purge(run.queue);
}

} // namespace

void scenario_scale(Bench &b) {
    double rate1 = -1;
    Json series = Json::array();
    for (long k : b.o.scale_relays) {
        scale_point(b, k, rate1, series);
    }
    b.run.series["scale"] = series;
    reset_outbox(b.pg, b.run);
    b.phase("X");
}

} // namespace bench
