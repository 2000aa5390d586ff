"""The self-contained wheel at work where libpq, librabbitmq and libcjson are not installed.

Run by python/tests/test_dist.py with the python of a fresh venv holding only the repaired wheel
and psycopg[binary], under tests/python-dist/without_libs.sh. Each step prints `ok STEP detail`
or `FAIL STEP error`; the exit status is 1 when any step failed. Every step runs even after one
failed, so one report shows them all.

Environment: OUTBOX_PG_URL, OUTBOX_AMQP_URL; OUTBOX_DIST_SCHEMA, OUTBOX_DIST_EXCHANGE,
OUTBOX_DIST_CONSUMER (fresh names, removed by the test); OUTBOX_DIST_RAW (optional: a directory
holding the wheel before auditwheel repair, installed with pip --target, which must NOT import here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from typing import Any, Callable, Dict, List

PG_URL = os.environ["OUTBOX_PG_URL"]
failed: List[str] = []
written: List[str] = []


def step(name: str, fn: Callable[[], Any]) -> Any:
    try:
        detail = fn()
    except BaseException as e:  # noqa: BLE001 - every failure is reported, then the next step runs
        failed.append(name)
        print(f"FAIL {name} {type(e).__module__}.{type(e).__name__}: {e}", flush=True)
        traceback.print_exc(limit=3)
        return None
    print(f"ok {name} {detail if detail is not None else ''}", flush=True)
    return detail


def raw_wheel_does_not_import() -> str:
    raw = os.environ["OUTBOX_DIST_RAW"]
    r = subprocess.run([sys.executable, "-c", "import outbox"], env={**os.environ, "PYTHONPATH": raw},
                       cwd="/", capture_output=True, text=True, timeout=60)
    missing = [lib for lib in ("libpq", "librabbitmq", "libcjson") if lib in r.stderr]
    assert r.returncode != 0 and missing, f"the wheel before repair imported here (rc {r.returncode}): {r.stderr}"
    return f"ImportError naming {missing[0]}"


def import_outbox() -> str:
    import outbox

    native = outbox._native.__file__
    assert "site-packages" in native and not os.environ.get("PYTHONPATH"), native
    return f"{outbox.__version__} libpq {outbox.libpq_version()} from {os.path.dirname(native)}"


def config() -> Dict[str, Any]:
    return {"outbox.schema": os.environ["OUTBOX_DIST_SCHEMA"], "amqp.exchange": os.environ["OUTBOX_DIST_EXCHANGE"],
            "relay.poll_interval_ms": 100}


def migrate() -> int:
    import outbox

    applied = outbox.migrate(PG_URL, config=config())
    assert applied == 2, applied
    return applied


def owned_write() -> str:
    import outbox

    with outbox.Db.open(PG_URL, config=config()) as db:
        with db.transaction():
            w = db.write(aggregate_type="Order", aggregate_id="dist-1", operation="POST", payload={"n": 1})
    assert w.event_type == "OrderCreated" and w.seq == 1, w
    written.append(w.id)
    return w.id


def psycopg_binary_write() -> str:
    import psycopg

    import outbox

    assert psycopg.pq.__impl__ == "binary", psycopg.pq.__impl__  # its own bundled libpq
    with psycopg.connect(PG_URL) as conn:
        with conn.transaction():
            conn.execute("SELECT 1")
            w = outbox.write(conn, config=config(), aggregate_type="Order", aggregate_id="dist-2",
                             operation="PUT", payload={"n": 2})
    assert w.event_type == "OrderUpdated" and w.seq == 1, w
    written.append(w.id)
    return w.id


def relay_and_consume() -> str:
    import outbox

    assert written, "no event was written"
    with outbox.Consumer(os.environ["OUTBOX_DIST_CONSUMER"], config()) as consumer:
        consumer.connect()  # its queue is bound before the relay publishes
        with outbox.Relay(config()) as relay:
            stats = relay.drain()
        assert (stats.published, stats.failed) == (len(written), 0), stats
        got = []
        with outbox.Db.open(PG_URL, config=config()) as db:
            while len(got) < len(written):
                msg = consumer.next(timeout=15)
                assert msg is not None, f"received {got}, expected {written}"
                with db.transaction():
                    assert consumer.dedupe(db, msg).first_time
                msg.ack()
                got.append(msg.id)
    assert sorted(got) == sorted(written), (got, written)
    return f"published {stats.published}, received and deduplicated {len(got)}"


if os.environ.get("OUTBOX_DIST_RAW"):
    step("raw-wheel-fails", raw_wheel_does_not_import)
if step("import", import_outbox) is not None:
    step("migrate", migrate)
    step("owned-write", owned_write)
    step("psycopg-binary-write", psycopg_binary_write)
    step("relay-consumer", relay_and_consume)
print("FAILED: " + ", ".join(failed) if failed else "ALL OK", flush=True)
sys.exit(1 if failed else 0)
