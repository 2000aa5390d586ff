"""A partitioned subscriber (consumer.partitions) as two instances in one process: the partitions
are divided between them, every effect happens exactly once and in per-aggregate order."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from conftest import PG_URL, event, unique

import outbox


def test_two_instances_of_a_partitioned_subscriber_divide_it_in_order_and_exactly_once(admin, schema, cfg, consumer_name,
                                                                                        amqp):
    admin.execute(f'CREATE TABLE "{schema}".effects (applied bigserial PRIMARY KEY, event_id uuid NOT NULL,'
                  ' aggregate text NOT NULL, seq bigint NOT NULL, instance text NOT NULL)')
    for i in range(4):
        amqp.queues.append(f"{consumer_name}.p{i}")
    amqp.exchanges.append(f"{consumer_name}.partitions")
    cfg["pg.url"] = PG_URL
    cfg["consumer.partitions"] = 4
    # A lease long enough for a busy machine: a's first heartbeat (a quarter of the lease after it
    # connected) must still find b's from b.connect() alive, or a takes every partition for a while.
    cfg["consumer.lease_ms"] = 3000

    def instance(name):
        c = cfg.copy()  # (not dict(cfg): a Config reads secrets back hidden)
        c["consumer.instance"] = name
        return outbox.Consumer(consumer_name, c)

    a, b = instance("a"), instance("b")
    a.connect()  # a alone: every partition, until its next heartbeat sees b
    b.connect()
    with psycopg.connect(PG_URL) as conn:
        for i in range(80):
            outbox.write(conn, config=cfg, **event(aggregate_id=f"g{i % 20}", payload={"n": i}))
        conn.commit()
    with outbox.Relay(cfg) as relay:
        assert relay.drain().published == 80
    time.sleep(0.8)  # past a's heartbeat: its first next() takes up its half only

    errors = []

    def run(consumer, name):
        def handle(msg: outbox.Message, db) -> None:
            time.sleep(0.005)
            db.execute(f'INSERT INTO "{schema}".effects (event_id, aggregate, seq, instance) VALUES ($1, $2, $3, $4)',
                       [msg.id, msg.aggregate_id, str(msg.seq), name])

        try:
            consumer.run(handle, idle_timeout=2.5)
        except Exception as e:  # surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(a, "a")), threading.Thread(target=run, args=(b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    a.close()
    b.close()
    assert errors == []
    rows = admin.execute(f'SELECT event_id::text, aggregate, seq, instance FROM "{schema}".effects ORDER BY applied').fetchall()
    assert len(rows) == 80 and len({r[0] for r in rows}) == 80, "every effect exactly once"
    by_agg = {}
    for _, agg, seq, inst in rows:
        by_agg.setdefault(agg, []).append((seq, inst))
    for agg, seqs in by_agg.items():
        assert [s for s, _ in seqs] == list(range(1, len(seqs) + 1)), f"{agg}: applied out of order"
        assert len({i for _, i in seqs}) == 1, f"{agg}: handled by both instances while the assignment was stable"
    assert {r[3] for r in rows} == {"a", "b"}, "both instances took a share"


def test_another_partition_count_is_refused_with_invalid_argument(cfg, consumer_name, amqp):
    for i in range(4):
        amqp.queues.append(f"{consumer_name}.p{i}")
    amqp.exchanges.append(f"{consumer_name}.partitions")
    cfg["pg.url"] = PG_URL
    cfg["consumer.partitions"] = 4
    with outbox.Consumer(consumer_name, cfg) as c:
        c.connect()
    cfg["consumer.partitions"] = 2
    with outbox.Consumer(consumer_name, cfg) as c:
        with pytest.raises(outbox.InvalidArgument) as e:
            c.connect()
    assert e.value.code == "INVALID_ARGUMENT"
    assert "partitioned into 4 partitions" in str(e.value)


def test_instances_of_a_new_partitioned_subscriber_started_together_all_connect(admin, schema, cfg, amqp):
    """Issue 29: a deployment starts its N replicas at once. Eight instances of a new partitioned
    subscriber (a fresh name each round) connect at the same moment, released by a barrier; each
    records the partition count or reads the one recorded an instant before, and all connect.
    Twenty rounds in a row."""
    instances, rounds, partitions = 8, 20, 2
    cfg["pg.url"] = PG_URL
    cfg["consumer.partitions"] = partitions
    failures = []
    for r in range(rounds):
        name = unique(f"py-start{r}-")
        amqp.consumer_topology(name)
        for i in range(partitions):
            amqp.queues.append(f"{name}.p{i}")
        amqp.exchanges.append(f"{name}.partitions")
        consumers = []
        for i in range(instances):
            c = cfg.copy()
            c["consumer.instance"] = f"i{i}"
            consumers.append(outbox.Consumer(name, c))
        barrier = threading.Barrier(instances)
        errors = [None] * instances

        def connect(i):
            try:
                barrier.wait(timeout=30)
                consumers[i].connect()  # releases the GIL: the connects overlap
            except Exception as e:  # reported below, with the round
                errors[i] = e

        threads = [threading.Thread(target=connect, args=(i,)) for i in range(instances)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for c in consumers:
            c.close()
        failures += [f"round {r} instance {i}: {type(e).__name__}: {e}" for i, e in enumerate(errors) if e is not None]
        recorded = admin.execute(f'SELECT partitions FROM "{schema}".outbox_inbox_partitionings WHERE consumer = %s',
                                 [name]).fetchall()
        assert recorded == [(partitions,)]
    assert failures == [], "\n".join(failures)
