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
    // The bench's PostgreSQL connection as libpq made it from the URL: "TLS (TLSv1.3)" or "plain".
    // The relay's connections use the same URL, so they are the same (sslmode=prefer, libpq's
    // default, takes TLS whenever the server offers it, as scripts/services.sh's does).
    std::string pg_transport;
    double wall = 0; // seconds the run took
};

void print_table(const Run &run, const Options &o, const Env &env);
void write_md(const Run &run, const Options &o, const Env &env);
void write_json(const Run &run, const Options &o, const Env &env);

} // namespace bench
