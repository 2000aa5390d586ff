"""Every bad input the C suite covers, from Python: the exception class of its status code, the
library's message, nothing written, and the caller's transaction still usable."""

from __future__ import annotations

import pickle

import psycopg
import psycopg2
import pytest
from conftest import PG_URL, event, unique

import outbox

BIG = '{"x":"' + "a" * (1024 * 1024) + '"}'

# (name, field overrides, exception class, part of the message) — as tests/integration/capi/errors_test.cpp
BAD = [
    ("missing aggregate_type", {"aggregate_type": ""}, outbox.InvalidEvent, "aggregate_type is required"),
    ("missing aggregate_id", {"aggregate_id": ""}, outbox.InvalidEvent, "aggregate_id is required"),
    ("missing payload", {"payload": ""}, outbox.InvalidEvent, "payload is required"),
    ("no payload at all", {"payload": None}, outbox.InvalidEvent, "payload is required"),
    ("missing operation", {"operation": None}, outbox.InvalidEvent, "operation is required"),
    ("invalid JSON payload", {"payload": '{"a":'}, outbox.InvalidEvent, "payload is not valid JSON"),
    ("payload not an object", {"payload": [1, 2]}, outbox.InvalidEvent, "payload"),
    ("invalid JSON metadata", {"metadata": "{'a':1}"}, outbox.InvalidEvent, "metadata is not valid JSON"),
    ("unknown operation", {"operation": "UPSERT"}, outbox.InvalidEvent, "POST, PUT, PATCH, DELETE"),
    ("payload over the limit", {"payload": BIG}, outbox.TooLarge, "over the limit"),
    ("NUL in a payload", {"payload": '{"a":"x\x00y"}'}, outbox.InvalidEvent, "NUL"),
    ("NUL in an aggregate id", {"aggregate_id": "a\x00b"}, outbox.InvalidEvent, "NUL"),
    ("lone surrogate", {"user": "\udcff"}, outbox.InvalidEvent, "UTF-8"),
    ("bad aggregate type", {"aggregate_type": "PRD;DROP"}, outbox.InvalidEvent, "letters, digits"),
    ("bad event id", {"event_id": "not-a-uuid"}, outbox.InvalidEvent, "UUID"),
    ("unserialisable payload", {"payload": {"x": object()}}, outbox.InvalidEvent, "JSON-serialisable"),
    ("unknown field", {"colour": "red"}, outbox.UnknownKey, "colour"),
    ("duplicate idempotency key", {"idempotency_key": "once"}, outbox.DuplicateEvent, "already used"),
]


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2", "db"])
def test_bad_input_precise_error_and_transaction_stays_usable(admin, schema, cfg, count, driver):
    if driver == "psycopg":
        conn = psycopg.connect(PG_URL)
    elif driver == "psycopg2":
        conn = psycopg2.connect(PG_URL)
    else:
        conn = outbox.Db(PG_URL, config=cfg)
    kw = {} if driver == "db" else {"config": cfg}
    try:
        if driver == "db":
            conn.begin()
        good = outbox.write(conn, **event(aggregate_id="keep", idempotency_key="once"), **kw)
        for name, override, exc, part in BAD:
            with pytest.raises(exc) as info:
                outbox.write(conn, **event(**{"aggregate_id": "bad", **override}), **kw)
            err = info.value
            assert part in str(err), f"{name}: {err}"
            assert isinstance(err, outbox.Error) and err.code == exc.code and err.message == str(err), name
        # Quotes and SQL-looking text are data, stored verbatim.
        sqlish = "Robert'); DROP TABLE outbox;--"
        odd = outbox.write(conn, **event(aggregate_id=sqlish, operation="PUT", user='o\'neil "the" user',
                                         payload={"name": sqlish, "q": '"x"'}), **kw)
        conn.commit()
    finally:
        conn.close()
    assert count() == 2, "only the good and the odd event were written"
    row = admin.execute(f'SELECT aggregate_id, payload::text, actor, outbox_id::text FROM "{schema}".outbox '
                        "WHERE operation = 'PUT'").fetchone()
    assert row == (sqlish, '{"name":"Robert\'); DROP TABLE outbox;--","q":"\\"x\\""}', 'o\'neil "the" user', odd.id)
    assert admin.execute(f'SELECT idempotency_key FROM "{schema}".outbox WHERE outbox_id = %s', (good.id,)).fetchone() == ("once",)


def test_duplicate_key_message_names_the_holder_outside_a_transaction(cfg, count):
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        a = outbox.write(conn, config=cfg, **event(aggregate_id="a", idempotency_key="k"))
        with pytest.raises(outbox.DuplicateEvent, match=a.id) as info:
            outbox.write(conn, config=cfg, **event(aggregate_id="b", idempotency_key="k"))
        assert info.value.code == "DUPLICATE" and info.value.status == -4
        assert outbox.write(conn, config=cfg, **event(aggregate_id="b")).seq == 1, "no gap left by the refusal"
    assert count() == 2


def test_aborted_transaction_is_reported(cfg):
    with psycopg.connect(PG_URL) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        with pytest.raises(outbox.TransactionError, match="roll it back"):
            outbox.write(conn, config=cfg, **event())
        conn.rollback()
        outbox.write(conn, config=cfg, **event())
        conn.commit()


def test_closed_and_broken_connections(admin, cfg, count):
    conn = psycopg.connect(PG_URL)
    conn.close()
    with pytest.raises(outbox.ConnectionLost, match="closed"):
        outbox.write(conn, config=cfg, **event())
    conn2 = psycopg2.connect(PG_URL)
    conn2.close()
    with pytest.raises(outbox.ConnectionLost, match="closed"):
        outbox.write(conn2, config=cfg, **event())
    # Broken under the library: the server ends the session.
    with outbox.Db(PG_URL, config=cfg) as db:
        pid = db.execute("SELECT pg_backend_pid()").scalar()
        admin.execute("SELECT pg_terminate_backend(%s::int)", (pid,))
        with pytest.raises(outbox.ConnectionLost):
            db.write(**event())
        with pytest.raises(outbox.ConnectionLost):
            db.write(**event())
        assert db.tx_state == outbox.TxState.UNKNOWN
    with psycopg.connect(PG_URL) as conn3:
        admin.execute("SELECT pg_terminate_backend(%s::int)", (conn3.info.backend_pid,))
        with pytest.raises(outbox.ConnectionLost):
            outbox.write(conn3, config=cfg, **event())
    # A lent connection closed after it was wrapped.
    conn4 = psycopg.connect(PG_URL)
    db4 = outbox.Db.wrap(conn4, config=cfg)
    conn4.close()
    with pytest.raises(outbox.ConnectionLost, match="closed"):
        db4.write(**event())
    db4.close()
    db4.close()
    with pytest.raises(outbox.InvalidArgument, match="closed"):
        db4.write(**event())
    assert count() == 0


def test_unreachable_server_is_a_connection_error_without_password():
    with pytest.raises(outbox.ConnectionLost) as info:
        outbox.Db("postgresql://outbox:topsecret@127.0.0.1:1/outbox?connect_timeout=2")
    assert "topsecret" not in str(info.value) and "cannot connect" in str(info.value)


def test_missing_tables_are_a_schema_error(schema):
    with psycopg.connect(PG_URL) as conn:
        with pytest.raises(outbox.SchemaError, match="never_migrated"):
            outbox.write(conn, config={"outbox.schema": schema, "outbox.table": "never_migrated"}, **event())


def test_hostile_names_and_bad_configuration():
    cfg = outbox.Config()
    with pytest.raises(outbox.InvalidArgument, match="SQL identifier"):
        cfg["outbox.table"] = "outbox; DROP TABLE users; --"
    with pytest.raises(outbox.InvalidArgument):
        cfg["outbox.schema"] = 'public"; --'
    with pytest.raises(outbox.InvalidArgument):
        outbox.Config({"inbox.table": "Robert'); DROP"})
    assert cfg["outbox.table"] == "outbox", "unchanged after a rejected value"
    with pytest.raises(outbox.UnknownKey):
        cfg["no.such"] = 1
    with pytest.raises(outbox.InvalidArgument, match="out of range"):
        cfg["relay.batch_size"] = -5
    with pytest.raises(outbox.InvalidArgument, match="NUL"):
        cfg["amqp.exchange"] = "a\x00b"
    cfg["relay.listen"] = False
    assert cfg["relay.listen"] == "false" and "relay.listen" in cfg and len(cfg) == 1
    cfg["amqp.url"] = "amqp://u:secret@h/"
    assert cfg["amqp.url"] == "***" and "secret" not in repr(cfg)
    cfg["pg.url"] = "postgresql://u:pgsecret@h/db"
    assert "pgsecret" not in repr(cfg) and "'relay.listen': 'false'" in repr(cfg), repr(cfg)
    keys = dict(outbox.config_keys())
    assert "outbox.schema" in keys and len(keys) > 20


def test_purge_refuses_ages_under_the_retention(schema):
    with outbox.Db(PG_URL, config={"outbox.schema": schema}) as db:
        with pytest.raises(outbox.InvalidArgument, match="retention"):
            db.purge_inbox(60)
        assert outbox.purge_inbox(db, 8 * 24 * 3600) == 0


def test_dedupe_bad_arguments(schema):
    with outbox.Db(PG_URL, config={"outbox.schema": schema}) as db:
        with pytest.raises(outbox.InvalidArgument, match="UUID"):
            outbox.dedupe(db, "c", "not-a-uuid")
        with pytest.raises(outbox.InvalidArgument, match="consumer name"):
            outbox.dedupe(db, "", "550e8400-e29b-41d4-a716-446655440000")


def test_hierarchy_and_attributes():
    assert issubclass(outbox.InvalidEvent, ValueError) and issubclass(outbox.TooLarge, outbox.Error)
    assert issubclass(outbox.LibpqMismatch, outbox.InvalidArgument)
    assert not issubclass(outbox.ConnectionLost, ConnectionError)
    assert outbox.ConnectionLost("x").retriable and outbox.Timeout("x").retriable and not outbox.InvalidEvent("x").retriable
    codes = {c.code for c in (outbox.InvalidArgument, outbox.InvalidEvent, outbox.TooLarge, outbox.DuplicateEvent,
                              outbox.DatabaseError, outbox.ConnectionLost, outbox.BrokerError, outbox.Timeout,
                              outbox.SchemaError, outbox.TransactionError, outbox.OutOfMemory, outbox.Stopped,
                              outbox.InternalError, outbox.UnknownKey, outbox.NotFound)}
    assert len(codes) == 15
    with outbox.Db(PG_URL) as db:
        with pytest.raises(outbox.DatabaseError) as info:
            db.execute("SELECT * FROM no_such_table_" + unique(""))
    err = info.value
    assert err.sqlstate == "42P01" and err.code == "DATABASE" and err.status == -5
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is outbox.DatabaseError and again.message == err.message and again.sqlstate == "42P01"


def test_wrong_connection_types():
    with pytest.raises(TypeError, match="render_write"):
        outbox.write(object(), **event())
    with pytest.raises(TypeError):
        outbox.write(PG_URL, **event())


def test_type_errors_carry_a_code_as_in_node():
    # Node's TypeErrors carry code INVALID_ARGUMENT; Python's bare TypeErrors carried none.
    for call in (
        lambda: outbox.write(object(), **event()),
        lambda: outbox.write(PG_URL, **event()),
        lambda: outbox.Config({"outbox.schema": object()}),
        lambda: outbox.render_write(42),
    ):
        with pytest.raises(TypeError) as info:
            call()
        err = info.value
        assert isinstance(err, outbox.ArgumentTypeError) and isinstance(err, outbox.InvalidArgument), repr(err)
        assert err.code == "INVALID_ARGUMENT" and err.status == -1, repr(err)


def test_async_connections_are_refused_with_what_to_use_instead(schema, count):
    import asyncio

    import asyncpg

    async def main():
        aconn = await psycopg.AsyncConnection.connect(PG_URL)
        try:
            await aconn.execute("BEGIN")
            # It raised "TypeError: 'Lock' object does not support the context manager protocol".
            with pytest.raises(outbox.ArgumentTypeError, match="write_async") as info:
                outbox.write(aconn, config={"outbox.schema": schema}, **event())
            assert info.value.code == "INVALID_ARGUMENT" and "AsyncConnection" in str(info.value)
            with pytest.raises(outbox.ArgumentTypeError, match="asyncio"):
                outbox.dedupe(aconn, "c", "0190a5a0-0000-7000-8000-000000000001", config={"outbox.schema": schema})
            await aconn.execute("SELECT 1")  # its transaction is untouched
        finally:
            await aconn.close()
        apg = await asyncpg.connect(PG_URL)
        try:
            with pytest.raises(outbox.ArgumentTypeError, match="write_async"):
                outbox.write(apg, config={"outbox.schema": schema}, **event())
        finally:
            await apg.close()

    asyncio.run(main())
    assert count() == 0


def test_nul_in_other_strings_is_refused_not_truncated(schema):
    with outbox.Db(PG_URL, config={"outbox.schema": schema}) as db:
        with pytest.raises(outbox.InvalidArgument, match="NUL"):
            db.execute("SELECT $1::text", ["a\x00b"])
        with pytest.raises(outbox.InvalidArgument, match="NUL"):
            db.execute("SELECT 1\x00; DROP TABLE x")
        with pytest.raises(outbox.InvalidArgument, match="NUL"):
            outbox.dedupe(db, "sub\x00x", "550e8400-e29b-41d4-a716-446655440000")
    with pytest.raises(outbox.InvalidArgument, match="NUL"):
        outbox.Consumer("name\x00evil")
