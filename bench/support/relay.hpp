// The relay as D, P, R-w1 and the diagnostics measure it: its configuration, one drain of a backlog
// in the drain child (relay_drain, bench/drain_child.cpp) and the row of that drain.
#pragma once

#include "options.hpp"
#include "run.hpp"

#include <outbox.h>

#include <cstdint>
#include <string>

namespace bench {

// The same connection string with libpq "options" (session settings such as "-c jit=off") added.
std::string with_options(const std::string &url, const std::string &options);

// What a drain did: the sums of outbox_relay_stats over its steps, and its timing. The drain child
// prints line(), the harness parse()s it.
struct DrainStats {
    int64_t steps = 0, claimed = 0, published = 0, failed = 0, held_back = 0, unconfirmed = 0;
    int64_t claim_us = 0, publish_us = 0, mark_us = 0, total_us = 0, first_step_us = 0, max_step_us = 0;
    int64_t connect_us = 0; // the first step's, before both connections were ready: not in `seconds`
    double seconds = 0, cpu_s = 0;
    long peak_rss_kib = -1;

    [[nodiscard]] std::string line() const;
    bool parse(const std::string &s);
};

// One drain of the backlog `g` by the relay in the drain child; its row, checked: every event
// confirmed and marked, every row PUBLISHED. pg_options: libpq session options for the relay, or "".
Row run_relay(Run &run, const Options &o, const Generator &g, Pg &pg, int batch, int window, const std::string &key,
              const std::string &pg_options = "");

} // namespace bench
