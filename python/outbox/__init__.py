"""outbox: the transactional outbox for PostgreSQL and RabbitMQ, from Python.

Write an event in the same transaction as your business rows; the relay publishes what was
committed to RabbitMQ (publisher confirms), and subscribers handle each event exactly once in
their own transaction::

    import outbox, psycopg

    with psycopg.connect(url) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (42, 99.5))
            outbox.write(conn, aggregate_type="ORD", aggregate_id="42", operation="POST",
                         payload={"id": 42, "total": 99.5})

    with outbox.Relay() as relay:            # OUTBOX_PG_URL / OUTBOX_AMQP_URL
        relay.run()                          # until stop() or Ctrl-C

    def handle(event, conn):                 # conn: your psycopg connection, in the transaction
        conn.execute("INSERT INTO analytics (event_id) VALUES (%s)", (event.id,))

    with outbox.Consumer("analytics-writer") as consumer, psycopg.connect(url) as conn:
        consumer.run(handle, conn)

One C++ implementation (liboutbox, through its C API) does the work for C, PHP, Python and Node.
Drivers: any psycopg 3 or psycopg2 connection (binary wheels included), a SQLAlchemy ``Session``
or ``Connection``; ``await write_async(...)`` on asyncpg and psycopg's ``AsyncConnection``.
"""

from __future__ import annotations

from . import _native
from ._errors import _BY_STATUS

# Install the exception classes before anything can fail.
_native._set_error_classes(dict(_BY_STATUS))

from ._config import Config, config_keys  # noqa: E402
from ._consumer import Consumer, Handler, Message  # noqa: E402
from ._db import (  # noqa: E402
    Db,
    DedupeResult,
    Order,
    Rows,
    TxState,
    dedupe,
    migrate,
    purge_inbox,
    write,
)
from ._errors import (  # noqa: E402
    ArgumentTypeError,
    BrokerError,
    ConnectionLost,
    DatabaseError,
    DuplicateEvent,
    Error,
    InternalError,
    InvalidArgument,
    InvalidEvent,
    LibpqMismatch,
    NotFound,
    OutOfMemory,
    SchemaError,
    Stopped,
    Timeout,
    TooLarge,
    TransactionError,
    UnknownKey,
)
from ._events import (  # noqa: E402
    Event,
    EventFields,
    Operation,
    OperationName,
    Statement,
    Written,
    render_dedupe,
    render_write,
)
from ._aio import AsyncHandler, consume_async, dedupe_async, write_async  # noqa: E402
from ._relay import Relay, RelayStats  # noqa: E402

__version__ = "0.1.0"


def library_version() -> str:
    """The version of the liboutbox C library inside this package (``outbox_version()``)."""
    return str(_native.version())


def libpq_version() -> int:
    """The libpq version this package uses (``PQlibVersion()``, e.g. 150018 for 15.18)."""
    return int(_native.libpq_version())


__all__ = [
    "__version__",
    "library_version",
    "libpq_version",
    # writing
    "write",
    "write_async",
    "Event",
    "EventFields",
    "Operation",
    "OperationName",
    "Written",
    "render_write",
    "Statement",
    # connections and schema
    "Db",
    "TxState",
    "Rows",
    "migrate",
    "Config",
    "config_keys",
    # relay
    "Relay",
    "RelayStats",
    # consumers
    "Consumer",
    "Message",
    "Handler",
    "dedupe",
    "dedupe_async",
    "consume_async",
    "AsyncHandler",
    "render_dedupe",
    "DedupeResult",
    "Order",
    "purge_inbox",
    # errors
    "Error",
    "InvalidArgument",
    "ArgumentTypeError",
    "InvalidEvent",
    "TooLarge",
    "DuplicateEvent",
    "DatabaseError",
    "ConnectionLost",
    "BrokerError",
    "Timeout",
    "SchemaError",
    "TransactionError",
    "OutOfMemory",
    "Stopped",
    "InternalError",
    "UnknownKey",
    "NotFound",
    "LibpqMismatch",
]
