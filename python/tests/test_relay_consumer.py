"""Relay and consumers end to end: publish what was committed, handle each event exactly once."""

from __future__ import annotations

import threading
import time

import pika
import psycopg
import psycopg2
import pytest
from conftest import AMQP_URL, PG_URL, close_consumer_connections, event, eventually, later

import outbox


def effects_table(admin, schema):
    admin.execute(f'CREATE TABLE "{schema}".effects (event_id uuid PRIMARY KEY, kind text, n int)')


def write_events(cfg, n, *, aggregates=3, **kw):
    ids = []
    with psycopg.connect(PG_URL) as conn:
        for i in range(n):
            ids.append(outbox.write(conn, config=cfg, **event(aggregate_id=f"a{i % aggregates}", payload={"n": i}, **kw)).id)
        conn.commit()
    return ids


def test_round_trip_exactly_once_with_psycopg(admin, schema, cfg, consumer_name, count, amqp):
    effects_table(admin, schema)
    cfg["consumer.on_failure"] = "requeue"  # a failed event is redelivered (park: test_park.py)
    consumer = outbox.Consumer(consumer_name, cfg)
    consumer.connect()  # the queue exists (and is bound) before the relay publishes
    ids = write_events(cfg, 12)
    with outbox.Relay(cfg) as relay:
        stats = relay.drain()
    assert (stats.claimed, stats.published, stats.failed) == (12, 12, 0)
    assert count("status = 'PUBLISHED'") == 12

    failed_once = set()

    def handle(msg: outbox.Message, conn: psycopg.Connection) -> None:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s, %s)', (msg.id, msg.event_type, msg.payload["n"]))
        if msg.payload["n"] % 4 == 0 and msg.id not in failed_once:
            failed_once.add(msg.id)
            raise RuntimeError("transient")  # rolled back (the insert too), redelivered

    with consumer, psycopg.connect(PG_URL) as conn:
        handled = consumer.run(handle, conn, limit=12, idle_timeout=10)
        assert handled == 12 and len(failed_once) == 3
        # A duplicate delivery (the broker redelivering after a lost ack): skipped, acked.
        props = pika.BasicProperties(content_type="application/json", message_id=ids[0], delivery_mode=2,
                                     headers={"outbox-seq": 1, "outbox-aggregate-type": "PRD", "outbox-aggregate-id": "a0"})
        amqp.ch.basic_publish(cfg["amqp.exchange"], "prd.post", _body(admin, schema, ids[0]), props)
        calls = []
        assert consumer.run(lambda m, c: calls.append(m), conn, idle_timeout=1.5) == 0
        assert calls == []
    rows = admin.execute(f'SELECT event_id::text, n FROM "{schema}".effects ORDER BY n').fetchall()
    assert [r[1] for r in rows] == list(range(12)) and {r[0] for r in rows} == set(ids)
    assert admin.execute(f'SELECT count(*) FROM "{schema}".outbox_inbox').fetchone()[0] == 12
    assert amqp.get_all(f"{consumer_name}.dead", 1, timeout=0.3) == []


def _body(admin, schema, event_id):
    """The envelope of an already published event, rebuilt from its row (as the relay does)."""
    r = admin.execute(
        f"SELECT json_build_object('OUTBOX_ID', outbox_id, 'EVENT_TYPE', event_type, 'AGGREGATE_ID', aggregate_id, "
        f"'AGGREGATE_TYPE', aggregate_type, 'OPERATION', operation, 'PAYLOAD', payload)::text "
        f'FROM "{schema}".outbox WHERE outbox_id = %s', (event_id,)).fetchone()
    return r[0].encode()


def test_round_trip_with_psycopg2_and_dead_letter_after_the_delivery_limit(admin, schema, cfg, consumer_name, amqp):
    effects_table(admin, schema)
    cfg["consumer.on_failure"] = "requeue"
    cfg["consumer.delivery_limit"] = 3
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        assert consumer.delivery_limit == 3
        ids = write_events(cfg, 3, aggregates=3)
        with outbox.Relay(cfg) as relay:
            relay.drain()
        attempts = {}

        def handle(msg, conn):
            cur = conn.cursor()
            cur.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s, %s)', (msg.id, msg.event_type, msg.payload["n"]))
            attempts[msg.id] = attempts.get(msg.id, 0) + 1
            if msg.payload["n"] == 1:
                raise ValueError("poison event")

        conn = psycopg2.connect(PG_URL)
        try:
            assert consumer.run(handle, conn, idle_timeout=2) == 2
            assert conn.status == psycopg2.extensions.STATUS_READY
        finally:
            conn.close()
    assert attempts[ids[1]] == 3 and attempts[ids[0]] == 1 and attempts[ids[2]] == 1
    dead = amqp.get_all(f"{consumer_name}.dead", 1)
    assert len(dead) == 1
    props, _ = dead[0]
    assert props.message_id == ids[1]
    assert props.headers["x-outbox-dead-reason"].startswith("handler failed 3 time(s): ValueError: poison event")
    assert props.headers["x-outbox-dead-consumer"] == consumer_name
    got = {r[0] for r in admin.execute(f'SELECT event_id::text FROM "{schema}".effects')}
    assert got == {ids[0], ids[2]}


def test_iterate_ack_and_dedupe_yourself(admin, schema, cfg, consumer_name):
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        ids = write_events(cfg, 2, aggregates=1, metadata={"traceparent": "00-abc-def-01"}, user="u@example.com")
        with outbox.Relay(cfg) as relay:
            relay.drain()
        seen = []
        with outbox.Db(PG_URL, config=cfg) as db:
            for msg in consumer:
                with msg:
                    assert msg.redelivered is False and msg.delivery_count == 0
                    with db.transaction():
                        res = outbox.dedupe(db, consumer, msg)
                        again = outbox.dedupe(db, consumer_name, msg.envelope(), seq=msg.seq)
                    msg.ack()
                    seen.append((msg.id, msg.seq, res, again, msg.routing_key, msg.user, msg.metadata,
                                 msg.property("traceparent"), msg.header("outbox-seq"), msg.created_at))
                    if len(seen) == 2:
                        consumer.stop()
        with pytest.raises(outbox.Stopped):
            consumer.next(timeout=0)
    assert [s[0] for s in seen] == ids and [s[1] for s in seen] == [1, 2]
    first = seen[0]
    assert first[2] == outbox.DedupeResult(True, outbox.Order.IN_ORDER, 0)
    assert first[3].first_time is False
    assert seen[1][2] == outbox.DedupeResult(True, outbox.Order.IN_ORDER, 1)
    assert first[4:9] == ("prd.post", "u@example.com", {"traceparent": "00-abc-def-01"}, "00-abc-def-01", "1")
    assert len(first[9]) == 14 and first[9].isdigit()


def test_dedupe_on_a_lent_connection_follows_its_transaction(schema, cfg):
    eid = "550e8400-e29b-41d4-a716-446655440000"
    with psycopg.connect(PG_URL) as conn:
        assert outbox.dedupe(conn, "sub", eid, config=cfg).first_time is True
        conn.rollback()
        assert outbox.dedupe(conn, "sub", eid, config=cfg).first_time is True, "rolled back: no trace"
        conn.commit()
        assert outbox.dedupe(conn, "sub", eid, config=cfg).first_time is False
        conn.rollback()
    conn2 = psycopg2.connect(PG_URL)
    try:
        assert outbox.dedupe(conn2, "sub", eid, config=cfg).first_time is False
        assert outbox.dedupe(conn2, "other", eid, config=cfg).first_time is True
        conn2.commit()
    finally:
        conn2.close()


def test_run_native_handler_in_the_librarys_transaction(admin, schema, cfg, consumer_name):
    effects_table(admin, schema)
    cfg["consumer.on_failure"] = "requeue"  # the failed event comes again, redelivered
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        ids = write_events(cfg, 3, aggregates=1)
        with outbox.Relay(cfg) as relay:
            relay.drain()
        got = []
        done = set()
        kept = []

        def handle(msg: outbox.Message, tx: outbox.Db) -> None:
            assert tx.tx_state == outbox.TxState.INTRANS
            tx.execute(f'INSERT INTO "{schema}".effects VALUES ($1, $2, $3)', [msg.id, msg.event_type, msg.seq])
            got.append(msg.id)
            kept.append((msg, tx))
            if msg.seq == 2 and got.count(msg.id) == 1:
                raise RuntimeError("once")
            done.add(msg.id)
            if len(done) == 3:
                consumer.stop()

        consumer.run_native(handle)
    assert got.count(ids[1]) == 2 and set(got) == set(ids)
    assert sorted(r[0] for r in admin.execute(f'SELECT n FROM "{schema}".effects')) == [1, 2, 3]
    msg, tx = kept[0]
    assert msg.id == ids[0], "fields stay readable after the call"
    with pytest.raises(outbox.InvalidArgument, match="valid only during the call|closed"):
        tx.execute("SELECT 1")


def test_relay_run_stop_from_another_thread_and_two_threads_at_once(admin, schema, cfg, consumer_name):
    effects_table(admin, schema)
    consumer = outbox.Consumer(consumer_name, cfg)
    consumer.connect()
    relay = outbox.Relay(cfg)
    handled = []

    def consume():
        def handle(msg, conn):
            conn.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s, %s)', (msg.id, msg.event_type, msg.seq))
            handled.append(msg.id)

        with psycopg.connect(PG_URL) as conn:
            consumer.run(handle, conn)

    threads = [threading.Thread(target=relay.run), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        ids = write_events(cfg, 20, aggregates=4)
        assert eventually(lambda: len(handled) == 20, timeout=20), f"{len(handled)} of 20 handled"
    finally:
        relay.stop()
        consumer.stop()
        for t in threads:
            t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert sorted(handled) == sorted(ids)
    relay.close()
    consumer.close()
    with pytest.raises(outbox.InvalidArgument, match="closed"):
        relay.step()


def test_relay_step_reports_failures_for_unroutable_events(cfg, count):
    write_events(cfg, 2, aggregates=1)  # no queue is bound to the exchange: returned
    cfg["relay.max_attempts"] = 1
    with outbox.Relay(cfg, logger=False) as relay:
        st = relay.step()
    # the aggregate's second event waits for its first: held back, never published before it
    assert st.claimed == 2 and st.failed == 1 and st.unroutable == 1 and st.dead == 1 and st.held_back == 1
    assert count("status = 'FAILED'") == 1 and count("status = 'PENDING'") == 1


def test_relay_log_goes_to_python_logging(cfg, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="outbox.relay")
    lines = []
    with outbox.Relay(cfg, logger=lambda level, msg: lines.append((level, msg))) as relay:
        relay.step()
    with outbox.Relay(cfg) as relay:
        relay.step()
    assert any("connected to PostgreSQL" in m and level == logging.INFO for level, m in lines)
    assert all("outbox:outbox@" not in m for _, m in lines), "no password in logs"
    assert any("connected to RabbitMQ" in r.getMessage() for r in caplog.records)


def test_a_broker_list_goes_past_a_dead_node_to_a_live_one(admin, schema, cfg, consumer_name, caplog):
    """A cluster's nodes as a list in amqp.url: the first is down; relay and consumer carry on
    through the next and say which node they are on."""
    import logging
    import socket
    from urllib.parse import urlsplit

    caplog.set_level(logging.INFO, logger="outbox")
    with socket.socket() as dead:  # bound, never listening: a connection to it is refused
        dead.bind(("127.0.0.1", 0))
        live = urlsplit(AMQP_URL)
        cfg["amqp.url"] = f"amqp://outbox:outbox@127.0.0.1:{dead.getsockname()[1]}/%2f,{AMQP_URL}"
        consumer = outbox.Consumer(consumer_name, cfg)
        consumer.connect()
        ids = write_events(cfg, 3)
        with outbox.Relay(cfg) as relay:
            assert relay.drain().published == 3
        seen = []
        with consumer, psycopg.connect(PG_URL) as conn:
            assert consumer.run(lambda m, c: seen.append(m.id), conn, limit=3, idle_timeout=10) == 3
    assert sorted(seen) == sorted(ids)
    node = f"connected to RabbitMQ node {live.hostname}:{live.port}"
    said = [r.name for r in caplog.records if node in r.getMessage()]
    assert "outbox.relay" in said and "outbox.consumer" in said, said


def test_relay_needs_urls(monkeypatch):
    monkeypatch.delenv("OUTBOX_PG_URL")
    with pytest.raises(outbox.InvalidArgument, match="pg.url"):
        outbox.Relay(amqp_url="amqp://x")
    r = outbox.Relay(pg_url="postgresql://outbox:topsecret@127.0.0.1:1/x?connect_timeout=1",
                     amqp_url="amqp://outbox:topsecret@127.0.0.1:1/%2f", logger=False)
    with pytest.raises(outbox.ConnectionLost) as info:
        r.step()
    assert "topsecret" not in str(info.value)
    r.close()


def test_stopped_consumer_next_raises_stopped(cfg, consumer_name):
    with outbox.Consumer(consumer_name, cfg) as consumer:
        later(0.3, consumer.stop)
        t0 = time.monotonic()
        with pytest.raises(outbox.Stopped):
            consumer.next()
        assert time.monotonic() - t0 < 2
        consumer.reset()
        assert consumer.next(timeout=0.2) is None


def test_run_reopens_its_own_connection_after_a_loss(admin, schema, cfg, consumer_name):
    """conn=None: the loop's own connection (the handler gets an outbox.Db); when the server drops
    it, the event in progress is redelivered and handled once on a new connection."""
    effects_table(admin, schema)
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        ids = write_events(cfg, 2, aggregates=2)
        with outbox.Relay(cfg) as relay:
            relay.drain()
        killed = []

        def handle(msg, db: outbox.Db):
            assert isinstance(db, outbox.Db) and db.owned
            if not killed:
                killed.append(db.execute("SELECT pg_backend_pid()").scalar())
                admin.execute("SELECT pg_terminate_backend(%s::int)", (killed[0],))
            db.execute(f'INSERT INTO "{schema}".effects VALUES ($1, $2, $3)', [msg.id, msg.event_type, msg.seq])

        assert consumer.run(handle, limit=2, idle_timeout=10) == 2
    assert killed and sorted(r[0] for r in admin.execute(f'SELECT event_id::text FROM "{schema}".effects')) == sorted(ids)


def test_settling_twice_is_refused_and_a_handler_may_settle_inside_run_native(schema, cfg, consumer_name):
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        write_events(cfg, 2, aggregates=2)
        with outbox.Relay(cfg) as relay:
            relay.drain()
        msg = consumer.next(timeout=10)
        msg.ack()
        with pytest.raises(outbox.InvalidArgument, match="already settled"):
            msg.nack()
        seen = []
        with outbox.Db(PG_URL, config=cfg) as db:

            def handle(m, tx):
                # The lent connection runs the transaction; a handler that settles its message
                # itself keeps its choice (the loop does not settle it again): one rule, core's.
                assert tx.execute("SELECT 1").scalar() == "1"
                consumer.ack(m)
                seen.append(m.id)
                consumer.stop()

            consumer.run_native(handle, db)
            assert db.execute("SELECT 2").scalar() == "2", "usable again after the run"
        consumer.reset()
        assert len(seen) == 1
        # Acked once by the handler and not again by the loop: nothing comes back, the channel is healthy.
        assert consumer.next(timeout=2) is None


def test_every_step_records_its_outcomes(cfg, count, amqp):
    # Storage version 2 reads nothing ahead: a step's outcomes are recorded before it returns,
    # so step() alone is everything it did.
    amqp.ch.exchange_declare(cfg["amqp.exchange"], "fanout", durable=True)
    queue = amqp.ch.queue_declare("", exclusive=True).method.queue
    amqp.ch.queue_bind(queue, cfg["amqp.exchange"])
    cfg["relay.batch_size"] = 10
    write_events(cfg, 200, aggregates=200)
    with outbox.Relay(cfg, logger=False) as relay:
        total = outbox.RelayStats()
        for _ in range(3):
            st = relay.step()
            assert st.claimed == 10 and st.published == st.claimed
            total = total + st
        assert total.published == total.claimed == count("status = 'PUBLISHED'")


@pytest.mark.parametrize("lent", [True, False], ids=["psycopg", "own-db"])
def test_a_database_lost_under_the_handler_is_not_an_attempt(admin, schema, cfg, consumer_name, amqp, lent):
    """consumer.delivery_limit=2: the database goes away under the handler on the first delivery
    (no attempt counted), the handler fails for real on the second (attempt 1, requeued), the third
    is processed once. An event that always fails is dead-lettered at attempt 2 with the library's
    reason text. The counting and the decision are the C library's (outbox_consumer_settle)."""
    effects_table(admin, schema)
    cfg["consumer.on_failure"] = "requeue"
    cfg["consumer.delivery_limit"] = 2
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        healthy, poison = write_events(cfg, 2, aggregates=2)  # payload n = 0, 1
        with outbox.Relay(cfg) as relay:
            relay.drain()
        calls = {}

        def handle(msg, conn):
            n = calls[msg.id] = calls.get(msg.id, 0) + 1
            if msg.id == poison:
                raise RuntimeError("boom")
            own = isinstance(conn, outbox.Db)
            if n == 1:
                pid = conn.execute("SELECT pg_backend_pid()", []).scalar() if own else \
                    conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                admin.execute("SELECT pg_terminate_backend(%s::int)", (pid,))
                conn.execute("SELECT 1", []) if own else conn.execute("SELECT 1")  # the handler sees it fail
            if n == 2:
                raise RuntimeError("transient")
            if own:
                conn.execute(f'INSERT INTO "{schema}".effects VALUES ($1, $2, $3)', [msg.id, msg.event_type, 1])
            else:
                conn.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s, %s)', (msg.id, msg.event_type, 1))

        handled = 0
        if lent:
            # A lent connection that broke cannot be reopened by the loop: run() says so, and the
            # message is redelivered (uncounted) to the next run on a new connection.
            with psycopg.connect(PG_URL) as conn:
                with pytest.raises(outbox.ConnectionLost, match="PostgreSQL connection lost in the handler"):
                    handled += consumer.run(handle, conn, idle_timeout=10)
            with psycopg.connect(PG_URL) as conn:
                handled += consumer.run(handle, conn, idle_timeout=3)
        else:
            handled += consumer.run(handle, idle_timeout=3)
    assert handled == 1
    assert calls == {healthy: 3, poison: 2}, "lost database, one real failure, then processed; poison tried twice"
    assert [r[0] for r in admin.execute(f'SELECT event_id::text FROM "{schema}".effects')] == [healthy]
    dead = amqp.get_all(f"{consumer_name}.dead", 1)
    assert [p.message_id for p, _ in dead] == [poison], "only the poison event is dead-lettered"
    assert dead[0][0].headers["x-outbox-dead-reason"] == "handler failed 2 time(s): RuntimeError: boom"
    assert amqp.get_all(f"{consumer_name}.dead", 1, timeout=0.5) == []


def test_a_commit_the_server_refuses_counts_as_the_handlers_failure(admin, schema, cfg, consumer_name, amqp):
    """A COMMIT refused by the server (a deferred unique constraint) is the effect's failure: it
    counts as the handler's, as in C and Node, so the event is dead-lettered at the limit with the
    server's reason instead of being retried forever; the healthy event is processed once."""
    effects_table(admin, schema)
    admin.execute(f'CREATE TABLE "{schema}".deferred_keys (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)')
    cfg["consumer.on_failure"] = "requeue"
    cfg["consumer.delivery_limit"] = 2
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        refused, healthy = write_events(cfg, 2, aggregates=2)
        with outbox.Relay(cfg) as relay:
            relay.drain()
        calls = {}

        def handle(msg, conn):
            calls[msg.id] = calls.get(msg.id, 0) + 1
            if msg.id == refused:
                conn.execute(f'INSERT INTO "{schema}".deferred_keys VALUES (1), (1)')  # refused at COMMIT
            conn.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s, %s)', (msg.id, msg.event_type, 1))

        with psycopg.connect(PG_URL) as conn:
            handled = consumer.run(handle, conn, idle_timeout=3)
    assert handled == 1
    assert calls == {refused: 2, healthy: 1}
    assert [r[0] for r in admin.execute(f'SELECT event_id::text FROM "{schema}".effects')] == [healthy]
    dead = amqp.get_all(f"{consumer_name}.dead", 1)
    assert [p.message_id for p, _ in dead] == [refused]
    reason = dead[0][0].headers["x-outbox-dead-reason"]
    assert reason.startswith("handler failed 2 time(s): ") and "duplicate key" in reason, reason


@pytest.mark.parametrize("kind", ["own", "psycopg", "psycopg2", "db"])
def test_run_goes_on_consuming_after_its_broker_connections_are_closed(admin, schema, cfg, consumer_name, count, kind):
    # Whatever connection it was given: the library's loop reopens the broker connection (the next
    # address of amqp.url first) and goes on; a message in hand comes back and is applied once.
    effects_table(admin, schema)
    consumer = outbox.Consumer(consumer_name, cfg)
    consumer.connect()
    write_events(cfg, 2, aggregates=2)
    relay = outbox.Relay(cfg)
    relay.drain()
    seen = []

    def handle(msg, conn):
        sql = f'INSERT INTO "{schema}".effects VALUES ($1, $2, $3)'
        if kind == "own" or kind == "db":
            conn.execute(sql, [msg.id, "x", 1])
        elif kind == "psycopg":
            conn.execute(sql.replace("$1", "%s").replace("$2", "%s").replace("$3", "%s"), (msg.id, "x", 1))
        else:
            with conn.cursor() as cur:
                cur.execute(sql.replace("$1", "%s").replace("$2", "%s").replace("$3", "%s"), (msg.id, "x", 1))
        seen.append(msg.id)
        if len(seen) == 2:
            close_consumer_connections(consumer_name)
            write_events(cfg, 2, aggregates=2)
            relay.drain()
        if len(seen) == 4:
            consumer.stop()

    conn = None
    if kind == "psycopg":
        conn = psycopg.connect(PG_URL)
    elif kind == "psycopg2":
        conn = psycopg2.connect(PG_URL)
    elif kind == "db":
        conn = outbox.Db(PG_URL, config=cfg)
    try:
        handled = consumer.run(handle, conn, idle_timeout=60)
    finally:
        relay.close()
        consumer.close()
        if conn is not None:
            conn.close()
    assert handled == 4 and len(set(seen)) == 4, seen
    assert count(table="effects") == 4
