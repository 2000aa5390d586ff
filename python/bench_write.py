#!/usr/bin/env python3
"""Per-write cost of outbox.write from Python against C, in microseconds per write.

N writes in one transaction of the documents' ProductCreated event (aggregate ids cycling over
100, a dict payload serialised by the package), through:

  driver outbox.write(conn, ...) on the psycopg connection (binary, c or pure): the library's
         write plan, its statement run through psycopg's own cursor
  text   the same with the payload given as JSON text (no json.dumps)
  insert the same event row inserted by a plain psycopg INSERT (json.dumps, a UUID, the columns),
         in the same transaction shape: the driver's own floor
  statement  the library's rendered statement (outbox.render_write) run by psycopg, no savepoint
         logic: what the statement itself (the event row and its aggregate's counter) costs
  owned  db.write(...) on an outbox.Db the library opened (outbox_db_open): one native call
  floor  the native call alone (pre-serialised fields, no Python layer): what the binding costs
  c      with --c-bin: the C reference (bench/write_c.c: outbox_event_new, 6 x outbox_event_set,
         outbox_write, outbox_event_free per event on an owned connection, BEGIN/COMMIT around
         N), a child process whose rounds interleave with Python's: same load, same server.

The targets: Python (driver) <= 1.2 x the plain INSERT, and reported against C. Wall time includes the server's work and every round trip;
the client CPU time (this process) isolates what the Python layer adds. The share of the machine's
CPU the hypervisor took (steal, /proc/stat) is summed over each path's rounds: bench/run judges the
target only when both its sides saw little of it (bench/README.md).

    python/bench_write.py [--writes N] [--repeat R] [--c-bin PATH] [--json FILE]

Reads OUTBOX_PG_URL (default the local test service); uses a fresh schema, dropped at the end.
Run it with the installed package (pip install ./python), not from the source tree.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

import psycopg

# This file sits next to the package's sources (python/outbox, without the compiled module):
# import the installed package, never those sources.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import outbox  # noqa: E402
from outbox._events import event_fields  # noqa: E402

METADATA = {"source": "productManagement", "centro_dett": "admin", "microservice": "adminApp"}
USER = "user@example.com"


def payload(i: int) -> dict:
    """The event of bench/write_c.c and node/bench/write.js: the same fields and values."""
    return {"PRD_ID": str(i), "XPRD01": "Widget Pro", "XPRD02": 99.99, "XPRD03": "PRD-2025-001",
            "XPRD05": "cat_electronics", "XPRD06": True, "TREC": "N"}


def cpu_times():
    """The machine's CPU time and the part of it stolen, from /proc/stat's first line; None without it."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(v), v[7]) if len(v) == 8 else None


class Steal:
    """The steal share of each path over its rounds (-1 when /proc/stat cannot be read)."""

    def __init__(self) -> None:
        self.ticks: dict = {}

    def around(self, name: str, fn):
        a = cpu_times()
        out = fn()
        b = cpu_times()
        if a and b:
            t = self.ticks.setdefault(name, [0, 0])
            t[0] += b[0] - a[0]
            t[1] += b[1] - a[1]
        return out

    def shares(self) -> dict:
        return {k: round(s / t, 4) if t > 0 else -1 for k, (t, s) in self.ticks.items()}


def timed(fn) -> tuple:
    """fn's wall and client CPU seconds."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


class CReference:
    """bench/write_c driven over stdin: "run N" -> microseconds per write."""

    def __init__(self, binary: str, schema: str, url: str) -> None:
        env = dict(os.environ, OUTBOX_PG_URL=url)
        self.proc = subprocess.Popen([binary, schema], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"bench_write: {binary} did not start")

    def round(self, n: int) -> float:
        self.proc.stdin.write(f"run {n}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("bench_write: the C reference exited")
        return float(line)

    def stop(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writes", type=int, default=2000, help="writes per transaction (default 2000)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds per path (default 5)")
    ap.add_argument("--c-bin", help="the C reference (build/release/bench/write_c), run interleaved")
    ap.add_argument("--json", help="also write the figures as JSON to this file")
    args = ap.parse_args()
    url = os.environ.get("OUTBOX_PG_URL") or "postgresql://outbox:outbox@127.0.0.1:54329/outbox"
    n, repeat = args.writes, args.repeat
    schema = f"py_bench_{uuid.uuid4().hex[:8]}"
    cfg = outbox.Config({"outbox.schema": schema, "event.type_map": "PRD=Product"})
    fmt = outbox.Config({"outbox.schema": schema, "event.type_map": "PRD=Product", "render.placeholders": "format"})
    payloads = [payload(i) for i in range(n)]
    texts = [json.dumps(p, separators=(",", ":")) for p in payloads]

    print(f"outbox {outbox.__version__} (liboutbox {outbox.library_version()}, libpq {outbox.libpq_version()}), "
          f"python {sys.version.split()[0]}: {n} writes per transaction, {repeat} rounds per path", flush=True)
    outbox.migrate(url, config=cfg)
    results = {}
    cref = CReference(args.c_bin, f"{schema}_c", url) if args.c_bin else None
    try:
        with psycopg.connect(url) as conn, outbox.Db(url, config=cfg) as db:

            # Storage version 2: the event row lives in the events table, keyed by a position from
            # its sequence (the outbox itself is a view).
            table = f'"{schema}"."outbox_events"'
            insert_sql = (f"INSERT INTO {table} (position, aggregate_type, aggregate_id, seq, outbox_id, event_type, "
                          "operation, payload, metadata, actor, created_at) "
                          f"VALUES (nextval('\"{schema}\".\"outbox_position_seq\"'), %s, %s, %s, %s, %s, %s, %s::json,"
                          " %s::json, %s, now())")
            seqs = [0]

            def insert() -> None:
                with conn.transaction():
                    base = seqs[0] = seqs[0] + n
                    for i in range(n):
                        conn.execute(insert_sql, ("PRD", str(i % 100), base + i, uuid.uuid4(), "ProductCreated", "POST",
                                                  json.dumps(payloads[i], separators=(",", ":")),
                                                  json.dumps(METADATA, separators=(",", ":")), USER))

            def statement() -> None:
                with conn.transaction():
                    for i in range(n):
                        st = outbox.render_write(config=fmt, aggregate_type="PRD", aggregate_id=str(i % 100),
                                                 operation="POST", payload=payloads[i], metadata=METADATA, user=USER)
                        conn.execute(st.sql, st.params)

            def write() -> None:
                with conn.transaction():
                    for i in range(n):
                        outbox.write(conn, config=cfg, aggregate_type="PRD", aggregate_id=str(i % 100),
                                     operation="POST", payload=payloads[i], metadata=METADATA, user=USER)

            def text() -> None:
                with conn.transaction():
                    for i in range(n):
                        outbox.write(conn, config=cfg, aggregate_type="PRD", aggregate_id=str(i % 100),
                                     operation="POST", payload=texts[i], metadata=METADATA, user=USER)

            def owned() -> None:
                with db.transaction():
                    for i in range(n):
                        db.write(aggregate_type="PRD", aggregate_id=str(i % 100), operation="POST",
                                 payload=payloads[i], metadata=METADATA, user=USER)

            fields = [event_fields(None, dict(aggregate_type="PRD", aggregate_id=str(i % 100), operation="POST",
                                              payload=payloads[i], metadata=METADATA, user=USER))
                      for i in range(n)]
            # The library's connection (outbox._native.Db); `_native` before issue 29's one Db.
            native = db._conn if hasattr(db, "_conn") else db._native

            def floor() -> None:
                native.exec("BEGIN")
                for i in range(n):
                    native.write(fields[i])
                native.exec("COMMIT")

            driver = "driver"
            # The driver path and its floor (insert) run back to back in each round.
            paths = {driver: write, "insert": insert, "text": text, "statement": statement, "owned": owned,
                     "floor": floor}
            samples: dict = {k: [] for k in paths}
            cpu: dict = {k: [] for k in paths}
            steal = Steal()
            if cref:
                samples["c"] = []
                cref.round(n)  # warm-up, as each Python path gets below
            for fn in paths.values():
                fn()
            # Interleaved (c, driver, text, owned, floor, then reversed, ...) so background load hits all alike.
            for r in range(repeat):
                if cref:
                    samples["c"].append(steal.around("c", lambda: cref.round(n)))
                order = list(paths) if r % 2 == 0 else list(reversed(paths))
                for name in order:
                    wall, proc = steal.around(name, lambda: timed(paths[name]))
                    samples[name].append(wall * 1e6 / n)
                    cpu[name].append(proc * 1e6 / n)
            c_med = statistics.median(samples["c"]) if cref else None
            if cref:
                print(f"  {'c':<9} {c_med:8.2f} us/write wall (median of {repeat}, best {min(samples['c']):.2f})")
            for name in paths:
                med, best, cmed = statistics.median(samples[name]), min(samples[name]), statistics.median(cpu[name])
                vs = f", {med / c_med:.2f} x C" if c_med else ""
                print(f"  {name:<9} {med:8.2f} us/write wall (median of {repeat}, best {best:.2f}{vs});"
                      f" client CPU {cmed:6.2f} us/write", flush=True)
                results[name] = {"median_us": med, "best_us": best, "cpu_us": cmed}
        # The median of the per-round ratios: it cancels the load that moves whole rounds.
        paired = statistics.median(a / b for a, b in zip(samples[driver], samples["insert"]))
        print(f"  {driver} / insert: {paired:.2f} x, median of {repeat} per-round ratios "
              f"({results[driver]['median_us'] / results['insert']['median_us']:.2f} x of the medians; "
              f"psycopg {psycopg.__version__}, impl {psycopg.pq.__impl__}); target <= 1.2 x")
        print(f"  Python layer over the native call (client CPU): "
              f"{results[driver]['cpu_us'] - results['floor']['cpu_us']:+.2f} us/write ({driver}), "
              f"{results['owned']['cpu_us'] - results['floor']['cpu_us']:+.2f} us/write (owned)")
        if args.json:
            per = {k: round(v["median_us"], 2) for k, v in results.items()}
            if c_med:
                per["c"] = round(c_med, 2)
            out = {"python": sys.version.split()[0], "writes_per_transaction": n, "rounds": repeat,
                   "psycopg_impl": psycopg.pq.__impl__, "driver_vs_insert_paired": round(paired, 3),
                   "us_per_write": per, "paths": results, "steal": steal.shares(),
                   "all_rounds": {k: [round(x, 2) for x in v] for k, v in samples.items()}}
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
                f.write("\n")
    finally:
        if cref:
            cref.stop()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return 0


if __name__ == "__main__":
    sys.exit(main())
