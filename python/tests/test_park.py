"""consumer.on_failure=park on the blocking and the asyncio loop (park_scenario.py): a failing aggregate
is held and parked, the others flow; redrive and skip (outbox.parked, redrive, redrive_all, skip) let it
through in order. Also the operator functions' arguments and errors."""

from __future__ import annotations

import asyncio

import asyncpg
import psycopg
import pytest
from conftest import PG_URL
from park_scenario import Failing, publish, run_scenario

import outbox


@pytest.mark.parametrize("kind", ["psycopg", "own"])
def test_park_redrive_and_skip_on_the_blocking_loop(admin, schema, cfg, consumer_name, kind):
    consumer, ids = publish(admin, schema, cfg, consumer_name)
    failing = Failing()

    def handle(msg: outbox.Message, conn) -> None:
        failing.check(msg)
        if kind == "own":  # the loop's own connection: a Db view of its transaction
            conn.execute(f'INSERT INTO "{schema}".applied (aggregate_id, seq) VALUES ($1, $2)', [msg.aggregate_id, msg.seq])
        else:
            conn.execute(f'INSERT INTO "{schema}".applied (aggregate_id, seq) VALUES (%s, %s)', (msg.aggregate_id, msg.seq))

    def run(idle: float) -> int:
        if kind == "own":
            return consumer.run(handle, idle_timeout=idle)
        with psycopg.connect(PG_URL) as conn:
            return consumer.run(handle, conn, idle_timeout=idle)

    with consumer:
        run_scenario(admin, schema, cfg, consumer, ids, failing, run)


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
def test_park_redrive_and_skip_on_the_asyncio_loop(admin, schema, cfg, consumer_name, driver):
    consumer, ids = publish(admin, schema, cfg, consumer_name)
    failing = Failing()

    async def handle(msg: outbox.Message, conn) -> None:
        failing.check(msg)
        if driver == "asyncpg":
            await conn.execute(f'INSERT INTO "{schema}".applied (aggregate_id, seq) VALUES ($1, $2)', msg.aggregate_id,
                               msg.seq)
        else:
            await conn.execute(f'INSERT INTO "{schema}".applied (aggregate_id, seq) VALUES (%s, %s)',
                               (msg.aggregate_id, msg.seq))

    async def once(idle: float) -> int:
        conn = await (asyncpg.connect(PG_URL) if driver == "asyncpg" else
                      psycopg.AsyncConnection.connect(PG_URL, autocommit=True))
        try:
            return await consumer.run_async(handle, conn, idle_timeout=idle)
        finally:
            await conn.close()

    with consumer:
        run_scenario(admin, schema, cfg, consumer, ids, failing, lambda idle: asyncio.run(once(idle)))


def test_the_operator_functions_take_a_url_or_a_db_and_raise_typed_errors(schema, cfg):
    assert outbox.parked(PG_URL, config=cfg) == [] and outbox.parked(PG_URL, None, False, 5, config=cfg) == []
    with outbox.Db(PG_URL, config=cfg) as db:
        assert outbox.redrive(db, "c", "ORD", 42) == 0 and outbox.redrive_all(db, "c") == 0
        with pytest.raises(outbox.NotFound) as e:
            outbox.skip(db, "c", "ORD", "42", by="ops")
        assert e.value.code == "NOT_FOUND" and "holds no aggregate" in str(e.value)
        with pytest.raises(outbox.InvalidArgument):
            outbox.parked(db, limit=0)
        with pytest.raises(outbox.InvalidArgument):
            outbox.skip(db, "c", "ORD", "42", by="")
        with pytest.raises(outbox.InvalidArgument):
            outbox.skip(db, "c", "ORD", "42", by="ops", event_id="not-a-uuid")
    with psycopg.connect(PG_URL) as conn, pytest.raises(outbox.InvalidArgument, match="outbox.Db of its own"):
        outbox.parked(conn, config=cfg)
    with pytest.raises(outbox.SchemaError):
        outbox.parked(PG_URL, config={"outbox.schema": "no_such_schema_here"})
