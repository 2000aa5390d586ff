"""A consumer on a killed RabbitMQ cluster node goes on from the next address of ``amqp.url``,
whatever connection it was given: a driver's connection in blocking code, the library's own
connection, and an asyncpg connection in asyncio, all three at once on the 3-node cluster
scripts/test.sh starts for these tests (OUTBOX_TEST_CLUSTER_AMQP_URL; quorum queues).
tests/support/cluster_node.sh kills the node they are on, and starts it again afterwards."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import threading
import time
import uuid

import asyncpg
import psycopg
import pytest
from conftest import PG_URL, event, unique

import outbox

_NODE = pathlib.Path(__file__).resolve().parents[3] / "tests" / "support" / "cluster_node.sh"


def cluster_node(*args: str) -> str:
    out = subprocess.run([str(_NODE), *args], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, f"cluster_node.sh {' '.join(args)}: {out.stdout}{out.stderr}"
    return out.stdout.strip()


@pytest.fixture
def cluster_urls() -> list:
    urls = os.environ.get("OUTBOX_TEST_CLUSTER_AMQP_URL", "")
    assert urls, "OUTBOX_TEST_CLUSTER_AMQP_URL is not set: run through scripts/test.sh (it starts the test cluster)"
    cluster_node("ensure")
    yield urls.split(",")
    cluster_node("ensure")


def write_and_relay(cfg: dict, urls: list, names: list, start: int) -> None:
    """Two events, published through the nodes in ``urls`` (the relay tries again while the
    cluster elects the queues' leaders)."""
    with psycopg.connect(PG_URL) as c:
        for n in (start, start + 1):
            outbox.write(c, config=cfg, **event(aggregate_id=f"a{n % 2}", payload={"n": n}))
        c.commit()
    published, deadline = 0, time.monotonic() + 60
    with outbox.Relay(dict(cfg, **{"amqp.url": ",".join(urls)})) as relay:
        while published < 2 and time.monotonic() < deadline:
            try:
                published += relay.drain().published
            except outbox.Error:
                pass
            time.sleep(0.2)
    assert published == 2, f"the relay published {published} of 2 through {names}"


def test_consumers_on_a_killed_cluster_node_go_on_from_the_next_address(admin, schema, cfg, cluster_urls):
    admin.execute(f'CREATE TABLE "{schema}".effects (consumer text, event_id uuid, PRIMARY KEY (consumer, event_id))')
    prefix = unique("py-kill-")
    kinds = ["blocking", "own", "asyncio"]
    ccfg = dict(cfg, **{"amqp.url": ",".join(cluster_urls)})
    consumers = {k: outbox.Consumer(f"{prefix}-{k}", ccfg) for k in kinds}
    for c in consumers.values():
        c.connect()  # the queues exist before the relay publishes
    seen = {k: [] for k in kinds}
    two = threading.Barrier(len(kinds) + 1)

    def after(kind: str, msg: outbox.Message) -> None:
        seen[kind].append(msg.id)
        if len(seen[kind]) == 2:
            two.wait(timeout=120)
        if len(seen[kind]) == 4:
            consumers[kind].stop()

    def sql(kind: str) -> str:  # psycopg's placeholders, or libpq's (outbox.Db, asyncpg)
        values = "(%s, %s)" if kind == "blocking" else "($1, $2)"
        return f'INSERT INTO "{schema}".effects VALUES {values}'

    def handle(kind: str):
        def h(msg: outbox.Message, conn) -> None:
            conn.execute(sql(kind), (kind, uuid.UUID(msg.id)))
            after(kind, msg)
        return h

    async def ahandle(msg: outbox.Message, conn) -> None:
        await conn.execute(sql("asyncio"), "asyncio", uuid.UUID(msg.id))
        after("asyncio", msg)

    async def run_async() -> int:
        conn = await asyncpg.connect(PG_URL)
        try:
            return await consumers["asyncio"].run_async(ahandle, conn, idle_timeout=120)
        finally:
            await conn.close()

    handled: dict = {}
    errors: list = []

    def run(kind: str) -> None:
        try:
            if kind == "blocking":
                with psycopg.connect(PG_URL) as conn:
                    handled[kind] = consumers[kind].run(handle(kind), conn, idle_timeout=120)
            elif kind == "own":
                handled[kind] = consumers[kind].run(handle(kind), None, idle_timeout=120)
            else:
                handled[kind] = asyncio.run(run_async())
        except BaseException as e:  # reported below, with the kind
            errors.append(f"{kind}: {type(e).__name__}: {e}")
            two.abort()

    write_and_relay(cfg, cluster_urls, ["every node"], 0)
    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in kinds]
    for t in threads:
        t.start()
    two.wait(timeout=120)
    killed = int(cluster_node("kill-node-of", f"outbox-consumer {prefix}-"))
    others = [u for i, u in enumerate(cluster_urls) if i != killed - 1]
    write_and_relay(cfg, others, others, 2)
    for t in threads:
        t.join(timeout=180)
    for c in consumers.values():
        c.stop()
        c.close()
    assert not errors, errors
    assert handled == {k: 4 for k in kinds}, (handled, seen)
    counts = dict(admin.execute(f'SELECT consumer, count(*) FROM "{schema}".effects GROUP BY 1').fetchall())
    assert counts == {k: 4 for k in kinds}, counts
