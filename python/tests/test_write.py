"""Writing in the caller's transaction: psycopg 3, psycopg2, an owned Db, rendered statements."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import asyncpg
import psycopg
import psycopg2
import pytest
from conftest import PG_URL, event

import outbox


def business_table(admin, schema):
    admin.execute(f'CREATE TABLE "{schema}".orders (id text PRIMARY KEY, total numeric)')


def test_psycopg3_commit_persists_rollback_leaves_nothing(admin, schema, cfg, count):
    business_table(admin, schema)
    with psycopg.connect(PG_URL) as conn:
        with conn.transaction():
            conn.execute(f'INSERT INTO "{schema}".orders VALUES (%s, %s)', ("o1", 10))
            w = outbox.write(conn, config=cfg, **event(aggregate_id="o1"))
        assert w.event_type == "ProductCreated" and w.seq == 1 and uuid.UUID(w.id).version == 7
        with pytest.raises(RuntimeError):
            with conn.transaction():
                conn.execute(f'INSERT INTO "{schema}".orders VALUES (%s, %s)', ("o2", 20))
                outbox.write(conn, config=cfg, **event(aggregate_id="o2"))
                raise RuntimeError("roll back")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert count() == 1 and count("aggregate_id = 'o1'") == 1
    assert admin.execute(f'SELECT id FROM "{schema}".orders').fetchall() == [("o1",)]
    row = admin.execute(f'SELECT outbox_id::text, status, seq FROM "{schema}".outbox').fetchone()
    assert row == (w.id, "PENDING", 1)


def test_psycopg3_write_begins_the_drivers_transaction(admin, schema, cfg, count):
    """Outside autocommit, psycopg begins on the first statement: so does outbox.write."""
    with psycopg.connect(PG_URL) as conn:
        outbox.write(conn, config=cfg, **event())
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert count() == 0, "not visible before the commit"
        conn.rollback()
        assert count() == 0
        outbox.write(conn, config=cfg, **event())
        conn.commit()
        assert count() == 1
        # isolation level honoured: psycopg's own BEGIN statement is used
        conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
        outbox.write(conn, config=cfg, **event())
        assert conn.execute("SHOW transaction_isolation").fetchone()[0] == "serializable"
        conn.commit()
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        outbox.write(conn, config=cfg, **event())  # autocommit: its own transaction, like psql
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert count() == 3


def test_psycopg2_commit_persists_rollback_leaves_nothing(admin, schema, cfg, count):
    business_table(admin, schema)
    conn = psycopg2.connect(PG_URL)
    try:
        cur = conn.cursor()
        cur.execute(f'INSERT INTO "{schema}".orders VALUES (%s, %s)', ("o1", 10))
        w = outbox.write(conn, config=cfg, **event(aggregate_id="o1"))
        conn.commit()
        cur.execute(f'INSERT INTO "{schema}".orders VALUES (%s, %s)', ("o2", 20))
        outbox.write(conn, config=cfg, **event(aggregate_id="o2"))
        conn.rollback()
        # A write as the transaction's first statement: psycopg2 opens it, so commit() commits.
        outbox.write(conn, config=cfg, **event(aggregate_id="o3"))
        assert conn.status == psycopg2.extensions.STATUS_BEGIN
        assert count("aggregate_id = 'o3'") == 0
        conn.commit()
        outbox.write(conn, config=cfg, **event(aggregate_id="o4"))
        conn.rollback()
    finally:
        conn.close()
    assert sorted(r[0] for r in admin.execute(f'SELECT aggregate_id FROM "{schema}".outbox')) == ["o1", "o3"]
    assert admin.execute(f'SELECT id FROM "{schema}".orders').fetchall() == [("o1",)]
    assert w.seq == 1


def test_owned_db_transaction_and_execute(admin, schema, cfg, count):
    business_table(admin, schema)
    with outbox.Db.open(PG_URL, config=cfg) as db:
        assert db.owned and db.tx_state == outbox.TxState.IDLE
        with db.transaction():
            db.execute(f'INSERT INTO "{schema}".orders VALUES ($1, $2)', ["o1", 12.5])
            a = db.write(outbox.Event("ORD", "o1", "POST", {"id": "o1"}))
            b = db.write(aggregate_type="ORD", aggregate_id="o1", operation="FORCE_DELETE", payload="{}")
            assert db.tx_state == outbox.TxState.INTRANS
        with pytest.raises(KeyError):
            with db.transaction():
                db.write(**event())
                raise KeyError("no")
        rows = db.execute(f'SELECT total, event_type FROM "{schema}".orders, "{schema}".outbox ORDER BY seq')
        assert rows == [("12.5", "OrderCreated"), ("12.5", "OrderForceDeleted")]
        assert rows.rowcount == 2 and db.execute("SELECT NULL::text").scalar() is None
        with pytest.raises(outbox.ArgumentTypeError, match="has its own"):
            outbox.write(db, config=cfg, **event())
    assert (a.seq, b.seq, b.event_type) == (1, 2, "OrderForceDeleted")
    assert count() == 2 and db.closed


def test_events_as_dataclass_mapping_and_json(admin, schema, cfg):
    @dataclasses.dataclass
    class Line:
        sku: str
        qty: int

    @dataclasses.dataclass
    class OrderPlaced:  # any dataclass with the event's field names
        aggregate_type: str
        aggregate_id: str
        operation: str
        payload: object
        metadata: object = None
        note: str = "not an event field: ignored"

    with psycopg.connect(PG_URL) as conn:
        outbox.write(conn, OrderPlaced("ORD", "7", "POST", {"lines": [Line("é€", 2)], "at": uuid.UUID(int=1)}),
                     config=cfg, metadata={"traceparent": "00-x"})
        text = '{ "exact" : [1, 2.50, "x"] }'
        outbox.write(conn, {"aggregate_type": "ORD", "aggregate_id": 8, "operation": outbox.Operation.PUT,
                            "payload": text, "user": "o'neil"}, config=cfg)
        conn.commit()
    rows = admin.execute(f'SELECT aggregate_id, payload::text, metadata::text, actor FROM "{schema}".outbox ORDER BY aggregate_id').fetchall()
    assert rows[0] == ("7", '{"lines":[{"sku":"é€","qty":2}],"at":"00000000-0000-0000-0000-000000000001"}',
                       '{"traceparent":"00-x"}', None)
    assert rows[1] == ("8", text, "{}", "o'neil"), "JSON text passes through byte for byte"


def test_rendered_statement_through_a_psycopg_cursor(admin, schema, cfg, count):
    business_table(admin, schema)
    with psycopg.connect(PG_URL) as conn:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(f'INSERT INTO "{schema}".orders VALUES (%s, %s)', ("o1", 1))
            st = outbox.render_write(config=cfg, placeholders="format", **event(aggregate_id="o1"))
            cur.execute(st.sql, st.params)
            assert cur.fetchone()[0] == 1
        with pytest.raises(ZeroDivisionError):
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(*outbox.render_write(config=cfg, placeholders="format", **event(aggregate_id="o2")))
                raise ZeroDivisionError("roll back")
    row = admin.execute(f'SELECT outbox_id::text, event_type, payload::text FROM "{schema}".outbox').fetchone()
    assert row == (st.event_id, "ProductCreated", '{"PRD_ID":"123","XPRD01":"Widget Pro","XPRD02":99.99}')
    assert count() == 1


def test_rendered_statement_through_asyncpg(admin, schema, cfg, count):
    async def main():
        conn = await asyncpg.connect(PG_URL)
        try:
            async with conn.transaction():
                st = outbox.render_write(config=cfg, **event(aggregate_id="a1"))  # $n: asyncpg's own style
                assert "$11" in st.sql and len(st.params) == 11
                seq = await conn.fetchval(st.sql, *st.params)
            try:
                async with conn.transaction():
                    st2 = outbox.render_write(config=cfg, **event(aggregate_id="a2"))
                    await conn.fetchval(st2.sql, *st2.params)
                    raise LookupError
            except LookupError:
                pass
            dd = outbox.render_dedupe("asyncpg-sub", st.event_id, "PRD", "a1", 1, config=cfg)
            async with conn.transaction():
                first = await conn.fetchrow(dd.sql, *dd.params)
            async with conn.transaction():
                again = await conn.fetchrow(dd.sql, *dd.params)
            return seq, st, first, again
        finally:
            await conn.close()

    seq, st, first, again = asyncio.run(main())
    assert seq == 1 and count() == 1
    assert admin.execute(f'SELECT outbox_id::text FROM "{schema}".outbox').fetchone()[0] == st.event_id
    assert first[0] is True and again[0] is False


def test_placeholder_styles():
    e = event()
    q = outbox.render_write(placeholders="qmark", **e)
    assert "?" in q.sql and "$1" not in q.sql
    n = outbox.render_write(placeholders="named", **e)
    assert ":p11" in n.sql and set(n.params) == {f"p{i}" for i in range(1, 12)}
    cfgq = outbox.Config({"render.placeholders": "qmark"})
    assert "?" in outbox.render_write(config=cfgq, **e).sql
    assert "%s" in outbox.render_write(config=cfgq, placeholders="format", **e).sql
    with pytest.raises(outbox.InvalidArgument):
        outbox.render_write(placeholders="colon", **e)


def test_wrapped_connection_stays_the_callers(admin, schema, cfg):
    with psycopg.connect(PG_URL) as conn:
        db = outbox.Db.wrap(conn, config=cfg)
        assert not db.owned
        with pytest.raises(outbox.InvalidArgument, match="outbox.Db of its own"):
            db.pgconn  # nothing is lent: the library's statements run through the driver
        db.write(**event())
        db.close()  # releases the handle only
        assert not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.commit()
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_mapping_config_is_made_once_and_a_changed_one_takes_effect(schema, cfg):
    from outbox._config import _shared

    conf = dict(cfg)  # a plain dict, as most callers pass it
    _shared.cache_clear()
    with psycopg.connect(PG_URL) as conn:
        for _ in range(3):
            outbox.write(conn, config=conf, **event(aggregate_id="m"))
            assert outbox.dedupe(conn, "c", str(uuid.uuid4()), config=conf).first_time
        conn.commit()
        assert _shared.cache_info().misses == 1, _shared.cache_info()
        conf["outbox.schema"] = "py_no_such_schema"
        with pytest.raises(outbox.SchemaError):
            outbox.write(conn, config=conf, **event())
        conn.rollback()
        conf["outbox.schema"] = schema
        assert outbox.write(conn, config=conf, **event(aggregate_id="m")).seq == 4


def test_sequence_is_per_aggregate(cfg):
    with psycopg.connect(PG_URL) as conn:
        seqs = [outbox.write(conn, config=cfg, **event(aggregate_id=a)).seq for a in ("x", "y", "x", "x", "y")]
        conn.commit()
    assert seqs == [1, 1, 2, 3, 2]
