// R-w1: the relay with relay.window=1 on a backlog of --w1-events: what confirm pipelining buys,
// as a ratio to the main drain of D.
#include "../scenarios.hpp"

#include "../support/relay.hpp"

namespace bench {

void scenario_window1(Bench &b) {
    Run &run = b.run;
    const long n = b.o.w1_events;
    const Generator g = b.events(0x0002, 'q', n, (n + b.o.per_aggregate - 1) / b.o.per_aggregate);
    progress("R-w1: loading the backlog");
    b.load(g);
    Row r = run_relay(run, b.o, g, b.pg, b.o.batch_size, 1, "R-w1");
    if (const Row *base = b.main_drain()) {
        r.ratio_value = r.rate() / base->rate();
        r.ratio = "R-w1/" + base->key + " = " + fixed(r.ratio_value, 2);
    }
    progress("R-w1: " + rate_str(r.rate()) + (r.ratio.empty() ? "" : ", " + r.ratio));
    run.rows.push_back(r);
    b.admin.purge(run.queue);
    b.phase("R-w1");
}

} // namespace bench
