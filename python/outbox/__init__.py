"""outbox: the transactional outbox for PostgreSQL and RabbitMQ, from Python.

Write an event in the same transaction as your business rows; the relay publishes what was
committed (publisher confirms); subscribers handle each event exactly once in their transaction::

    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (42, 99.5))
        outbox.write(conn, aggregate_type="ORD", aggregate_id="42", operation="POST", payload={"id": 42})

    with outbox.Relay() as relay:            # OUTBOX_PG_URL / OUTBOX_AMQP_URL
        relay.run()                          # until stop() or Ctrl-C

    with outbox.Consumer("analytics-writer") as consumer, psycopg.connect(url) as conn:
        consumer.run(handle, conn)           # handle(event, conn), in the inbox row's transaction

One C++ implementation (liboutbox, through its C API) does the work for C, PHP, Python and Node;
see python/README.md.
"""

from __future__ import annotations

from . import _native
from ._errors import BY_STATUS

_native._set_error_classes(dict(BY_STATUS))  # before anything can fail

from ._config import Config, config_keys  # noqa: E402
from ._consumer import AsyncHandler, Consumer, Handler, consume_async  # noqa: E402
from ._db import Db, Rows, TxState, dedupe, dedupe_async, migrate, purge_inbox, write, write_async  # noqa: E402
from ._errors import (  # noqa: E402
    ArgumentTypeError, BrokerError, ConnectionLost, DatabaseError, DuplicateEvent, Error, InternalError,
    InvalidArgument, InvalidEvent, LibpqMismatch, NotFound, OutOfMemory, SchemaError, Stopped, Timeout, TooLarge,
    TransactionError, UnknownKey,
)
from ._events import Event, EventFields, Operation, OperationName, Statement, Written, render_dedupe, render_write  # noqa: E402,E501
from ._message import DedupeResult, Message, Order  # noqa: E402
from ._relay import Relay, RelayStats  # noqa: E402

__version__ = "0.1.0"


def library_version() -> str:
    """The version of the liboutbox C library inside this package (``outbox_version()``)."""
    return str(_native.version())


def libpq_version() -> int:
    """The libpq version this package uses (``PQlibVersion()``, e.g. 150018 for 15.18)."""
    return int(_native.libpq_version())


__all__ = [
    "__version__", "library_version", "libpq_version",
    # writing
    "write", "write_async", "Event", "EventFields", "Operation", "OperationName", "Written", "render_write",
    "Statement",
    # connections and schema
    "Db", "TxState", "Rows", "migrate", "Config", "config_keys",
    # relay
    "Relay", "RelayStats",
    # consumers
    "Consumer", "Message", "Handler", "dedupe", "dedupe_async", "consume_async", "AsyncHandler", "render_dedupe",
    "DedupeResult", "Order", "purge_inbox",
    # errors
    "Error", "InvalidArgument", "ArgumentTypeError", "InvalidEvent", "TooLarge", "DuplicateEvent", "DatabaseError",
    "ConnectionLost", "BrokerError", "Timeout", "SchemaError", "TransactionError", "OutOfMemory", "Stopped",
    "InternalError", "UnknownKey", "NotFound", "LibpqMismatch",
]
