// The report of a run: the row table on stdout, the Markdown report (--md) and the figures as JSON
// (--json; through cJSON), read by bench/plot.py and bench/check_results.py.
#pragma once

#include "options.hpp"
#include "run.hpp"

#include <string>

namespace bench {

// What the report says about where it ran.
struct Env {
    std::string pg_version;
    double wall = 0; // seconds the run took
};

void print_table(const Run &run, const Options &o, const Env &env);
void write_md(const Run &run, const Options &o, const Env &env);
void write_json(const Run &run, const Options &o, const Env &env);

} // namespace bench
