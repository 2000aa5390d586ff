"""Fixtures for the Python suite: real PostgreSQL and RabbitMQ (OUTBOX_PG_URL / OUTBOX_AMQP_URL),
a fresh schema and unique exchange/queue names per test, everything removed afterwards.

A test that cannot reach a service fails; nothing here skips."""

from __future__ import annotations

import os
import pathlib
import subprocess
import threading
import time
import uuid
from typing import Callable, Iterator, List

import pika
import psycopg
import pytest

import outbox

PG_URL = os.environ.get("OUTBOX_PG_URL") or "postgresql://outbox:outbox@127.0.0.1:54329/outbox"
AMQP_URL = os.environ.get("OUTBOX_AMQP_URL") or "amqp://outbox:outbox@127.0.0.1:56729/%2f"
REPO = pathlib.Path(__file__).resolve().parents[2]

# The libraries read the same variables (outbox.Relay(), Consumer(), Db() default to them).
os.environ["OUTBOX_PG_URL"] = PG_URL
os.environ["OUTBOX_AMQP_URL"] = AMQP_URL


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


@pytest.fixture
def pg_url() -> str:
    return PG_URL


@pytest.fixture
def amqp_url() -> str:
    return AMQP_URL


@pytest.fixture
def admin() -> Iterator[psycopg.Connection]:
    """An autocommit psycopg connection for checking what the library did."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        yield conn


class Amqp:
    """A pika connection for what the C API does not do: reading a dead-letter queue, publishing
    a duplicate, and deleting a test's queues and exchanges afterwards."""

    def __init__(self) -> None:
        params = pika.URLParameters(AMQP_URL)
        params.blocked_connection_timeout = 10
        self.conn = pika.BlockingConnection(params)
        self.ch = self.conn.channel()
        self.queues: List[str] = []
        self.exchanges: List[str] = []

    def consumer_topology(self, queue: str) -> None:
        self.queues += [queue, f"{queue}.dead"]
        self.exchanges.append(f"{queue}.dlx")

    def get_all(self, queue: str, expected: int, timeout: float = 10.0) -> list:
        """Reads (and acks) messages until `expected` came or the timeout ran out."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            method, props, body = self.ch.basic_get(queue, auto_ack=True)
            if method is None:
                time.sleep(0.05)
                continue
            out.append((props, body))
        return out

    def close(self) -> None:
        for q in self.queues:
            try:
                self.ch.queue_delete(q)
            except Exception:
                self.ch = self.conn.channel()
        for e in self.exchanges:
            try:
                self.ch.exchange_delete(e)
            except Exception:
                self.ch = self.conn.channel()
        self.conn.close()


@pytest.fixture
def amqp() -> Iterator[Amqp]:
    a = Amqp()
    try:
        yield a
    finally:
        a.close()


@pytest.fixture
def schema(admin: psycopg.Connection) -> Iterator[str]:
    """A fresh, migrated schema (outbox and inbox tables), dropped afterwards."""
    name = unique("py_t_")
    assert outbox.migrate(PG_URL, config={"outbox.schema": name}) == 2
    try:
        yield name
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def cfg(schema: str, amqp: Amqp) -> outbox.Config:
    """The test's configuration: its schema, its own exchange (deleted afterwards), fast retries."""
    exchange = unique("py.test.")
    amqp.exchanges.append(exchange)
    return outbox.Config(
        {
            "outbox.schema": schema,
            "amqp.exchange": exchange,
            "event.type_map": "PRD=Product,ORD=Order",
            "relay.backoff_base_ms": 50,
            "relay.poll_interval_ms": 100,
        }
    )


@pytest.fixture
def consumer_name(amqp: Amqp) -> str:
    name = unique("py-consumer-")
    amqp.consumer_topology(name)
    return name


@pytest.fixture
def count(admin: psycopg.Connection, schema: str) -> Callable[..., int]:
    def count(where: str = "true", table: str = "outbox") -> int:
        return admin.execute(f'SELECT count(*) FROM "{schema}"."{table}" WHERE {where}').fetchone()[0]

    return count


def event(**kw):
    """A valid event's fields (the documents' ProductCreated), overridable."""
    base = dict(
        aggregate_type="PRD",
        aggregate_id="123",
        operation="POST",
        payload={"PRD_ID": "123", "XPRD01": "Widget Pro", "XPRD02": 99.99},
    )
    base.update(kw)
    return base


def eventually(pred: Callable[[], bool], timeout: float = 10.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def later(seconds: float, fn: Callable[[], object]) -> threading.Timer:
    t = threading.Timer(seconds, fn)
    t.daemon = True
    t.start()
    return t


_CLOSE = pathlib.Path(__file__).resolve().parents[2] / "tests" / "support" / "close_amqp_connections.sh"


def close_consumer_connections(name: str) -> None:
    """Closes the broker connections of consumer `name` (only those: tests run side by side), as a
    node restart or an operator would."""
    out = subprocess.run([str(_CLOSE), f"outbox-consumer {name}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"no connection of consumer {name} was closed: {out.stdout}{out.stderr}"
