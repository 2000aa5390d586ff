"""The park-and-redrive scenario each Python consumer path runs (test_park.py, drivers/test_drivers.py):
consumer.on_failure=park (the default), aggregate a failing transiently, b's first event permanently,
c healthy. c flows; a is parked after consumer.max_attempts, b at once; their later events wait behind
the head. After the fix, a redrive applies a's held events in seq order; a skip (by, reason) lets b's
next event through; nothing is left parked."""

from __future__ import annotations

from typing import Any, Callable, Dict

import psycopg
import pytest
from conftest import PG_URL, event

import outbox

FAST = {"consumer.max_attempts": 2, "consumer.retry_initial_ms": 20, "consumer.retry_poll_ms": 20}


def publish(admin: psycopg.Connection, schema: str, cfg: outbox.Config, name: str):
    """The applied table, the consumer's queue, and a1 a2 b1 b2 c1 c2 published; (consumer, ids)."""
    admin.execute(f'CREATE TABLE "{schema}".applied (n bigserial PRIMARY KEY, aggregate_id text NOT NULL, seq int)')
    assert cfg["consumer.on_failure"] == "park", "the default"
    for k, v in FAST.items():
        cfg[k] = v
    consumer = outbox.Consumer(name, cfg)
    consumer.connect()
    ids: Dict[str, str] = {}
    with psycopg.connect(PG_URL) as conn:
        for agg in "abc":
            for i in (1, 2):
                ids[f"{agg}{i}"] = outbox.write(conn, config=cfg, **event(aggregate_type="ORD", aggregate_id=agg,
                                                                         payload={"i": i})).id
        conn.commit()
    with outbox.Relay(cfg) as relay:
        assert relay.drain().published == 6
    return consumer, ids


class Failing:
    """What the handlers share: a's events fail (RuntimeError) while ``broken``; b's first can never succeed."""

    def __init__(self) -> None:
        self.broken = True
        self.calls = {"a": 0, "b": 0, "c": 0}

    def check(self, msg: outbox.Message) -> None:
        self.calls[msg.aggregate_id] += 1
        if msg.aggregate_id == "a" and self.broken:
            raise RuntimeError("the ledger is down")
        if msg.aggregate_id == "b" and msg.seq == 1:
            raise outbox.PermanentFailure("the order is malformed")


def run_scenario(admin: psycopg.Connection, schema: str, cfg: outbox.Config, consumer: outbox.Consumer,
                 ids: Dict[str, str], failing: Failing, run: Callable[[float], Any]) -> None:
    """``run(idle_timeout)``: one run of the consumer's loop with a handler that calls ``failing.check``,
    then inserts (aggregate_id, seq) into applied in the handler's transaction; returns the count."""
    name = consumer.name

    def applied():
        return [r[0] for r in admin.execute(f'SELECT aggregate_id || seq FROM "{schema}".applied ORDER BY n')]

    assert run(1.5) == 2
    assert applied() == ["c1", "c2"], "c flows; nothing of a parked aggregate before its head"
    assert failing.calls == {"a": 2, "b": 1, "c": 2}, "a: consumer.max_attempts tries; b: one (permanent)"
    with outbox.Db(PG_URL, config=cfg) as db:
        rows = {r["aggregate_id"]: r for r in outbox.parked(db, name)}
        assert set(rows) == {"a", "b"}, rows
        a, b = rows["a"], rows["b"]
        assert (a["state"], a["attempts"], a["waiting"], a["head_event_id"], a["head_seq"], a["consumer"]) == \
            ("parked", 2, 1, ids["a1"], 1, name), a
        assert a["last_error"] == "RuntimeError: the ledger is down", a
        assert (b["state"], b["attempts"], b["waiting"], b["head_event_id"]) == ("parked", 1, 1, ids["b1"]), b
        assert b["last_error"] == "PermanentFailure: the order is malformed", b
        assert {r["aggregate_id"] for r in outbox.parked(PG_URL, consumer, include_relay=False, config=cfg)} == {"a", "b"}
        assert outbox.parked(db, "nobody") == []
        metrics = outbox.metrics_text(db)  # what a consumer process serves on its own /metrics
        assert f'outbox_parked_aggregates{{subscriber="{name}"}} 2\n' in metrics, metrics
        assert "# TYPE outbox_subscriber_lag_seconds gauge" in metrics and "outbox_oldest_unpublished_age_seconds " in metrics

        failing.broken = False  # the cause fixed: a's head and its held event, in order
        assert outbox.redrive(db, consumer, "ORD", "a") == 1
        assert outbox.redrive(db, name, "ORD", "c") == 0, "not held"
        run(1.0)
        assert applied() == ["c1", "c2", "a1", "a2"]

        with pytest.raises(outbox.NotFound):  # the head is b1: what the operator saw must be it
            outbox.skip(db, name, "ORD", "b", by="ops", reason="wrong one", event_id=ids["b2"])
        assert outbox.skip(db, name, "ORD", "b", by="ops@example", reason="malformed, fixed by hand",
                           event_id=ids["b1"]) == ids["b1"]
        run(1.0)
        assert applied() == ["c1", "c2", "a1", "a2", "b2"], "b's head skipped, never applied; the rest goes through"
        assert outbox.parked(db, name) == [] and outbox.redrive_all(db, name) == 0
        with pytest.raises(outbox.NotFound):
            outbox.skip(db, name, "ORD", "b", by="ops")
    skipped = admin.execute(f'SELECT outbox_id::text, skipped_by, reason FROM "{schema}".outbox_inbox_skipped').fetchall()
    assert skipped == [(ids["b1"], "ops@example", "malformed, fixed by hand")]
