// L: end-to-end latency. --writers threads commit one event per transaction; first unpaced (the
// maximum rate), then paced at 25%, 50% and 80% of it for --latency-seconds each, with write.notify
// off and on, interleaved; then off with the relay at --poll-interval-ms 5. Latency: the steady
// clock when a plain AMQP consumer in this process receives the message minus when the writer's
// COMMIT returned. The relay is one `outbox relay` daemon with its defaults. Target at 50% load:
// p50 <= 5 ms, p99 <= 25 ms.
#include "../scenarios.hpp"

#include "../support/proc.hpp"
#include "../support/writers.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace bench {

namespace {

// A plain consumer on the bench queue recording when each event arrived, by the index in its
// aggregate id ("l<index>").
struct ArrivalRecorder {
    std::mutex mu;
    std::vector<std::pair<long, int64_t>> got; // (index, steady ns)
    std::string error;
    Worker worker; // last: joined before the rest goes

    void start(const Run &run) {
        worker.start([this, url = run.amqp_url, queue = run.queue] {
            try {
                Amqp c(url, 0);
                c.consume(queue);
                Amqp::Delivery d;
                while (!worker.stopping()) {
                    if (!c.next(d, 100)) {
                        continue;
                    }
                    const int64_t t = now_ns();
                    if (d.aggregate_id.size() > 1 && d.aggregate_id[0] == 'l') {
                        const long idx = std::strtol(d.aggregate_id.c_str() + 1, nullptr, 10);
                        std::lock_guard<std::mutex> lk(mu);
                        got.emplace_back(idx, t);
                    }
                }
            } catch (const std::exception &e) {
                error = e.what();
            }
        });
    }
    std::vector<std::pair<long, int64_t>> take() {
        std::lock_guard<std::mutex> lk(mu);
        std::vector<std::pair<long, int64_t>> out;
        out.swap(got);
        return out;
    }
    void finish() { worker.stop(); }
};

struct LatPoint {
    std::string mode;
    double load = 0, offered = 0, achieved = 0;
    long written = 0, received = 0;
    double p50 = 0, p99 = 0, p999 = 0, max = 0;
    double steal = -1; // the share of the machine's CPU stolen while it was measured
};

// One load point: paced writes of events base..base+n, then wait until the consumer saw them all.
LatPoint latency_point(Run &run, const Options &o, ArrivalRecorder &rec, const std::string &mode, bool notify,
                       double load, double rate, double seconds, long &base) {
    const long cap = rate > 0 ? static_cast<long>(rate * seconds) : static_cast<long>(seconds * 50000);
    const long b0 = base;
    base += cap;
    rec.take(); // anything left over belongs to earlier points
    const CpuTimes machine0 = cpu_times();
    PacedWrites pw = paced_writes(run, o, notify, rate, seconds, cap, [b0](std::string &out, long k) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "l%010ld", b0 + k);
        out.assign(buf);
    });
    std::vector<int64_t> recv(static_cast<size_t>(cap), 0);
    long received = 0;
    const auto wait0 = Clock::now();
    while (received < pw.written && seconds_between(wait0, Clock::now()) < 30 && rec.error.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        for (const auto &[idx, t] : rec.take()) {
            const long k = idx - b0;
            if (k >= 0 && k < cap && recv[static_cast<size_t>(k)] == 0) {
                recv[static_cast<size_t>(k)] = t;
                ++received;
            }
        }
    }
    if (!rec.error.empty()) {
        die("L: consumer: " + rec.error);
    }
    std::vector<double> lat;
    lat.reserve(static_cast<size_t>(received));
    for (long k = 0; k < cap; ++k) {
        if (recv[static_cast<size_t>(k)] != 0 && pw.commit_ns[static_cast<size_t>(k)] != 0) {
            lat.push_back(static_cast<double>(recv[static_cast<size_t>(k)] - pw.commit_ns[static_cast<size_t>(k)]) /
                          1e6);
        }
    }
    LatPoint p;
    p.steal = steal_share(machine0, cpu_times());
    p.mode = mode;
    p.load = load;
    p.offered = rate;
    p.written = pw.written;
    p.received = received;
    p.achieved = pw.seconds > 0 ? static_cast<double>(pw.written) / pw.seconds : 0;
    p.p50 = percentile(lat, 50);
    p.p99 = percentile(lat, 99);
    p.p999 = percentile(lat, 99.9);
    p.max = lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end());
    expect(run, received == pw.written,
           "L " + mode + " at " + fixed(load * 100, 0) + "%: every committed event reached the consumer (" +
               std::to_string(received) + " of " + std::to_string(pw.written) + ")");
    progress("L " + mode + " at " + (load > 0 ? fixed(load * 100, 0) + "%" : std::string("max")) + ": " +
             fixed(p.achieved, 0) + " events/s written, p50 " + fixed(p.p50, 2) + " ms, p99 " + fixed(p.p99, 2) +
             " ms, p99.9 " + fixed(p.p999, 2) + " ms");
    return p;
}

// What the idle relay (defaults) costs PostgreSQL: the database's transactions per second over
// 10 s (5 s with --quick), from 3 s after the last event (past relay.linger_ms and the back-off to
// relay.poll_interval_ms). An idle poll is one autocommit statement, so each is one transaction;
// nothing else in the bench touches PostgreSQL meanwhile (the consumer is AMQP only), and
// anything that did, autovacuum included, would only raise the figure.
double idle_statements_per_s(Pg &pg, bool quick) {
    const std::string q = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()";
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const long long before = pg.query(q)->get_ll(0, 0);
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(quick ? 5 : 10));
    const long long after = pg.query(q)->get_ll(0, 0);
    const double seconds = seconds_between(t0, Clock::now());
    // The first sample's own transaction is counted in the second; PostgreSQL reports a backend's
    // counts within about a second, at both ends alike.
    const double per_s = static_cast<double>(after - before - 1) / seconds;
    progress("L: idle relay: " + fixed(per_s, 1) + " statements/s over " + fixed(seconds, 1) + " s");
    return per_s;
}

Json percentiles_json(const LatPoint &p) {
    Json j = Json::object().num("p50_ms", p.p50, 3).num("p99_ms", p.p99, 3);
    return j.num("p999_ms", p.p999, 3).num("max_ms", p.max, 3);
}

// One attempt of L: the maximum rate, each load point, the idle relay's statements.
struct LatRun {
    LatPoint max;
    std::vector<LatPoint> points;
    double idle_statements_per_s = -1;
};

// The paced points at each load with notify off and on, then the poll-5-ms point at 50%.
void paced_points(LatRun &lr, Run &run, const Options &o, Pg &pg, ArrivalRecorder &rec, std::unique_ptr<Daemon> &daemon,
                  long &base) {
    for (double load : o.latency_loads) {
        for (int notify = 0; notify < 2; ++notify) {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            lr.points.push_back(latency_point(run, o, rec, notify ? "notify on" : "notify off", notify != 0, load,
                                              load * lr.max.achieved, o.latency_seconds, base));
            require_alive(*daemon);
        }
    }
    lr.idle_statements_per_s = idle_statements_per_s(pg, o.quick);
    // Which setting reaches p50 <= 5 ms without writer-side NOTIFY: a short polling interval.
    if (o.latency_poll_diag) {
        stop_daemon(*daemon);
        daemon = start_daemon(run, "bench-latency-poll5", {"--poll-interval-ms", "5"});
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        lr.points.push_back(latency_point(run, o, rec, "notify off, poll 5 ms", false, 0.5, 0.5 * lr.max.achieved,
                                          o.latency_seconds, base));
        require_alive(*daemon);
    }
}

// The maximum rate first, then each load point with notify off and on, and the poll-5-ms point:
// every point measured, with the relay daemon and the consumer running.
LatRun measure_points(Run &run, const Options &o, Pg &pg) {
    reset_outbox(pg, run);
    pg.exec("CHECKPOINT");
    ArrivalRecorder rec;
    rec.start(run);
    long base = 0;
    auto daemon = start_daemon(run, "bench-latency", {});
    struct Stop {
        ArrivalRecorder &rec;
        std::unique_ptr<Daemon> &d;
        ~Stop() {
            rec.finish();
            if (d) {
                stop_daemon(*d);
            }
        }
    } stop{rec, daemon};
    std::this_thread::sleep_for(std::chrono::milliseconds(300)); // the relay connects
    progress("L: maximum rate: " + std::to_string(o.writers) + " unpaced writers for " +
             fixed(o.latency_max_seconds, 0) + " s, with the relay daemon (defaults) and a consumer running");
    LatRun lr;
    lr.max = latency_point(run, o, rec, "notify off", false, 0, 0, o.latency_max_seconds, base);
    paced_points(lr, run, o, pg, rec, daemon, base);
    return lr;
}

// The sides of L's judged figures: the maximum rate (it sets the load) and each point at 50%.
std::vector<double> lat_steals(const LatRun &lr) {
    std::vector<double> out{lr.max.steal};
    for (const auto &p : lr.points) {
        if (p.load == 0.5) {
            out.push_back(p.steal);
        }
    }
    return out;
}

// The row of the maximum rate.
Row max_row(const Options &o, const LatPoint &mx) {
    Row rm;
    rm.key = "L-max";
    rm.what = "maximum end-to-end rate: " + std::to_string(o.writers) +
              " unpaced writers (one event per transaction), relay daemon, consumer";
    rm.events = mx.written;
    rm.seconds = static_cast<double>(mx.written) / std::max(1.0, mx.achieved);
    rm.steal = mx.steal;
    return rm;
}

// The figures of a point at 50% load: p50 and p99 against their targets, judged.
void half_load_figures(Run &run, const LatPoint &p, const LatPoint &mx, const Judging &how) {
    Figure f50, f99;
    f50.section = f99.section = "4 latency";
    f50.name = "p50 at 50% load, " + p.mode;
    f50.value = fixed(p.p50, 2) + " ms";
    f50.target = "≤ 5 ms";
    judge(f50, how, p.p50 <= 5, p.steal, mx.steal);
    f99.name = "p99 at 50% load, " + p.mode;
    f99.value = fixed(p.p99, 2) + " ms";
    f99.target = "≤ 25 ms";
    judge(f99, how, p.p99 <= 25, p.steal, mx.steal);
    f50.baseline = f99.baseline = "max rate " + rate_str(mx.achieved) + " (same run)";
    add_figure(run, f50);
    add_figure(run, f99);
}

// The row of a load point.
Row point_row(const LatPoint &p) {
    Row r;
    r.key = "L-" + std::string(p.mode == "notify on" ? "on" : (p.mode == "notify off" ? "off" : "poll5")) + "-" +
            fixed(p.load * 100, 0);
    r.what = "latency COMMIT -> consumer, " + p.mode + ", " + fixed(p.load * 100, 0) + "% of max (" +
             fixed(p.offered, 0) + "/s offered): p50 " + fixed(p.p50, 2) + " ms, p99 " + fixed(p.p99, 2) +
             " ms, p99.9 " + fixed(p.p999, 2) + " ms";
    r.events = p.written;
    r.seconds = p.achieved > 0 ? static_cast<double>(p.written) / p.achieved : 0;
    r.steal = p.steal;
    r.extra = percentiles_json(p).num("load", p.load, 2).num("offered_per_s", p.offered, 1);
    return r;
}

// The idle relay's statements per second, a count rather than a speed: its figure is not judged
// on steal.
void idle_figure(Run &run, const Options &o) {
    if (run.idle_statements_per_s < 0) {
        return;
    }
    Figure fi;
    fi.section = "4 latency";
    fi.name = "idle relay (defaults): statements per second";
    fi.value = fixed(run.idle_statements_per_s, 1) + "/s";
    fi.target = "≤ 20/s";
    fi.verdict = verdict(run.idle_statements_per_s <= 20);
    add_figure(run, fi);
    Row r;
    r.key = "L-idle";
    r.what = "idle relay (defaults), 3 s after the last event: " + fixed(run.idle_statements_per_s, 1) +
             " statements/s (pg_stat_database transactions over " + (o.quick ? "5" : "10") +
             " s; an idle poll is one autocommit statement)";
    run.rows.push_back(r);
}

} // namespace

void scenario_latency(Bench &b) {
    Run &run = b.run;
    const Options &o = b.o;
    // Every point of an attempt is measured with the same daemon and consumer: judged together.
    const auto q = measure_quiet<LatRun>(
        "L", quiet_rule(o), [&](int) { return measure_points(run, o, b.pg); }, lat_steals);
    const LatRun &lr = q.value;
    run.max_rate = lr.max.achieved;
    run.idle_statements_per_s = lr.idle_statements_per_s;
    run.rows.push_back(max_row(o, lr.max));
    Json series = Json::array();
    for (const auto &p : lr.points) {
        Json s = Json::object().str("mode", p.mode).num("load", p.load, 2).num("offered_per_s", p.offered, 1);
        s.num("achieved_per_s", p.achieved, 1).integer("written", p.written).integer("received", p.received);
        series.push(s.merge(percentiles_json(p)));
        run.rows.push_back(point_row(p));
        if (p.load == 0.5) {
            half_load_figures(run, p, lr.max, q.how);
        }
    }
    idle_figure(run, o);
    run.series["latency"] = series;
    run.notes.push_back("L: writers pace commits at 25/50/80% of the maximum rate measured first (" +
                        rate_str(run.max_rate) +
                        ": unpaced writers with the relay daemon and a consumer running); latency is from COMMIT "
                        "returning in the writer to the consumer (a plain AMQP consumer in the same process, same "
                        "monotonic clock) receiving the message. The relay is `outbox relay` with its defaults "
                        "(relay.listen=true, relay.busy_poll_ms=2, relay.linger_ms=1000, relay.poll_interval_ms=100); "
                        "\"notify on\" sets write.notify=true in "
                        "the writers, \"poll 5 ms\" runs the relay with --poll-interval-ms 5 instead");
    reset_outbox(b.pg, run);
    b.phase("L");
}

} // namespace bench
