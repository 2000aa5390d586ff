// R-nojit, R-pinned: diagnostics, run only when --only names them. The relay as in D on a backlog of
// --events, with session settings in pg.url (libpq "options") that a user can apply today.
// R-nojit: no JIT for the claim query. R-pinned: no JIT, and sorts priced out so the claim keeps
// walking the pending index in order instead of sorting. R-async: the relay's session without
// synchronous_commit, so a step's mark does not wait for its WAL to reach the disk.
#include "../scenarios.hpp"

#include "../support/relay.hpp"

#include <chrono>
#include <thread>

namespace bench {

namespace {

void diagnostic_drain(Bench &b, const std::string &key, const char *pg_options, uint16_t code, char prefix) {
    Run &run = b.run;
    const Generator g = b.events(code, prefix, b.base.count, b.base.aggregates);
    progress(key + ": loading the backlog");
    b.load(g);
    Row r = run_relay(run, b.o, g, b.pg, b.o.batch_size, b.o.window, key, pg_options);
    r.what = std::string("diagnostic: as R, with options='") + pg_options + "' in pg.url";
    expect_queue_holds(run, b.admin, g.count, key);
    if (const Row *base = find_row(run, "B")) {
        r.ratio_value = r.rate() / base->rate();
        r.ratio = key + "/B = " + fixed(r.ratio_value, 2);
    }
    run.rows.push_back(r);
    b.admin.purge(run.queue);
    std::this_thread::sleep_for(std::chrono::seconds(1));
}

} // namespace

void scenario_nojit(Bench &b) {
    diagnostic_drain(b, "R-nojit", "-c jit=off", 0x0010, 'j');
}

void scenario_async(Bench &b) {
    diagnostic_drain(b, "R-async", "-c synchronous_commit=off", 0x0012, 'y');
}

void scenario_pinned(Bench &b) {
    diagnostic_drain(b, "R-pinned", "-c jit=off -c enable_sort=off", 0x0011, 'p');
}

} // namespace bench
