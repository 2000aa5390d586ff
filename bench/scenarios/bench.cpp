#include "../scenarios.hpp"

namespace bench {

Generator Bench::events(uint16_t code, char prefix, long count, long aggregates) const {
    Generator g = base;
    g.code = code;
    g.prefix = prefix;
    g.count = count;
    g.aggregates = aggregates;
    return g;
}

void Bench::load(const Generator &g) {
    reset_outbox(pg, run);
    load_backlog(pg, table_of(run, "outbox"), table_of(run, "outbox_aggregates"), g);
}

void Bench::phase(const std::string &name) {
    const auto now = Clock::now();
    run.phases.emplace_back(name, seconds_between(phase_t0, now));
    phase_t0 = now;
}

const Row *Bench::main_drain() const {
    const Row *best = nullptr;
    for (const auto &r : run.rows) {
        if (r.key.rfind("R-", 0) == 0 && r.key != "R-w1" && r.key.find("jit") == std::string::npos &&
            r.key.find("pinned") == std::string::npos) {
            if (r.events == o.events) {
                return &r;
            }
            if (best == nullptr || r.events > best->events) {
                best = &r;
            }
        }
    }
    return best;
}

} // namespace bench
