// P: the relay's drain of --sweep-events at each --sweep-batches (window --window) and at each
// --sweep-windows (batch --batch-size): the points of throughput_vs_batch_window.png.
#include "../scenarios.hpp"

#include "../support/relay.hpp"

namespace bench {

namespace {

// One point: a drain of a fresh backlog with this batch size and window.
void sweep_point(Bench &b, const char *axis, int batch, int window, uint16_t code, Json &series) {
    Run &run = b.run;
    const Generator g = b.events(code, b.base.prefix, b.o.sweep_events, b.o.sweep_events);
    b.load(g);
    const std::string key = std::string(axis) + "@b" + std::to_string(batch) + "w" + std::to_string(window);
    Row r = run_relay(run, b.o, g, b.pg, batch, window, key);
    expect_queue_holds(run, b.admin, g.count, key);
    if (const Row *base = find_row(run, "B")) {
        r.ratio_value = r.rate() / base->rate();
        r.ratio = key + "/B = " + fixed(r.ratio_value, 2);
    }
    progress(key + ": " + rate_str(r.rate()) + (r.ratio.empty() ? "" : ", " + r.ratio));
    series.push(Json::object().integer("batch_size", batch).integer("window", window).num("events_per_s", r.rate(), 1));
    run.rows.push_back(r);
    b.admin.purge(run.queue);
}

} // namespace

void scenario_sweep(Bench &b) {
    Json by_batch = Json::array(), by_window = Json::array();
    uint16_t code = 0x0040;
    for (long batch : b.o.sweep_batches) {
        sweep_point(b, "P-batch", static_cast<int>(batch), b.o.window, code++, by_batch);
    }
    for (long window : b.o.sweep_windows) {
        sweep_point(b, "P-window", b.o.batch_size, static_cast<int>(window), code++, by_window);
    }
    b.run.series["sweep_batch"] = by_batch;
    b.run.series["sweep_window"] = by_window;
    reset_outbox(b.pg, b.run);
    b.phase("P");
}

} // namespace bench
