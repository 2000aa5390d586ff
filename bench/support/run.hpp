// What a run measured (rows, the Targets table's figures, the plotted series, notes) and checked
// (failures), and the helpers the scenarios record them with.
#pragma once

#include "amqp.hpp"
#include "events.hpp"
#include "json.hpp"
#include "pg.hpp"
#include "quiet.hpp"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace bench {

struct Row {
    std::string key;  // B, R, R-w1, S, W-off, W-on
    std::string what; // description
    long events = 0;
    double seconds = 0;
    std::string ratio; // e.g. "R/B = 0.91"
    double ratio_value = -1;
    std::string target;       // e.g. "≥ 0.85: PASS"
    Json extra;               // scenario-specific figures: members added to its JSON row
    double client_cpu_s = -1; // CPU time of the bench process during the timed part
    long peak_rss_kib = -1;   // peak RSS of the relay process(es) of this row, when measured
    double steal = -1;        // share of the machine's CPU the hypervisor took meanwhile (0..1), when measured
    // What the servers spent meanwhile (server_cpu(), seconds) and the share of the machine's CPU
    // left idle, when measured (B and the relay's drains): where a CPU-bound machine's time went.
    double broker_cpu_s = -1, pg_cpu_s = -1, idle = -1;
    [[nodiscard]] double rate() const { return seconds > 0 ? static_cast<double>(events) / seconds : 0; }
};

// One line of the report's target table: a figure, the baseline it is compared with (measured in the
// same run), their ratio and the target it is held to.
struct Figure {
    std::string section;  // "1 relay drain", ...
    std::string name;     // what is measured
    std::string value;    // the figure with its unit
    std::string baseline; // the same-run baseline with its figure, or ""
    double ratio = -1;    // figure / baseline (or as the target defines it); -1: none
    std::string target;   // e.g. "≥ 0.85"; "" when only reported
    std::string verdict;  // PASS, MISS, UNJUDGED (the sides were not measured quiet) or "" (no target)
    // The quiet judging (issue 30; judge()): its attempts (0: the figure is not judged by it), the
    // CPU stolen around the figure's measurement and the baseline's, each attempt's noisiest side,
    // and why it ended without a quiet pair.
    int attempts = 0;
    double steal = -1, baseline_steal = -1;
    std::vector<double> attempt_steals;
    std::string judging;
};

struct Run {
    std::string schema, exchange, queue, channel;
    std::string pg_url, amqp_url;
    std::string outbox_cli;               // the `outbox` command, for relay daemons
    std::string drain_bin;                // the drain child, relay_drain
    std::string log_prefix;               // relay daemon logs go to <log_prefix><name>.log
    std::vector<std::string> daemon_logs; // removed at the end unless --keep or a check failed
    std::vector<Row> rows;
    std::vector<Figure> figures;
    double idle_statements_per_s = -1;  // L: the idle relay's cost to PostgreSQL; -1: not measured
    std::map<std::string, Json> series; // name -> the plotted data (bench/plot.py)
    std::vector<std::string> notes;
    std::vector<std::string> failures; // verification failures: the figures are not to be trusted
    int body_bytes = 0;
    double max_rate = -1; // L: the measured maximum end-to-end rate (events/s), reused by H
    std::vector<std::pair<std::string, double>> phases; // scenario -> wall seconds, setup included
};

void progress(const std::string &msg);
// Records a figure and prints it at once, so a long run shows its results as it goes.
void add_figure(Run &run, Figure f);
// A self-check: a failure is printed and listed at the top of the report (exit status 2).
void expect(Run &run, bool ok, const std::string &what);
Row *find_row(Run &run, const std::string &key);
// Gives f the verdict of `how` (PASS or MISS by `pass` on a quiet pair, else UNJUDGED), its attempts
// and the steal around its two sides.
void judge(Figure &f, const Judging &how, bool pass, double steal, double baseline_steal);
// The same for a figure only reported (no verdict): its attempts and the steal around its sides.
void record_sides(Figure &f, const Judging &how, double steal, double baseline_steal);
// A row measured by a later attempt of its figure's judging: its description says so, and its JSON
// (member "attempt"); its key stays what later figures look it up by.
Row retried(Row r, int attempt);
// The steal of each row, for measure_quiet.
std::vector<double> steals(const std::vector<Row> &rows);
// A row's rate with the share of CPU the hypervisor took meanwhile: "13653 events/s (CPU stolen 23%)".
std::string rate_with_steal(const Row &r);
// Checks one message taken off the queue against the generator's bytes.
void check_sample(Run &run, Amqp &admin, const Generator &g, const std::string &who);
// Checks that the bench queue holds exactly `n` messages (the events of a drain or a publish).
void expect_queue_holds(Run &run, Amqp &admin, long n, const std::string &who);
// Empties the outbox and its counter table, so each backlog starts on a table of its own size.
void reset_outbox(Pg &pg, const Run &run);
// Drops the events table's range partitions (empty after reset_outbox), so the next ones are made
// at the width the scenario configures, from the current position on.
void drop_event_partitions(Pg &pg, const Run &run);
// "schema".name: a table of this run's schema.
std::string table_of(const Run &run, const char *name);
// The commit whose code this run measures: bench/run sets OUTBOX_SOURCE_REV (scripts/source_rev.sh).
std::string source_rev();

} // namespace bench
