"""outbox: the transactional outbox for PostgreSQL and RabbitMQ. ``outbox.write(conn, ...)`` stores an event in your
transaction; ``outbox.Relay().run()`` publishes what was committed; ``outbox.Consumer(name).run(handler, conn)`` handles
each event exactly once in your transaction. One C++ library (liboutbox) does the work for C, PHP, Python and Node."""

from __future__ import annotations

from . import _native
from ._config import Config, config_keys
from ._db import Db, Rows, TxState, dedupe, dedupe_async, migrate, purge_inbox, write, write_async
from ._db import metrics_text, parked, redrive, redrive_all, skip
from ._errors import (
    ArgumentTypeError, BrokerError, ConnectionLost, DatabaseError, DuplicateEvent, Error, InternalError,
    InvalidArgument, InvalidEvent, LibpqMismatch, NotFound, OutOfMemory, PermanentFailure, SchemaError, Stopped,
    Timeout, TooLarge, TransactionError, UnknownKey,
)
from ._events import (
    DedupeResult, Event, EventFields, Message, Operation, OperationName, Order, Statement, Written, render_dedupe,
    render_write,
)
from ._handles import AsyncHandler, Consumer, Handler, Relay, RelayStats, consume_async

__version__ = "0.1.0"

def library_version() -> str:
    """The version of the liboutbox C library inside this package (``outbox_version()``)."""
    return str(_native.version())

def libpq_version() -> int:
    """The libpq version this package uses (``PQlibVersion()``, e.g. 150018 for 15.18)."""
    return int(_native.libpq_version())

__all__ = [  # writing; connections and schema; relay; consumers; errors
    "__version__", "library_version", "libpq_version", "write", "write_async", "Event", "EventFields", "Operation",
    "OperationName", "Written", "render_write", "Statement", "Db", "TxState", "Rows", "migrate", "Config", "config_keys",
    "Relay", "RelayStats", "Consumer", "Message", "Handler", "dedupe", "dedupe_async", "consume_async", "AsyncHandler",
    "render_dedupe", "DedupeResult", "Order", "purge_inbox", "PermanentFailure", "parked", "redrive", "redrive_all",
    "skip", "metrics_text",
    "Error", "InvalidArgument", "ArgumentTypeError", "InvalidEvent", "TooLarge", "DuplicateEvent", "DatabaseError",
    "ConnectionLost", "BrokerError", "Timeout", "SchemaError", "TransactionError", "OutOfMemory", "Stopped",
    "InternalError", "UnknownKey", "NotFound", "LibpqMismatch",
]
