// K: the bindings' per-write cost, from the JSON that python/bench_write.py and node/bench/write.js
// wrote in this run (bench/run runs them and passes --bindings-python, --bindings-node), each against
// its C reference bench/write_c measured in interleaved rounds. Targets: Python <= 1.2 x C, Node
// (await db.write) <= 1.3 x C; and Node's `await outbox.write(pgClient, event)` <= 1.2 x the same
// event row inserted by node-postgres alone in the same transaction shape ("pgPlain", same run).
// Each script records the CPU steal summed over each path's rounds ("steal"), and bench/run runs it
// again while a side of its targets saw more than --max-steal ("attempts"): a verdict is given on
// a quiet pair only, UNJUDGED otherwise.
#include "../scenarios.hpp"

#include <exception>

namespace bench {

namespace {

Json load(const std::string &file) {
    try {
        return Json::parse_file(file);
    } catch (const std::exception &e) {
        die(std::string("K: ") + e.what());
    }
}

// The judging of a script's figure of path `side` against `base`: the steal the script read around
// each (unmeasured: not quiet) and the runs bench/run made of it.
Judging script_judging(const Json &j, const Options &o, const char *side, const char *base) {
    Judging how;
    how.steal = {j.number_at("steal", side), j.number_at("steal", base)};
    how.quiet = quiet_sides(quiet_rule(o), how.steal);
    const double runs = j.number_at("attempts");
    how.attempts = how.kept = runs >= 1 ? static_cast<int>(runs) : 1;
    if (!how.quiet) {
        how.note = "no quiet pair in " + std::to_string(how.attempts) + " run(s) of the script";
    }
    return how;
}

} // namespace

void scenario_bindings(Bench &b) {
    Run &run = b.run;
    const Options &o = b.o;
    struct Src {
        const char *lang;
        std::string file;
        double target;
        const char *baseline; // json key of what the target compares with ("c": the C reference)
        // json key of the median of the per-round ratios of the first path to the baseline, run
        // back to back in each round (judged instead of the ratio of the medians), or nullptr
        const char *paired;
        std::vector<std::pair<const char *, const char *>> paths; // json key, description
    };
    const Src srcs[] = {
        {"Python",
         o.bindings_python_json,
         1.2,
         "insert",
         "driver_vs_insert_paired",
         {{"driver", "outbox.write(conn, ...) on a psycopg[binary] connection (driver cursor)"}}},
        {"Python",
         o.bindings_python_json,
         0,
         "c",
         nullptr,
         {{"driver", "outbox.write(conn, ...) on a psycopg[binary] connection (driver cursor)"},
          {"insert", "a plain psycopg INSERT of the same row (the driver's floor)"},
          {"owned", "db.write(...) on an outbox.Db (one native call on the library's connection)"}}},
        {"Node",
         o.bindings_node_json,
         1.3,
         "c",
         nullptr,
         {{"addon", "await db.write(event), owned connection"},
          {"addonMany", "await db.writeMany(events)"},
          {"pg", "await outbox.write(pgClient, event), node-postgres"},
          {"pgPlain", "the same row by node-postgres alone (plain INSERT)"}}},
    };
    Json series = Json::array();
    for (const auto &s : srcs) {
        if (s.file.empty()) {
            progress(std::string("K: no ") + s.lang + " figures given (--bindings-" +
                     (s.lang[0] == 'P' ? "python" : "node") + "), skipped");
            continue;
        }
        const Json j = load(s.file);
        const double c = j.number_at("us_per_write", s.baseline);
        const bool vs_c = std::string(s.baseline) == "c";
        expect(run, c > 0, std::string("K: ") + s.lang + " figures include " + (vs_c ? "the C reference" : s.baseline));
        bool first = true;
        for (const auto &[k, desc] : s.paths) {
            const double v = j.number_at("us_per_write", k);
            expect(run, v > 0, std::string("K: ") + s.lang + " figures include " + k);
            if (v <= 0 || c <= 0) {
                continue;
            }
            Figure f;
            f.section = "7 bindings";
            f.name = std::string(s.lang) + ": " + desc;
            f.value = fixed(v, 1) + " us/write";
            f.baseline = (vs_c ? "C outbox_write " : "plain psycopg INSERT ") + fixed(c, 1) + " us/write";
            f.ratio = v / c;
            if (first && s.paired != nullptr) {
                f.ratio = j.number_at(s.paired);
                expect(run, f.ratio > 0, std::string("K: ") + s.lang + " figures include " + s.paired);
                f.name += " (median of the per-round ratios; the medians shown)";
            }
            const Judging how = script_judging(j, o, k, s.baseline);
            record_sides(f, how, how.steal[0], how.steal[1]);
            if (first && s.target > 0) {
                f.target = "≤ " + fixed(s.target, 1) + "x";
                judge(f, how, f.ratio <= s.target, how.steal[0], how.steal[1]);
            }
            first = false;
            add_figure(run, f);
            if (!vs_c) {
                continue; // the same figure is in the series against C
            }
            series.push(Json::object()
                            .str("lang", s.lang)
                            .str("path", k)
                            .num("us_per_write", v, 2)
                            .num("c_us_per_write", c, 2));
        }
        if (s.lang[0] == 'N') {
            // The library's cost over its driver: outbox.write on a pg client vs the same row by pg alone.
            const double pgv = j.number_at("us_per_write", "pg");
            const double plain = j.number_at("us_per_write", "pgPlain");
            expect(run, pgv > 0 && plain > 0, "K: Node figures include pg and pgPlain");
            if (pgv > 0 && plain > 0) {
                Figure f;
                f.section = "7 bindings";
                // The two run back to back in each round: the median of the per-round ratios.
                const double paired = j.number_at("pg_vs_plain_paired");
                expect(run, paired > 0, "K: Node figures include pg_vs_plain_paired");
                f.name = "Node: await outbox.write(pgClient, event) vs a plain node-postgres INSERT (median of the "
                         "per-round ratios; the medians shown)";
                f.value = fixed(pgv, 1) + " us/write";
                f.baseline = "node-postgres INSERT " + fixed(plain, 1) + " us/write";
                f.ratio = paired;
                f.target = "≤ 1.2x";
                const Judging how = script_judging(j, o, "pg", "pgPlain");
                judge(f, how, f.ratio <= 1.2, how.steal[0], how.steal[1]);
                add_figure(run, f);
            }
        }
    }
    run.series["bindings"] = series;
    b.phase("K");
}

} // namespace bench
