"""Any driver, as most users install them (a venv of its own: psycopg[binary], psycopg2-binary,
SQLAlchemy, asyncpg): the library's statement through the driver's own cursor, the same result
and errors, a duplicate that leaves the transaction usable, and an asyncio consumer.
Run by scripts/test_python.sh in $OUTBOX_RUN_DIR/venv-drivers."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import psycopg
import psycopg2
import pytest
import sqlalchemy as sa
from conftest import PG_URL, close_consumer_connections, event
from park_scenario import Failing, publish, run_scenario
from sqlalchemy.orm import Session

import outbox

SA_URL = PG_URL.replace("postgresql://", "postgresql+psycopg://", 1)


def row(admin, schema, event_id):
    return admin.execute(
        f'SELECT event_type, seq, idempotency_key FROM "{schema}".outbox WHERE outbox_id = %s',
        (event_id,)).fetchone()


def test_the_venv_has_the_binary_wheels():
    assert psycopg.pq.__impl__ == "binary"
    from importlib import metadata

    assert metadata.distribution("psycopg2-binary").version
    assert metadata.distribution("psycopg-binary").version


def check_write_duplicate_usable(admin, schema, cfg, conn, execute, commit, rollback):
    """write -> Written matching the stored row; a reused key -> DuplicateEvent, transaction usable;
    commit keeps both; rollback leaves nothing."""
    key = f"k-{uuid.uuid4()}"
    w = outbox.write(conn, config=cfg, **event(aggregate_id="7", idempotency_key=key))
    assert isinstance(w, outbox.Written) and w.event_type == "ProductCreated" and w.seq == 1
    with pytest.raises(outbox.DuplicateEvent) as e:
        outbox.write(conn, config=cfg, **event(aggregate_id="7", idempotency_key=key))
    assert e.value.code == "DUPLICATE" and f"by event {w.id}" in str(e.value)
    w2 = outbox.write(conn, config=cfg, **event(aggregate_id="7"))  # still usable
    assert w2.seq == 2
    execute("SELECT 1")
    commit()
    assert row(admin, schema, w.id) == ("ProductCreated", 1, key)
    assert row(admin, schema, w2.id)[1] == 2
    w3 = outbox.write(conn, config=cfg, **event(aggregate_id="8"))
    rollback()
    assert row(admin, schema, w3.id) is None


def test_psycopg_binary_write(admin, schema, cfg):
    with psycopg.connect(PG_URL) as conn:
        check_write_duplicate_usable(admin, schema, cfg, conn, conn.execute, conn.commit, conn.rollback)
        # inside conn.transaction() too, and the same errors as the library's
        with conn.transaction():
            with pytest.raises(outbox.InvalidEvent):
                outbox.write(conn, config=cfg, **event(operation="POSTT"))
            w = outbox.write(conn, config=cfg, **event(aggregate_id="9", idempotency_key="once"))
            with pytest.raises(outbox.DuplicateEvent):
                outbox.write(conn, config=cfg, **event(aggregate_id="9", idempotency_key="once"))
        assert row(admin, schema, w.id)[2] == "once"
        with pytest.raises(outbox.SchemaError) as e:
            outbox.write(conn, config={"outbox.schema": "py_no_such_schema"}, **event())
        assert e.value.sqlstate == "42P01"
        conn.rollback()
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        with pytest.raises(outbox.TransactionError):
            outbox.write(conn, config=cfg, **event())
        conn.rollback()
    with psycopg.connect(PG_URL, autocommit=True) as conn:  # autocommit: the statement alone
        w = outbox.write(conn, config=cfg, **event(aggregate_id="auto", idempotency_key="auto"))
        with pytest.raises(outbox.DuplicateEvent):
            outbox.write(conn, config=cfg, **event(aggregate_id="auto", idempotency_key="auto"))
        assert row(admin, schema, w.id)[1] == 1


def test_psycopg2_binary_write(admin, schema, cfg):
    conn = psycopg2.connect(PG_URL)
    try:
        def execute(sql):
            with conn.cursor() as cur:
                cur.execute(sql)

        check_write_duplicate_usable(admin, schema, cfg, conn, execute, conn.commit, conn.rollback)
        with pytest.raises(outbox.TooLarge):
            outbox.write(conn, config={**cfg, "event.max_payload_bytes": 1024}, **event(payload={"x": "y" * 2000}))
    finally:
        conn.close()


def test_db_wrap_on_a_binary_connection(admin, schema, cfg):
    with psycopg.connect(PG_URL) as conn:
        db = outbox.Db.wrap(conn, config=cfg)
        with db.transaction():
            w = db.write(**event(aggregate_id="w"))
            assert db.tx_state == outbox.TxState.INTRANS
            r = outbox.dedupe(conn, "c1", w.id, config=cfg)
            assert r.first_time
            assert not outbox.dedupe(conn, "c1", w.id, config=cfg).first_time
        assert row(admin, schema, w.id)[1] == 1
        with pytest.raises(outbox.InvalidArgument, match="outbox.Db of its own"):
            db.execute("SELECT 1")
        with pytest.raises(outbox.InvalidArgument, match="outbox.Db of its own"):
            outbox.migrate(conn, config=cfg)  # migrate(url) works with any driver


def test_sqlalchemy_session_and_connection(admin, schema, cfg):
    engine = sa.create_engine(SA_URL)
    try:
        with Session(engine) as session:
            check_write_duplicate_usable(admin, schema, cfg, session, lambda s: session.execute(sa.text(s)),
                                         session.commit, session.rollback)
        with engine.connect() as c:
            w = outbox.write(c, config=cfg, **event(aggregate_id="sa", idempotency_key="sa"))
            with pytest.raises(outbox.DuplicateEvent):
                outbox.write(c, config=cfg, **event(aggregate_id="sa", idempotency_key="sa"))
            assert c.execute(sa.text("SELECT 2")).scalar_one() == 2
            c.commit()
            with pytest.raises(outbox.InvalidEvent):
                outbox.write(c, config=cfg, **event(payload="not json"))
        with Session(engine) as session:  # an aborted transaction: TransactionError, as the library says
            with pytest.raises(sa.exc.DBAPIError):
                session.execute(sa.text("SELECT 1/0"))
            with pytest.raises(outbox.TransactionError):
                outbox.write(session, config=cfg, **event())
            session.rollback()
            assert outbox.write(session, config=cfg, **event(aggregate_id="after")).seq == 1
            session.commit()
        assert row(admin, schema, w.id) == ("ProductCreated", 1, "sa")
    finally:
        engine.dispose()


async def _async_checks(admin, schema, cfg, conn, begin, commit, rollback, execute):
    await begin()
    w = await outbox.write_async(conn, config=cfg, **event(aggregate_id="as", idempotency_key="ak"))
    assert w.seq == 1 and w.event_type == "ProductCreated"
    with pytest.raises(outbox.DuplicateEvent) as e:
        await outbox.write_async(conn, config=cfg, **event(aggregate_id="as", idempotency_key="ak"))
    assert e.value.code == "DUPLICATE"
    await execute("SELECT 1")  # usable
    w2 = await outbox.write_async(conn, config=cfg, **event(aggregate_id="as"))
    await commit()
    assert row(admin, schema, w.id) == ("ProductCreated", 1, "ak") and row(admin, schema, w2.id)[1] == 2
    await begin()
    w3 = await outbox.write_async(conn, config=cfg, **event(aggregate_id="as"))
    await rollback()
    assert row(admin, schema, w3.id) is None
    with pytest.raises(outbox.InvalidEvent):
        await outbox.write_async(conn, config=cfg, **event(aggregate_type=""))


def test_asyncpg_write(admin, schema, cfg):
    async def main():
        conn = await asyncpg.connect(PG_URL)
        try:
            await _async_checks(admin, schema, cfg, conn, lambda: conn.execute("BEGIN"),
                                lambda: conn.execute("COMMIT"), lambda: conn.execute("ROLLBACK"), conn.execute)
            with pytest.raises(outbox.ArgumentTypeError):
                outbox.write(conn, config=cfg, **event())
        finally:
            await conn.close()

    asyncio.run(main())


def test_psycopg_async_write(admin, schema, cfg):
    async def main():
        async with await psycopg.AsyncConnection.connect(PG_URL) as conn:
            async def noop():
                pass

            await _async_checks(admin, schema, cfg, conn, noop, conn.commit, conn.rollback, conn.execute)

    asyncio.run(main())


def test_sqlalchemy_async_session_write(admin, schema, cfg):
    # FastAPI's usual session: outbox.write_async(session, ...) in the session's transaction, a
    # reused key leaving it usable, a rollback taking the event with it.
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def main():
        engine = create_async_engine(PG_URL.replace("postgresql://", "postgresql+asyncpg://", 1))
        try:
            async with AsyncSession(engine) as session:
                w = await outbox.write_async(session, config=cfg, **event(aggregate_id="s1", idempotency_key="s-once"))
                with pytest.raises(outbox.DuplicateEvent, match=f"by event {w.id}"):
                    await outbox.write_async(session, config=cfg, **event(aggregate_id="s2", idempotency_key="s-once"))
                assert (await session.execute(sa.text("SELECT 1"))).scalar() == 1, "the transaction is usable"
                await session.commit()
            async with AsyncSession(engine) as session:
                await outbox.write_async(session, config=cfg, **event(aggregate_id="s3"))
                await session.rollback()
        finally:
            await engine.dispose()
        return w

    w = asyncio.run(main())
    assert row(admin, schema, w.id)[2] == "s-once"
    assert admin.execute(f'SELECT count(*) FROM "{schema}".outbox').fetchone()[0] == 1


def _publish(admin, schema, cfg, consumer_name, n):
    admin.execute(f'CREATE TABLE "{schema}".effects (event_id uuid PRIMARY KEY, n int)')
    consumer = outbox.Consumer(consumer_name, cfg)
    consumer.connect()  # the queue exists before the relay publishes
    with psycopg.connect(PG_URL) as conn:
        ids = [outbox.write(conn, config=cfg, **event(aggregate_id=f"a{i % 2}", payload={"n": i})).id for i in range(n)]
        conn.commit()
    with outbox.Relay(cfg) as relay:
        assert relay.drain().published == n
    return consumer, ids


def _effects(admin, schema):
    return admin.execute(f'SELECT event_id::text, n FROM "{schema}".effects ORDER BY n').fetchall()


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
def test_async_consumer_exactly_once_with_a_forced_redelivery(admin, schema, cfg, consumer_name, driver):
    cfg["consumer.on_failure"] = "requeue"  # redelivered by the broker (park: test_park.py)
    consumer, ids = _publish(admin, schema, cfg, consumer_name, 6)
    failed = set()
    seen = []

    async def handle(msg: outbox.Message, conn) -> None:
        sql = f'INSERT INTO "{schema}".effects VALUES ($1, $2)' if driver == "asyncpg" else \
            f'INSERT INTO "{schema}".effects VALUES (%s, %s)'
        params = (uuid.UUID(msg.id), msg.payload["n"])
        if driver == "asyncpg":
            await conn.execute(sql, *params)
        else:
            await conn.execute(sql, params)
        seen.append((msg.payload["n"], msg.order))
        if msg.payload["n"] == 2 and msg.id not in failed:
            failed.add(msg.id)
            raise RuntimeError("transient")  # rolled back, redelivered: applied once

    entered = asyncio.Event()

    async def stuck(msg: outbox.Message, conn) -> None:  # writes its effect, then never returns
        sql = f'INSERT INTO "{schema}".effects VALUES ($1, $2)' if driver == "asyncpg" else \
            f'INSERT INTO "{schema}".effects VALUES (%s, %s)'
        params = (uuid.UUID(msg.id), -1)
        await (conn.execute(sql, *params) if driver == "asyncpg" else conn.execute(sql, params))
        entered.set()
        await asyncio.sleep(3600)

    async def main():
        conn = await (asyncpg.connect(PG_URL) if driver == "asyncpg" else psycopg.AsyncConnection.connect(PG_URL))
        try:
            # Cancelled inside the handler: rolled back (its effect too), the message given back uncounted.
            task = asyncio.create_task(consumer.run_async(stuck, conn, idle_timeout=30))
            await asyncio.wait_for(entered.wait(), 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert _effects(admin, schema) == []
            ticks = 0

            async def ticker():  # the event loop keeps running while the consumer waits
                nonlocal ticks
                while True:  # one tick per turn the loop gives it (a timed sleep can outlast a fast run)
                    await asyncio.sleep(0)
                    ticks += 1

            t = asyncio.create_task(ticker())
            handled = await consumer.run_async(handle, conn, limit=6, idle_timeout=10)
            t.cancel()
            assert handled == 6 and ticks >= 2, (handled, ticks)
            # the same events again (a redelivery after a lost ack): skipped by the inbox
            assert (await outbox.dedupe_async(conn, consumer, ids[0], config=cfg)).first_time is False
            if driver == "psycopg":
                await conn.rollback()  # psycopg began a transaction for the dedupe
            # cancelled while waiting: no message is lost
            task = asyncio.create_task(consumer.run_async(handle, conn, idle_timeout=30))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await conn.close()

    with consumer:
        asyncio.run(main())
    assert len(failed) == 1
    rows = _effects(admin, schema)
    assert [r[1] for r in rows] == list(range(6)) and {r[0] for r in rows} == set(ids)
    assert admin.execute(f'SELECT count(*) FROM "{schema}".outbox_inbox').fetchone()[0] == 6
    # The order check is the library's (outbox_dedupe_interpret): aggregate a1 (events 1, 3, 5) came in
    # order; a0's were reordered by the requeues (the cancelled and the failed event).
    assert {o for n, o in seen if n % 2 == 1} == {outbox.Order.IN_ORDER}
    assert outbox.Order.UNCHECKED not in {o for _, o in seen}


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2", "sqlalchemy"])
def test_sync_consumer_on_a_binary_connection_or_a_session(admin, schema, cfg, consumer_name, driver):
    cfg["consumer.on_failure"] = "requeue"
    consumer, ids = _publish(admin, schema, cfg, consumer_name, 4)
    failed = set()

    def handle(msg: outbox.Message, conn) -> None:
        if driver == "psycopg":
            conn.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s)', (msg.id, msg.payload["n"]))
        elif driver == "psycopg2":
            with conn.cursor() as cur:
                cur.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s)', (msg.id, msg.payload["n"]))
        else:
            conn.execute(sa.text(f'INSERT INTO "{schema}".effects VALUES (CAST(:i AS uuid), :n)'),
                         {"i": msg.id, "n": msg.payload["n"]})
        if msg.payload["n"] == 1 and msg.id not in failed:
            failed.add(msg.id)
            raise RuntimeError("transient")

    engine = sa.create_engine(SA_URL)
    try:
        conn = {"psycopg": lambda: psycopg.connect(PG_URL), "psycopg2": lambda: psycopg2.connect(PG_URL),
                "sqlalchemy": lambda: Session(engine)}[driver]()
        with consumer:
            assert consumer.run(handle, conn, limit=4, idle_timeout=10) == 4
            assert not outbox.dedupe(conn, consumer, ids[0], config=cfg).first_time
        conn.close()
    finally:
        engine.dispose()
    assert [r[1] for r in _effects(admin, schema)] == [0, 1, 2, 3] and len(failed) == 1
    assert admin.execute(f'SELECT count(*) FROM "{schema}".outbox_inbox').fetchone()[0] == 4


def test_a_session_is_left_outside_a_transaction_after_a_failed_handler(admin, schema, cfg, consumer_name):
    # Whether the connection is lost after the loop's ROLLBACK is read without beginning: the Session
    # holds no pooled connection afterwards, and runs again (requeue: the failed event comes back).
    cfg["consumer.on_failure"] = "requeue"
    consumer, ids = _publish(admin, schema, cfg, consumer_name, 1)

    def fail(msg: outbox.Message, session) -> None:
        consumer.stop()  # the run ends right after this delivery's ROLLBACK
        raise RuntimeError("the handler says no")

    def handle(msg: outbox.Message, session) -> None:
        session.execute(sa.text(f'INSERT INTO "{schema}".effects VALUES (CAST(:i AS uuid), :n)'),
                        {"i": msg.id, "n": msg.payload["n"]})

    engine = sa.create_engine(SA_URL)
    try:
        with consumer, Session(engine) as session:
            assert consumer.run(fail, session, idle_timeout=10) == 0
            assert not session.in_transaction() and engine.pool.checkedout() == 0
            consumer.reset()
            assert consumer.run(handle, session, limit=1, idle_timeout=10) == 1
            assert not session.in_transaction()
    finally:
        engine.dispose()
    assert _effects(admin, schema) == [(ids[0], 0)]


def test_a_sqlalchemy_connection_lost_under_the_handler_ends_the_run(admin, schema, cfg, consumer_name):
    # A disconnected Connection is lost (ConnectionLost), not silently reconnected by the check.
    consumer, _ = _publish(admin, schema, cfg, consumer_name, 1)

    def kill(msg: outbox.Message, c) -> None:
        admin.execute("SELECT pg_terminate_backend(%s)", (c.execute(sa.text("SELECT pg_backend_pid()")).scalar(),))
        c.execute(sa.text("SELECT 1"))

    engine = sa.create_engine(SA_URL)
    try:
        with consumer, engine.connect() as c:
            with pytest.raises(outbox.ConnectionLost):
                consumer.run(kill, c, idle_timeout=10)
            assert c.invalidated
    finally:
        engine.dispose()
    assert _effects(admin, schema) == []


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg-async", "psycopg-binary", "sqlalchemy"])
def test_consumer_goes_on_after_its_broker_connections_are_closed(admin, schema, cfg, consumer_name, driver):
    # The library's loop, driven in asyncio or blocking code on a driver's own connection: a closed
    # broker connection is reopened and consuming goes on; every event is applied once.
    consumer, ids = _publish(admin, schema, cfg, consumer_name, 2)
    seen = []

    def after(msg):
        seen.append(msg.id)
        if len(seen) == 2:
            close_consumer_connections(consumer_name)
            with psycopg.connect(PG_URL) as c:
                for i in (2, 3):
                    outbox.write(c, config=cfg, **event(aggregate_id=f"a{i % 2}", payload={"n": i}))
                c.commit()
            with outbox.Relay(cfg) as relay:
                relay.drain()
        if len(seen) == 4:
            consumer.stop()

    async def ahandle(msg: outbox.Message, conn) -> None:
        if driver == "asyncpg":
            await conn.execute(f'INSERT INTO "{schema}".effects VALUES ($1, $2)', uuid.UUID(msg.id), msg.payload["n"])
        else:
            await conn.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s)', (uuid.UUID(msg.id), msg.payload["n"]))
        after(msg)

    def handle(msg: outbox.Message, conn) -> None:
        if driver == "sqlalchemy":
            conn.execute(sa.text(f'INSERT INTO "{schema}".effects VALUES (:i, :n)'),
                         {"i": uuid.UUID(msg.id), "n": msg.payload["n"]})
        else:
            conn.execute(f'INSERT INTO "{schema}".effects VALUES (%s, %s)', (uuid.UUID(msg.id), msg.payload["n"]))
        after(msg)

    async def main():
        conn = await (asyncpg.connect(PG_URL) if driver == "asyncpg" else psycopg.AsyncConnection.connect(PG_URL))
        try:
            return await consumer.run_async(ahandle, conn, idle_timeout=60)
        finally:
            await conn.close()

    try:
        if driver in ("asyncpg", "psycopg-async"):
            handled = asyncio.run(main())
        elif driver == "sqlalchemy":
            engine = sa.create_engine(SA_URL)
            with engine.connect() as conn:
                handled = consumer.run(handle, conn, idle_timeout=60)
            engine.dispose()
        else:
            with psycopg.connect(PG_URL) as conn:
                handled = consumer.run(handle, conn, idle_timeout=60)
    finally:
        consumer.close()
    assert handled == 4 and len(set(seen)) == 4, seen
    assert len(_effects(admin, schema)) == 4


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
def test_async_consumer_a_lost_database_is_no_attempt_and_failures_end_at_the_limit(admin, schema, cfg, consumer_name,
                                                                                     driver):
    # The library's loop in asyncio: a database lost under the handler ends run_async on the lent
    # connection (ConnectionLost) and is not counted; a handler that keeps failing runs
    # consumer.delivery_limit times, then its event is dead-lettered.
    cfg["consumer.on_failure"] = "requeue"
    cfg["consumer.delivery_limit"] = 2
    consumer, ids = _publish(admin, schema, cfg, consumer_name, 2)

    async def connect():
        return await (asyncpg.connect(PG_URL) if driver == "asyncpg" else psycopg.AsyncConnection.connect(PG_URL))

    async def main():
        conn = await connect()
        calls: dict = {}

        async def kill(msg: outbox.Message, c) -> None:
            admin.execute("SELECT pg_terminate_backend(%s)", (c.get_server_pid() if driver == "asyncpg" else c.info.backend_pid,))
            await c.execute("SELECT 1")

        with pytest.raises(outbox.ConnectionLost):
            await consumer.run_async(kill, conn, idle_timeout=30)
        conn = await connect()
        try:
            async def flaky(msg: outbox.Message, c) -> None:
                calls[msg.id] = calls.get(msg.id, 0) + 1
                if msg.payload["n"] == 1 or calls[msg.id] == 1:
                    raise RuntimeError("the handler says no")  # n=1 always; n=0 once

            handled = await consumer.run_async(flaky, conn, idle_timeout=3)
        finally:
            await conn.close()
        return handled, calls

    try:
        handled, calls = asyncio.run(main())
    finally:
        consumer.close()
    assert handled == 1, calls
    # n=0: the lost database was no attempt, one real failure, then handled; n=1: the limit, 2.
    assert sorted(calls.values()) == [2, 2], calls


@pytest.mark.parametrize("driver", ["psycopg2", "sqlalchemy"])
def test_park_redrive_and_skip_on_a_binary_connection_or_a_session(admin, schema, cfg, consumer_name, driver):
    # consumer.on_failure=park through psycopg2-binary's cursor and a SQLAlchemy Session: the loop's
    # parking statements run like its dedupe (tests/park_scenario.py).
    consumer, ids = publish(admin, schema, cfg, consumer_name)
    failing = Failing()

    def handle(msg: outbox.Message, conn) -> None:
        failing.check(msg)
        if driver == "psycopg2":
            with conn.cursor() as cur:
                cur.execute(f'INSERT INTO "{schema}".applied (aggregate_id, seq) VALUES (%s, %s)', (msg.aggregate_id, msg.seq))
        else:
            conn.execute(sa.text(f'INSERT INTO "{schema}".applied (aggregate_id, seq) VALUES (:a, :s)'),
                         {"a": msg.aggregate_id, "s": msg.seq})

    engine = sa.create_engine(SA_URL)

    def run(idle: float) -> int:
        conn = psycopg2.connect(PG_URL) if driver == "psycopg2" else Session(engine)
        try:
            return consumer.run(handle, conn, idle_timeout=idle)
        finally:
            conn.close()

    try:
        with consumer:
            run_scenario(admin, schema, cfg, consumer, ids, failing, run)
    finally:
        engine.dispose()
