#!/usr/bin/env python3
"""Before/after rounds of the faces' figures: K (per-write cost through Python and Node), C (the C
consumer of relay_bench) and the consumer's events/s per face (bench/consume_faces.py), measured
on two builds of the library against the same servers, alternating sides round by round
(before, after, before, after, ...), each measurement with the machine's CPU steal around it.
Writes a Markdown report (and the raw figures as JSON).

bench/faces_before_after.sh builds and installs what each tree needs, then runs this. Alone:

    python3 bench/faces_rounds.py --before TREE --after TREE [--rounds 3] [--events 3000]
        [--writes 1000] [--k-rounds 3] [--only K-py,K-node,F] [--out FILE.md]

Each tree needs: build/release/bench/{relay_bench,write_c}, .run/venv-faces (the package built from
that tree with psycopg[binary], asyncpg, pika) and .run/node-faces (its tarball and pg installed).
The measuring scripts are this tree's (python/bench_write.py, node/bench/write.js,
bench/consume_faces.py, node/bench/consume.js), the same instrument for both sides; the library,
the packages and write_c/relay_bench are each side's. Needs OUTBOX_PG_URL / OUTBOX_AMQP_URL.
Standard library only.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

HARNESS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (key, label, unit, group, better): K figures in µs/write (lower is better), ratios (lower is
# better: the library's cost over the plain driver), consumer figures in events/s (higher is better).
K_PY = [
    ("driver", "Python `outbox.write(conn)` on psycopg[binary]", "µs/write"),
    ("insert", "Python plain psycopg INSERT of the same row", "µs/write"),
    ("owned", "Python `db.write` (library's own connection)", "µs/write"),
    ("c", "C `outbox_write` (write_c, interleaved with Python)", "µs/write"),
]
K_NODE = [
    ("pg", "Node `await outbox.write(client)` on node-postgres", "µs/write"),
    ("pgPlain", "Node plain node-postgres INSERT of the same row", "µs/write"),
    ("addon", "Node `await db.write` (library's own connection)", "µs/write"),
    ("c", "C `outbox_write` (write_c, interleaved with Node)", "µs/write"),
]
FACE_LABELS = {
    "py-binary": "Python `Consumer.run(h, psycopg[binary] conn)` (driver path)",
    "py-pure": "Python `Consumer.run(h, pure psycopg conn)` (lent connection)",
    "py-own": "Python `Consumer.run(h, None)` (library's own connection)",
    "py-asyncpg": "Python `await Consumer.run_async(h, asyncpg conn)`",
    "node-client": "Node `consumer.consume(h, {client})`",
    "node-own": "Node `consumer.consume(h)` (own client)",
    "c": "C consumer, dedupe (relay_bench C-dedupe)",
    "c-plain": "C consumer, no dedupe (relay_bench C-plain)",
}


def cpu_times() -> Tuple[int, int, int]:
    """(steal, idle + iowait, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return fields[7], fields[3] + fields[4], sum(fields)


def rev(tree: str) -> str:
    """The commit a tree holds, "+uncommitted changes" when its tracked sources differ."""
    try:
        r = subprocess.run(["git", "-C", tree, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                           text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown (not a git checkout)"
    st = subprocess.run(["git", "-C", tree, "status", "--porcelain", "--untracked-files=no", "--", ".",
                         ":(exclude)bench/results"], capture_output=True, text=True).stdout.strip()
    return r + ("+uncommitted changes" if st else "")


class Side:
    def __init__(self, name: str, tree: str) -> None:
        self.name = name
        self.tree = os.path.abspath(tree)
        self.run_dir = os.path.join(self.tree, ".run")
        self.py = os.path.join(self.run_dir, "venv-faces", "bin", "python")
        self.node_project = os.path.join(self.run_dir, "node-faces")
        self.write_c = os.path.join(self.tree, "build", "release", "bench", "write_c")
        self.relay_bench = os.path.join(self.tree, "build", "release", "bench", "relay_bench")
        self.rev = rev(self.tree)

    def missing(self) -> List[str]:
        need = [self.py, self.write_c, self.relay_bench, os.path.join(self.node_project, "node_modules", "outbox")]
        return [p for p in need if not os.path.exists(p)]

    def commands(self, args: argparse.Namespace, work: str,
                 harness: str = HARNESS) -> Dict[str, Tuple[List[str], str, Dict[str, str]]]:
        """measurement -> (argv, cwd, extra environment), writing work/<side>-<measurement>.json;
        the measuring scripts from `harness`."""
        out = lambda m: os.path.join(work, f"{self.name}-{m}.json")  # noqa: E731
        env = {"OUTBOX_RUN_DIR": self.run_dir}
        return {
            "K-py": ([self.py, os.path.join(harness, "python", "bench_write.py"), "--writes", str(args.writes),
                      "--repeat", str(args.k_rounds), "--c-bin", self.write_c, "--json", out("K-py")], "/", env),
            "K-node": (["node", os.path.join(harness, "node", "bench", "write.js"), "--writes", str(args.writes),
                        "--rounds", str(args.k_rounds), "--c-bin", self.write_c, "--json", out("K-node")],
                       os.path.join(harness, "node"),
                       dict(env, OUTBOX_NODE_PACKAGE=os.path.join(self.node_project, "node_modules", "outbox"))),
            "F": ([self.py, os.path.join(harness, "bench", "consume_faces.py"), "--events", str(args.events),
                   "--node-project", self.node_project, "--relay-bench", self.relay_bench,
                   "--sync-commit", args.sync_commit, "--json", out("F")]
                  + (["--faces", args.faces] if args.faces else []), "/", env),
        }


def measure(side: Side, what: str, args: argparse.Namespace, work: str, log: Any) -> Dict[str, Any]:
    argv, cwd, extra = side.commands(args, work)[what]
    path = argv[argv.index("--json") + 1]
    s0, t0, load = cpu_times(), time.monotonic(), os.getloadavg()[0]
    p = subprocess.run(argv, cwd=cwd, env=dict(os.environ, **extra), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    s1, wall = cpu_times(), time.monotonic() - t0
    log.write(f"\n===== {side.name} {what}: {' '.join(argv)} (exit {p.returncode}, {wall:.1f} s)\n{p.stdout}")
    log.flush()
    total = s1[2] - s0[2]
    rec: Dict[str, Any] = {"exit": p.returncode, "wall_s": round(wall, 1), "load1": load,
                           "steal": round((s1[0] - s0[0]) / total, 4) if total > 0 else None,
                           "busy": round(1 - (s1[1] - s0[1] + s1[0] - s0[0]) / total, 4) if total > 0 else None}
    if os.path.exists(path):
        with open(path) as f:
            rec["data"] = json.load(f)
        os.rename(path, path + f".{int(time.time() * 1000)}")
    if p.returncode != 0:
        rec["error"] = p.stdout.strip()[-1500:]
    return rec


def figures(rec: Dict[str, Any], what: str) -> Dict[str, Tuple[Optional[float], Optional[float], Optional[float]]]:
    """figure key -> (value, steal, busy) of one measurement."""
    d = rec.get("data")
    if not d:
        return {}
    st, busy = rec["steal"], rec.get("busy")
    if what == "K-py":
        f = {f"K-py:{k}": (d["us_per_write"].get(k), st, busy) for k, _, _ in K_PY}
        f["K-py:ratio"] = (d.get("driver_vs_insert_paired"), st, busy)
        return f
    if what == "K-node":
        f = {f"K-node:{k}": (d["us_per_write"].get(k), st, busy) for k, _, _ in K_NODE}
        f["K-node:ratio"] = (d.get("pg_vs_plain_paired"), st, busy)
        return f
    out = {}
    for face, r in d.get("faces", {}).items():
        ok = not r.get("failures")
        out[f"F:{face}"] = (r["events_per_s"] if ok else None, r.get("steal"), r.get("busy"))
        out[f"F-cpu:{face}"] = (r.get("cpu_us_per_event") if ok else None, r.get("steal"), r.get("busy"))
    return out


def rows_spec() -> List[Tuple[str, str, str, str]]:
    """(figure key, label, unit, better) in report order."""
    rows = [(f"K-py:{k}", l, u, "lower") for k, l, u in K_PY]
    rows.append(("K-py:ratio", "Python `outbox.write` / plain INSERT (median of per-round ratios)", "x", "lower"))
    rows += [(f"K-node:{k}", l, u, "lower") for k, l, u in K_NODE]
    rows.append(("K-node:ratio", "Node `outbox.write(client)` / plain node-postgres (median of per-round ratios)", "x",
                 "lower"))
    rows += [(f"F:{f}", l, "events/s", "higher") for f, l in FACE_LABELS.items()]
    rows += [(f"F-cpu:{f}", l, "client CPU µs/event", "lower") for f, l in FACE_LABELS.items()]
    return rows


def med(xs: List[Optional[float]]) -> Optional[float]:
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else None


def fmt(x: Optional[float], digits: int = 1) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{x * 100:.1f}%"


def report(args: argparse.Namespace, sides: List[Side], results: Dict[str, List[Dict[str, Any]]],
           started: str, wall: float) -> str:
    per: Dict[str, Dict[str, List[Tuple[Optional[float], ...]]]] = {s.name: {} for s in sides}
    for s in sides:
        for rec in results[s.name]:
            for k, v in figures(rec, rec["what"]).items():
                per[s.name].setdefault(k, []).append(v)
    b, a = sides
    lines = [
        "# Faces before and after: write and consume cost through each face (issue 29)",
        "",
        # (the first "measured the code of commit" is what tests/runner/check_cited_reports.py reads:
        # a side with uncommitted changes comes first, so a cited report of such a run fails it)
        *[f"- **{s.name}**: measured the code of commit {s.rev} (`{s.tree}`)"
          for s in sorted(sides, key=lambda s: "+" not in s.rev)],
        f"- instrument (the measuring scripts, the same for both sides): `{HARNESS}` at `{rev(HARNESS)}`",
        f"- started {started}, {args.rounds} rounds per side, alternating "
        f"({', '.join(s.name for s in sides)}, ...), {wall / 60:.1f} minutes in all",
        f"- K: {args.writes} writes per transaction, {args.k_rounds} rounds per path inside each script; "
        f"consumer: {args.events} events per face, synchronous_commit {args.sync_commit} in the consumers' sessions",
        f"- machine: {os.cpu_count()} CPUs; load average at the end {os.getloadavg()[0]:.2f}",
        "",
        "Each figure is the median over the rounds of one side (each round's K figure is itself the script's "
        "median of its inner rounds). *after/before* is after ÷ before; *change* says whether after is better "
        "or worse by that much (for µs and ratios lower is better, for events/s higher). *steal* is the "
        "median share of the machine's CPU time the hypervisor gave to other guests during that side's "
        "measurements of the figure, *busy* the median share of the machine's CPU time spent running "
        "anything (this bench and its servers, and whatever else ran on the machine meanwhile; /proc/stat). "
        "Figures are comparable only when both are close. *n*: rounds that gave the figure (before/after). "
        "Client CPU per event (the consumer process's own CPU time, worker threads included) depends far "
        "less on the machine's load than events/s.",
        "",
        "| figure | unit | before | after | after/before | change | steal before / after | busy before / after | n |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    worse = []
    for key, label, unit, better in rows_spec():
        vb, va = per[b.name].get(key, []), per[a.name].get(key, [])
        if not vb and not va:
            continue
        mb, ma = med([x[0] for x in vb]), med([x[0] for x in va])
        sb, sa = med([x[1] for x in vb]), med([x[1] for x in va])
        bb, ba = med([x[2] for x in vb]), med([x[2] for x in va])
        ratio = ma / mb if mb and ma else None
        change = "—"
        if ratio is not None:
            gain = (1 / ratio - 1) if better == "lower" else (ratio - 1)
            change = f"{'better' if gain >= 0 else 'worse'} {abs(gain) * 100:.0f}%"
            if gain < -args.tolerance:
                worse.append(f"{label} ({unit}): {change}")
        digits = 2 if unit == "x" else 1
        lines.append(f"| {label} | {unit} | {fmt(mb, digits)} | {fmt(ma, digits)} | {fmt(ratio, 2)} | {change} | "
                     f"{pct(sb)} / {pct(sa)} | {pct(bb)} / {pct(ba)} | "
                     f"{len([x for x in vb if x[0] is not None])}/{len([x for x in va if x[0] is not None])} |")
    lines += ["", f"Worse than before by more than {args.tolerance * 100:.0f}%: " +
              ("none." if not worse else ""), ""]
    lines += [f"- {w}" for w in worse]
    failed = [(s.name, r["round"], r["what"], r.get("error", "")[-300:]) for s in sides
              for r in results[s.name] if r["exit"] != 0]
    for s in sides:
        for r in results[s.name]:
            for face, fr in ((r.get("data") or {}).get("faces") or {}).items():
                if fr.get("failures"):
                    failed.append((s.name, r["round"], f"F:{face}", "; ".join(fr["failures"])))
    if failed:
        lines += ["", "## Failed measurements (left out of the medians)", ""]
        lines += [f"- {n} #{i} {w}: `{e.strip()}`" for n, i, w, e in failed]
    lines += ["", "## Per round", "",
              "| round | side | measurement | wall s | load (1 min) at start | steal | busy | exit |",
              "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    order = sorted((rec["seq"], s.name, rec) for s in sides for rec in results[s.name])
    for _, name, rec in order:
        lines.append(f"| {rec['round']} | {name} | {rec['what']} | {rec['wall_s']} | {rec['load1']:.1f} | "
                     f"{pct(rec['steal'])} | {pct(rec['busy'])} | {rec['exit']} |")
    lines += ["", "## Commands", "", "Per round and side (`TREE` = the side's tree, `H` = the instrument's tree), "
              "with OUTBOX_PG_URL / OUTBOX_AMQP_URL of the one set of servers:", "", "```"]
    for what, (argv, cwd, env) in Side("SIDE", "/TREE").commands(args, "WORK", "H").items():
        cmd = " ".join(argv).replace("/TREE", "TREE")
        pre = " ".join(f"{k}={v}" for k, v in env.items()).replace("/TREE", "TREE")
        lines.append(f"(cd {cwd} && {pre} {cmd})   # {what}")
    lines += ["```", "", f"The whole run: `{' '.join(args.argv)}`", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the tree of the before side")
    ap.add_argument("--after", required=True, help="the tree of the after side")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side (default 3)")
    ap.add_argument("--events", type=int, default=3000, help="consumer events per face (default 3000)")
    ap.add_argument("--writes", type=int, default=1000, help="K: writes per transaction (default 1000)")
    ap.add_argument("--k-rounds", type=int, default=3, help="K: rounds per path in each script (default 3)")
    ap.add_argument("--only", default="K-py,K-node,F", help="measurements (default K-py,K-node,F)")
    ap.add_argument("--faces", help="consumer faces (bench/consume_faces.py --faces; default all)")
    ap.add_argument("--sync-commit", choices=["on", "off"], default="off", help="consumers' synchronous_commit")
    ap.add_argument("--tolerance", type=float, default=0.10, help="report figures worse by more than this (0.10)")
    ap.add_argument("--out", default=os.path.join(HARNESS, "bench", "results", "faces.md"), help="the report")
    args = ap.parse_args()
    args.argv = [os.path.relpath(sys.argv[0])] + sys.argv[1:]
    sides = [Side("before", args.before), Side("after", args.after)]
    for s in sides:
        if s.missing():
            ap.error(f"{s.name} ({s.tree}) lacks {s.missing()}: run bench/faces_before_after.sh first")
    whats = [w for w in args.only.split(",") if w]
    run_dir = os.environ.get("OUTBOX_RUN_DIR") or os.path.join(HARNESS, ".run")
    work = os.path.join(run_dir, "faces-rounds", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(work, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    t0 = time.monotonic()
    results: Dict[str, List[Dict[str, Any]]] = {s.name: [] for s in sides}
    seq = 0
    with open(os.path.join(work, "log.txt"), "a") as log:
        for r in range(args.rounds):
            for s in sides:
                for what in whats:
                    rec = measure(s, what, args, work, log)
                    rec.update(what=what, round=r + 1, seq=seq)
                    seq += 1
                    results[s.name].append(rec)
                    print(f"faces_rounds: round {r + 1}/{args.rounds} {s.name:6s} {what:6s} exit {rec['exit']} "
                          f"{rec['wall_s']:6.1f} s steal {rec['steal']} busy {rec['busy']}", file=sys.stderr, flush=True)
    wall = time.monotonic() - t0
    md = report(args, sides, results, started, wall)
    with open(args.out, "w") as f:
        f.write(md)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump({"before": {"tree": sides[0].tree, "rev": sides[0].rev},
                   "after": {"tree": sides[1].tree, "rev": sides[1].rev}, "instrument": rev(HARNESS),
                   "params": {k: v for k, v in vars(args).items()}, "wall_s": round(wall, 1),
                   "results": results}, f, indent=1)
    print(md)
    print(f"faces_rounds: report {args.out}; log {work}/log.txt", file=sys.stderr)
    return 1 if any(r["exit"] != 0 for s in sides for r in results[s.name]) else 0


if __name__ == "__main__":
    sys.exit(main())
