#!/usr/bin/env python3
"""Per-write cost of outbox.write from Python, in microseconds per write.

N writes in one transaction, each a new aggregate with a small dict payload (serialised by the
package), through:

  lent   outbox.write(conn, ...) on a psycopg 3 connection (its PGconn lent to the library)
  text   the same with the payload given as JSON text (as the C baseline gets it: no json.dumps)
  owned  db.write(...) on an outbox.Db the library opened (outbox_db_open)
  floor  the native call alone (pre-serialised fields, no Python layer): what the binding costs

Wall time includes the server's work and every round trip; the client CPU time (this process)
isolates what the Python layer adds, and is far less sensitive to a busy machine.

The same workload in C (outbox_event_new, 4 x outbox_event_set, outbox_write, outbox_event_free
per event, BEGIN/COMMIT around N) is the baseline; the target is Python <= 1.2 x C.

    python/bench_write.py [--writes N] [--repeat R] [--payload-bytes B]

Reads OUTBOX_PG_URL (default the local test service); uses a fresh schema, dropped at the end.
Run it with the installed package (pip install ./python), not from the source tree.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
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


def report(label: str, samples: list, cpu: list) -> dict:
    med, best, cmed = statistics.median(samples), min(samples), statistics.median(cpu)
    print(f"  {label:<7} {med:8.2f} us/write wall (median of {len(samples)}, best {best:.2f});"
          f" client CPU {cmed:6.2f} us/write", flush=True)
    return {"median_us": med, "best_us": best, "cpu_us": cmed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writes", type=int, default=5000, help="writes per transaction (default 5000)")
    ap.add_argument("--repeat", type=int, default=5, help="transactions per path (default 5)")
    ap.add_argument("--payload-bytes", type=int, default=100, help="approximate payload size (default 100)")
    args = ap.parse_args()
    url = os.environ.get("OUTBOX_PG_URL") or "postgresql://outbox:outbox@127.0.0.1:54329/outbox"
    n, repeat = args.writes, args.repeat
    schema = f"py_bench_{uuid.uuid4().hex[:8]}"
    cfg = outbox.Config({"outbox.schema": schema})
    filler = "x" * max(0, args.payload_bytes - 60)
    payload = {"PRD_ID": "123", "XPRD01": "Widget Pro", "XPRD02": 99.99, "note": filler}

    print(f"outbox {outbox.__version__} (liboutbox {outbox.library_version()}, libpq {outbox.libpq_version()}), "
          f"python {sys.version.split()[0]}: {n} writes per transaction, {repeat} transactions per path")
    outbox.migrate(url, config=cfg)
    results = {}
    try:
        with psycopg.connect(url) as conn, outbox.Db(url, config=cfg) as db:

            def lent(r: int) -> None:
                with conn.transaction():
                    for i in range(n):
                        outbox.write(conn, config=cfg, aggregate_type="PRD", aggregate_id=f"l{r}-{i}",
                                     operation="POST", payload=payload)

            payload_text = json.dumps(payload, separators=(",", ":"))

            def text(r: int) -> None:
                with conn.transaction():
                    for i in range(n):
                        outbox.write(conn, config=cfg, aggregate_type="PRD", aggregate_id=f"t{r}-{i}",
                                     operation="POST", payload=payload_text)

            def owned(r: int) -> None:
                with db.transaction():
                    for i in range(n):
                        db.write(aggregate_type="PRD", aggregate_id=f"o{r}-{i}", operation="POST", payload=payload)

            fields = [event_fields(None, dict(aggregate_type="PRD", aggregate_id=f"f{r}-{i}", operation="POST",
                                              payload=payload)) for r in range(repeat) for i in range(n)]
            native = db._handle()

            def floor(r: int) -> None:
                native.exec("BEGIN")
                for i in range(n):
                    native.write(fields[r * n + i], None)
                native.exec("COMMIT")

            paths = {"lent": lent, "text": text, "owned": owned, "floor": floor}
            samples: dict = {k: [] for k in paths}
            cpu: dict = {k: [] for k in paths}
            # Interleaved (lent, owned, floor, floor, owned, lent, ...) so background load hits all alike.
            for r in range(repeat):
                order = list(paths) if r % 2 == 0 else list(reversed(paths))
                for name in order:
                    c0, t0 = time.process_time(), time.perf_counter()
                    paths[name](r)
                    samples[name].append((time.perf_counter() - t0) * 1e6 / n)
                    cpu[name].append((time.process_time() - c0) * 1e6 / n)
            for name in paths:
                results[name] = report(name, samples[name], cpu[name])
        print(f"  Python layer over the native call (client CPU): "
              f"{results['lent']['cpu_us'] - results['floor']['cpu_us']:+.2f} us/write (lent), "
              f"{results['owned']['cpu_us'] - results['floor']['cpu_us']:+.2f} us/write (owned)")
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return 0


if __name__ == "__main__":
    sys.exit(main())
