#!/usr/bin/env python3
"""Checks that a relay_bench run produced numbers: the harness's own test (scripts/test.sh runs
`bench/run --quick`, then this). It asserts that the run passed its self-checks and that every
scenario left figures, not that targets were met (a quick run on a shared machine proves nothing
about speed). A verdict is PASS, MISS or UNJUDGED (its sides were measured with too much CPU stolen:
not passing); a judged figure carries its attempts and the steal of both sides.

    bench/check_results.py RESULTS.json [PLOTDIR]

Exit 0 when all is there, 1 with the list of what is missing.
"""
import json
import math
import os
import sys

# Row keys (or prefixes) every default run has, and the plot files of bench/plot.py.
ROWS = ["B", "R-", "Bc-", "Rc-", "P-batch@", "P-window@", "R-w1", "S", "S-sleep", "X-1", "X-2", "X-4", "L-max", "L-off-50", "L-on-50",
        "C-plain", "C-dedupe", "W-biz", "W-row", "W-off", "W-on", "W-off-100", "H", "Q-1", "Q-2", "Q-4",
        "F-clean", "F-failing"]
SECTIONS = ["1 relay drain", "2 seed-style contrast", "3 scale-out", "4 latency", "5 write overhead",
            "6 consumer", "7 bindings", "8 table health", "9 partitioned subscriber", "10 failing aggregates"]
SERIES = ["drain", "drain_consumed", "sweep_batch", "sweep_window", "scale", "latency", "write", "bindings", "health", "partitions"]
# Figures (by name prefix) every default run has beyond one per section: the bindings' costs over
# their drivers, measured in the same run.
FIGURES = ["Node: await outbox.write(pgClient, event) vs a plain node-postgres INSERT",
           "the other aggregates' p99 latency"]
# A figure's verdict against its target; UNJUDGED counts as not passing.
VERDICTS = ("PASS", "MISS", "UNJUDGED")
PLOTS = ["throughput_vs_batch_window.png", "drain_vs_backlog.png", "latency_vs_load.png", "table_health.png"]


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    plotdir = sys.argv[2] if len(sys.argv) == 3 else os.path.dirname(os.path.abspath(path))
    problems = []
    with open(path) as f:
        r = json.load(f)
    if r.get("failures"):
        problems.append(f"self-checks failed: {r['failures']}")
    rows = r.get("scenarios", [])
    for key in ROWS:
        match = [x for x in rows if x["key"] == key or (key.endswith(("-", "@")) and x["key"].startswith(key))]
        if not match:
            problems.append(f"no row {key}")
        for x in match:
            v = x.get("events_per_s")
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                problems.append(f"row {x['key']}: events_per_s is {v!r}")
    for x in rows:
        if x["key"].startswith("R-") and x["key"] != "R-w1" and not x.get("relay_peak_rss_kib", 0) > 0:
            problems.append(f"row {x['key']}: no relay peak RSS")
        if x["key"].startswith("Q-") and not (x.get("exactly_once") is True and x.get("order_violations") == 0):
            problems.append(f"row {x['key']}: effects not exactly once or per-aggregate order violated")
        if x["key"].startswith("L-") and x["key"] not in ("L-max", "L-idle") and not x.get("p50_ms", -1) >= 0:
            problems.append(f"row {x['key']}: no latency percentiles")
    figures = r.get("figures", [])
    limit = r.get("params", {}).get("max_steal", 0.02)
    for sec in SECTIONS:
        fs = [f for f in figures if f["section"] == sec]
        if not fs:
            problems.append(f"no figure for {sec}")
        for f in fs:
            if not f.get("value"):
                problems.append(f"{sec}: figure {f['name']} has no value")
            if f.get("target") and f.get("verdict") not in VERDICTS + ("",):
                problems.append(f"{sec}: figure {f['name']} has verdict {f.get('verdict')!r}")
            if "attempts" in f and not (isinstance(f["attempts"], int) and f["attempts"] >= 1 and
                                        "cpu_steal" in f and "baseline_cpu_steal" in f):
                problems.append(f"{sec}: figure {f['name']} has attempts {f['attempts']!r} without the steal of both sides")
            if f.get("verdict") == "PASS" and "attempts" in f and not (
                    0 <= f.get("cpu_steal", -1) <= limit and 0 <= f.get("baseline_cpu_steal", -1) <= limit):
                problems.append(f"{sec}: figure {f['name']} passed on a noisy pair")
            if "ratio" in f and not (isinstance(f["ratio"], (int, float)) and math.isfinite(f["ratio"])):
                problems.append(f"{sec}: figure {f['name']} has ratio {f['ratio']!r}")
    # The Python per-write rows: outbox.write on psycopg[binary] against a plain INSERT (the target) and C.
    bound = [f["name"] for f in figures if f["section"] == "7 bindings"]
    for want in ("Python: outbox.write(conn, ...) on a psycopg[binary]", "Python: a plain psycopg INSERT",
                 "Python: db.write(...) on an outbox.Db"):
        if not any(n.startswith(want) for n in bound):
            problems.append(f"7 bindings: no figure {want}...")
    if not any(f["section"] == "7 bindings" and f["name"].startswith("Python: outbox.write") and
               "INSERT" in f.get("baseline", "") and f.get("target") for f in figures):
        problems.append("7 bindings: no Python figure against the plain psycopg INSERT with its target")
    for name in FIGURES:
        fs = [f for f in figures if f["name"].startswith(name)]
        if not fs:
            problems.append(f"no figure {name!r}")
        for f in fs:
            if not (isinstance(f.get("ratio"), (int, float)) and math.isfinite(f["ratio"]) and f["ratio"] > 0):
                problems.append(f"figure {f['name']!r} has ratio {f.get('ratio')!r}")
            if f.get("verdict") not in VERDICTS:
                problems.append(f"figure {f['name']!r} has no verdict against its target")
    paths = {(x.get("lang"), x.get("path")) for x in r.get("series", {}).get("bindings", [])}
    for want in [("Node", "pg"), ("Node", "pgPlain")]:
        if want not in paths:
            problems.append(f"no bindings series point {want}")
    for name in SERIES:
        if not r.get("series", {}).get(name):
            problems.append(f"no series {name}")
    md = path[: -len(".json")] + ".md" if path.endswith(".json") else None
    if md and not (os.path.exists(md) and "| verdict |" in open(md).read()):
        problems.append(f"no report table in {md}")
    for png in PLOTS:
        p = os.path.join(plotdir, png)
        if not (os.path.exists(p) and os.path.getsize(p) > 1000 and open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"):
            problems.append(f"no plot {p}")
    if problems:
        print("bench/check_results.py: " + path + ":\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    count = {v: sum(1 for f in figures if f.get("verdict") == v) for v in VERDICTS}
    print(f"bench/check_results.py: {len(rows)} rows, {len(figures)} figures ({count['PASS']} PASS, "
          f"{count['MISS'] + count['UNJUDGED']} not passing: {count['MISS']} MISS, {count['UNJUDGED']} UNJUDGED), "
          f"{len(PLOTS)} plots: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
