#!/usr/bin/env python3
"""Consumer throughput per face: events/s of each language's exactly-once consumer loop.

For each face: a fresh schema (outbox.migrate), a fresh exchange, the face's queue declared by
connecting a consumer, N events written and published by the relay into that queue, all before
timing. Then the face's consumer (in a process of its own) handles the N events with the
library's loop (BEGIN, dedupe, handler, COMMIT, ack), its handler inserting one effect row on the
connection it is given; timed from the call of the loop (the consumer already connected, a lent
connection already open) to its return. Afterwards: N distinct effect rows, N inbox rows, and an
empty queue (every message acknowledged), else the face's figure is marked failed.

Faces (--faces, comma-separated; default all):
  py-binary    Consumer.run(handler, conn, limit=N), conn a psycopg[binary] connection (the driver
               path: the loop's statements through psycopg)
  py-pure      the same on the pure-Python psycopg (PSYCOPG_IMPL=python: it loads the system
               libpq the package links, so the connection is lent to the library)
  py-own       Consumer.run(handler, None, limit=N): the library's own connection, handler(msg, tx)
  py-asyncpg   await Consumer.run_async(handler, asyncpg_conn, limit=N)
  node-client  await consumer.consume(handler, { client }) on a node-postgres Client (node/bench/consume.js)
  node-own     await consumer.consume(handler): the loop's own client from pg.url
  c            relay_bench --only C --consume-events N: the C API consumer (outbox_consumer_begin,
               one effect row, COMMIT, ack), C-dedupe (and C-plain, without dedupe, for reference)

The consumers' sessions run with synchronous_commit=off by default (PGOPTIONS for every libpq and
node-postgres connection, server_settings for asyncpg; each face reports what it saw): as in bench
scenario Q, an event then costs what the face and the loop cost, not a WAL flush of the shared
disk, which would hide the faces' differences under its noise. --sync-commit on measures with the
server's default.

Run with a venv's python that has the package (corewrite-outbox), psycopg[binary], asyncpg and
pika installed. Node faces need --node-project (a project where `npm install <tarball> pg` put the
package, scripts/node_package.sh); the C face needs --relay-bench (build/release/bench/relay_bench).
Faces whose tool is not given are skipped (listed as skipped).

    bench/consume_faces.py [--events N] [--faces LIST] [--node-project DIR] [--relay-bench PATH]
                           [--payload-bytes N] [--prefetch N] [--queue-type T] [--sync-commit on|off]
                           [--json FILE]

Reads OUTBOX_PG_URL and OUTBOX_AMQP_URL. Prints a table; --json writes the figures.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

FACES = ["py-binary", "py-pure", "py-own", "py-asyncpg", "node-client", "node-own", "c"]
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SYNC_OFF = "-c synchronous_commit=off"


# --------------------------------------------------------------------------- machine


def cpu_times() -> Tuple[int, int, int]:
    """(steal, idle + iowait, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]  # user..steal (guest is inside user)
    return fields[7], fields[3] + fields[4], sum(fields)


def steal_share(before: Tuple[int, int, int], after: Tuple[int, int, int]) -> Optional[float]:
    """The share of the machine's CPU time stolen by the hypervisor between two cpu_times()."""
    total = after[2] - before[2]
    return round((after[0] - before[0]) / total, 4) if total > 0 else None


def busy_share(before: Tuple[int, int, int], after: Tuple[int, int, int]) -> Optional[float]:
    """The share of the machine's CPU time spent running anything (this bench, its servers and
    whatever else runs on the machine) between two cpu_times()."""
    total = after[2] - before[2]
    return round(1 - (after[1] - before[1] + after[0] - before[0]) / total, 4) if total > 0 else None


# --------------------------------------------------------------------------- children (one face each)


def _py_child(face: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """The timed part of a Python face, in this (child) process."""
    import outbox

    n, name, url = spec["events"], spec["name"], spec["pg_url"]
    ins_fmt = f"INSERT INTO {spec['effects']} (consumer, outbox_id) VALUES (%s, %s)"
    ins_dollar = f"INSERT INTO {spec['effects']} (consumer, outbox_id) VALUES ($1, $2)"
    out: Dict[str, Any] = {}
    consumer = outbox.Consumer(name, spec["options"])
    consumer.connect()
    if face == "py-asyncpg":
        return _py_asyncpg(consumer, spec, ins_dollar)
    conn = None
    if face in ("py-binary", "py-pure"):
        import psycopg

        conn = psycopg.connect(url)
        out["psycopg_impl"] = psycopg.pq.__impl__
        out["sync_commit"] = conn.execute("SHOW synchronous_commit").fetchone()[0]
        conn.rollback()
        out["connection_path"] = "lent" if type(outbox.Db.wrap(conn)).__name__ == "Db" else "driver"

        def handler(msg: Any, c: Any) -> None:
            c.execute(ins_fmt, (name, msg.id))
    else:
        seen: List[str] = []

        def handler(msg: Any, tx: Any) -> None:
            if not seen:  # the loop's own connection: its setting, once
                seen.append(tx.execute("SHOW synchronous_commit")[0][0])
            tx.execute(ins_dollar, (name, msg.id))

    cpu0, t0 = time.process_time(), time.perf_counter()
    handled = consumer.run(handler, conn, limit=n)
    out.update(seconds=time.perf_counter() - t0, cpu_s=time.process_time() - cpu0, handled=handled)
    if conn is None:
        out["sync_commit"] = seen[0] if seen else None
    else:
        conn.close()
    consumer.close()
    return out


def _py_asyncpg(consumer: Any, spec: Dict[str, Any], insert: str) -> Dict[str, Any]:
    import asyncpg

    async def go() -> Dict[str, Any]:
        settings = {"synchronous_commit": "off"} if spec["sync_off"] else None
        conn = await asyncpg.connect(spec["pg_url"], server_settings=settings)
        sync = await conn.fetchval("SHOW synchronous_commit")

        async def handler(msg: Any, c: Any) -> None:
            await c.execute(insert, spec["name"], msg.id)

        cpu0, t0 = time.process_time(), time.perf_counter()
        handled = await consumer.run_async(handler, conn, limit=spec["events"])
        out = dict(seconds=time.perf_counter() - t0, cpu_s=time.process_time() - cpu0, handled=handled,
                   sync_commit=sync)
        await conn.close()
        return out

    out = asyncio.run(go())
    consumer.close()
    return out


def child_env(sync_off: bool, **extra: str) -> Dict[str, str]:
    env = dict(os.environ, **extra)
    if sync_off:
        env["PGOPTIONS"] = (env.get("PGOPTIONS", "") + " " + SYNC_OFF).strip()
    return env


def run_child(face: str, spec: Dict[str, Any], args: argparse.Namespace) -> Dict[str, Any]:
    """Runs the timed part of `face` in a process of its own; its JSON result."""
    if face.startswith("py-"):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", face, json.dumps(spec)]
        env = child_env(spec["sync_off"], **({"PSYCOPG_IMPL": "python"} if face == "py-pure" else {}))
        cwd = "/"
    else:
        js = {"mode": "client" if face == "node-client" else "own", "name": spec["name"],
              "events": spec["events"], "effects": spec["effects"], "pgUrl": spec["pg_url"],
              "options": spec["options"]}
        cmd = [args.node, os.path.join(REPO, "node", "bench", "consume.js"), json.dumps(js)]
        env = child_env(spec["sync_off"], OUTBOX_NODE_PACKAGE=os.path.join(args.node_project, "node_modules", "outbox"))
        cwd = os.path.join(REPO, "node")
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{face}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- set-up and checks


class Amqp:
    """pika, for what the library does not do: count a queue's messages, delete queues and exchanges."""

    def __init__(self, url: str) -> None:
        import pika

        self.pika = pika
        self.conn = pika.BlockingConnection(pika.URLParameters(url))

    def count(self, queue: str) -> int:
        ch = self.conn.channel()
        try:
            return int(ch.queue_declare(queue, passive=True).method.message_count)
        finally:
            if ch.is_open:
                ch.close()

    def delete(self, queues: List[str], exchange: str) -> None:
        ch = self.conn.channel()
        for q in queues:
            ch.queue_delete(q)
        ch.exchange_delete(exchange)
        ch.close()

    def close(self) -> None:
        self.conn.close()


def prepare(face: str, args: argparse.Namespace, tag: str) -> Dict[str, Any]:
    """Schema, exchange, the face's queue and N events published into it; the child's spec."""
    import outbox

    schema, exchange, name = f"faces_{tag}", f"faces.{tag}", f"faces-{face}-{tag}"
    options = {"outbox.schema": schema, "amqp.exchange": exchange, "amqp.url": args.amqp_url,
               "pg.url": args.pg_url, "consumer.queue_type": args.queue_type,
               "consumer.prefetch": str(args.prefetch)}
    effects = f'"{schema}".effects'
    with outbox.Db.open(args.pg_url, config=options) as db:
        db.exec(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        db.migrate("all")
        db.exec(f"CREATE TABLE {effects} (consumer text NOT NULL, outbox_id text NOT NULL)")
        with outbox.Consumer(name, options) as c:
            c.connect()  # declares the queue, bound to the exchange, before anything is published
        note = "x" * max(0, args.payload_bytes - 40)
        db.exec("BEGIN")
        for i in range(args.events):
            db.write(aggregate_type="ORD", aggregate_id=str(i), operation="POST",
                     payload={"id": i, "total": 99.5, "note": note})
        db.exec("COMMIT")
    published = 0
    with outbox.Relay(options) as relay:
        for _ in range(50):
            published += relay.drain().published
            if published >= args.events:
                break
    if published != args.events:
        raise RuntimeError(f"{face}: the relay published {published} of {args.events}")
    try:
        with outbox.Db.open(args.pg_url) as db:
            db.exec("CHECKPOINT")  # not during the timed run
    except Exception:
        pass
    return {"events": args.events, "name": name, "effects": effects, "pg_url": args.pg_url,
            "options": options, "schema": schema, "exchange": exchange, "sync_off": args.sync_commit == "off"}


def check(spec: Dict[str, Any], args: argparse.Namespace, amqp: Amqp) -> List[str]:
    """What went wrong with a face's run (empty: N effects, N inbox rows, nothing left in the queue)."""
    import outbox

    bad = []
    n = spec["events"]
    with outbox.Db.open(args.pg_url) as db:
        eff = db.execute(f"SELECT count(*), count(DISTINCT outbox_id) FROM {spec['effects']}")[0]
        inbox = db.execute(f"SELECT count(*) FROM \"{spec['schema']}\".outbox_inbox WHERE consumer = $1",
                           (spec["name"],))[0][0]
    if eff != (str(n), str(n)):
        bad.append(f"effects {eff[0]} ({eff[1]} distinct), expected {n}")
    if inbox != str(n):
        bad.append(f"inbox rows {inbox}, expected {n}")
    left = amqp.count(spec["name"])
    if left:
        bad.append(f"{left} message(s) left in the queue")
    return bad


def cleanup(spec: Dict[str, Any], args: argparse.Namespace, amqp: Amqp) -> None:
    import outbox

    with outbox.Db.open(args.pg_url) as db:
        db.exec(f"DROP SCHEMA IF EXISTS \"{spec['schema']}\" CASCADE")
    amqp.delete([spec["name"], spec["name"] + ".dead"], spec["exchange"])


# --------------------------------------------------------------------------- faces


def run_face(face: str, args: argparse.Namespace, amqp: Amqp) -> Dict[str, Any]:
    tag = secrets.token_hex(4)
    spec = prepare(face, args, tag)
    try:
        s0 = cpu_times()
        res = run_child(face, spec, args)
        s1 = cpu_times()
        res["steal"], res["busy"] = steal_share(s0, s1), busy_share(s0, s1)
        res["failures"] = check(spec, args, amqp)
    finally:
        cleanup(spec, args, amqp)
    res["events"] = spec["events"]
    res["events_per_s"] = round(res["handled"] / res["seconds"], 1) if res["seconds"] > 0 else None
    res["cpu_us_per_event"] = round(res["cpu_s"] * 1e6 / res["handled"], 1) if res["handled"] else None
    return res


def run_c(args: argparse.Namespace) -> List[Tuple[str, Dict[str, Any]]]:
    """relay_bench --only C: C-dedupe (the loop the faces run) and C-plain."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "c.json")
        cmd = [args.relay_bench, "--only", "C", "--consume-events", str(args.events), "--json", out,
               "--md", os.path.join(tmp, "c.md")]
        s0 = cpu_times()
        p = subprocess.run(cmd, env=child_env(args.sync_commit == "off"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=args.timeout)
        s1 = cpu_times()
        steal, busy = steal_share(s0, s1), busy_share(s0, s1)
        if p.returncode not in (0, 3) or not os.path.exists(out):
            raise RuntimeError(f"relay_bench --only C: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
        with open(out) as f:
            data = json.load(f)
    rows = []
    for key, face in (("C-dedupe", "c"), ("C-plain", "c-plain")):
        r = next(x for x in data["scenarios"] if x["key"] == key)
        rows.append((face, {"events": r["events"], "handled": r["events"], "seconds": r["seconds"],
                            "cpu_s": r.get("client_cpu_s"), "events_per_s": r["events_per_s"],
                            "cpu_us_per_event": round(r["client_cpu_s"] * 1e6 / r["events"], 1)
                            if r.get("client_cpu_s") is not None else None,
                            "steal": steal, "busy": busy, "failures": list(data.get("failures") or []),
                            "sync_commit": "off (PGOPTIONS)" if args.sync_commit == "off" else "server default"}))
    return rows


def main() -> int:
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        print(json.dumps(_py_child(sys.argv[2], json.loads(sys.argv[3]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=3000, help="events per face (default 3000)")
    ap.add_argument("--faces", default=",".join(FACES), help="faces to run (default all: %(default)s)")
    ap.add_argument("--node-project", help="a project with the package and pg installed (node faces)")
    ap.add_argument("--node", default="node", help="the node executable (default node)")
    ap.add_argument("--relay-bench", help="build/release/bench/relay_bench (face c)")
    ap.add_argument("--payload-bytes", type=int, default=256, help="about this many bytes of payload (default 256)")
    ap.add_argument("--prefetch", type=int, default=256, help="consumer.prefetch (default 256, as bench scenario C)")
    ap.add_argument("--queue-type", default="classic", help="consumer.queue_type (default classic, as scenario C)")
    ap.add_argument("--sync-commit", choices=["on", "off"], default="off",
                    help="off (default): the consumers' sessions with synchronous_commit=off; on: the server's default")
    ap.add_argument("--timeout", type=float, default=600, help="longest a face may take, in seconds")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    args.pg_url = os.environ.get("OUTBOX_PG_URL", "postgresql://outbox:outbox@127.0.0.1:54329/outbox")
    args.amqp_url = os.environ.get("OUTBOX_AMQP_URL", "amqp://outbox:outbox@127.0.0.1:56729/%2f")
    faces = [f for f in args.faces.split(",") if f]
    unknown = [f for f in faces if f not in FACES]
    if unknown:
        ap.error(f"unknown face(s) {unknown}; known: {FACES}")

    import outbox

    results: Dict[str, Dict[str, Any]] = {}
    skipped: Dict[str, str] = {}
    amqp = Amqp(args.amqp_url)
    try:
        for face in faces:
            if face.startswith("node-") and not args.node_project:
                skipped[face] = "no --node-project"
                continue
            if face == "c" and not args.relay_bench:
                skipped[face] = "no --relay-bench"
                continue
            t = time.monotonic()
            rows = run_c(args) if face == "c" else [(face, run_face(face, args, amqp))]
            for key, res in rows:
                res["wall_s"] = round(time.monotonic() - t, 1)
                results[key] = res
                flag = f"  FAILED: {'; '.join(res['failures'])}" if res["failures"] else ""
                print(f"consume_faces: {key:12s} {res['events_per_s']:>9} events/s  "
                      f"{res['cpu_us_per_event']} us CPU/event  steal {res['steal']}  busy {res['busy']}  "
                      f"sync_commit {res.get('sync_commit')}{flag}", file=sys.stderr, flush=True)
    finally:
        amqp.close()
    out = {"events": args.events, "sync_commit": args.sync_commit, "prefetch": args.prefetch,
           "queue_type": args.queue_type, "payload_bytes": args.payload_bytes,
           "outbox_version": outbox.__version__, "library_version": outbox.library_version(),
           "package": os.path.dirname(outbox.__file__), "python": sys.version.split()[0],
           "faces": results, "skipped": skipped}
    print("| face | events/s | client CPU µs/event | steal |\n| --- | ---: | ---: | ---: |")
    for key, r in results.items():
        print(f"| {key} | {r['events_per_s']} | {r['cpu_us_per_event']} | {r['steal']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 1 if any(r["failures"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
