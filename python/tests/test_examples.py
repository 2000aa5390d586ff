"""The examples run as documented: the order service writes orders and their events in one
transaction, the analytics writer records each event exactly once."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import AMQP_URL, PG_URL, REPO, unique

EXAMPLES = REPO / "examples" / "python"


def test_order_service_and_analytics_writer(admin, schema, amqp):
    exchange = unique("py.example.")
    name = unique("py-analytics-")
    amqp.exchanges.append(exchange)
    amqp.consumer_topology(name)
    env = {**os.environ, "OUTBOX_PG_URL": PG_URL, "OUTBOX_AMQP_URL": AMQP_URL, "OUTBOX_SCHEMA": schema,
           "OUTBOX_EXCHANGE": exchange, "PYTHONUNBUFFERED": "1"}
    sub = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "analytics_writer.py"), "--name", name, "--count", "3", "--idle-timeout", "30",
         "--fail-first"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/")
    try:
        first = sub.stdout.readline()
        assert "waiting for events" in first, first
        writer = subprocess.run(
            [sys.executable, str(EXAMPLES / "order_service.py"), "--count", "4", "--fail-every", "4", "--relay"],
            env=env, capture_output=True, text=True, timeout=60, cwd="/")
        assert writer.returncode == 0, writer.stdout + writer.stderr
        assert writer.stdout.count("order committed with OrderCreated") == 3, writer.stdout
        assert "rolled back" in writer.stdout and "relayed 3 event(s)" in writer.stdout
        out, _ = sub.communicate(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert sub.returncode == 0, first + out
    assert out.count("OrderCreated Order:") == 3 and "3 event(s) recorded" in out, out
    orders = admin.execute(f'SELECT count(*) FROM "{schema}".orders').fetchone()[0]
    events = admin.execute(f'SELECT count(*) FROM "{schema}".outbox WHERE status = \'PUBLISHED\'').fetchone()[0]
    recorded = admin.execute(f'SELECT count(*) FROM "{schema}".analytics_events').fetchone()[0]
    inbox = admin.execute(f'SELECT count(*) FROM "{schema}".outbox_inbox WHERE consumer = %s', (name,)).fetchone()[0]
    assert (orders, events, recorded, inbox) == (3, 3, 3, 3)
    joined = admin.execute(
        f'SELECT count(*) FROM "{schema}".orders o JOIN "{schema}".analytics_events a ON a.aggregate_id = o.id::text'
    ).fetchone()[0]
    assert joined == 3, "every committed order, and only those, reached the subscriber"


def test_examples_help():
    for script in ("order_service.py", "analytics_writer.py"):
        r = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "--count" in r.stdout, r.stderr
