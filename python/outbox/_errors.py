"""The exception hierarchy: one class per C status code (``outbox_status`` in outbox.h)."""

from __future__ import annotations

from typing import Dict, Optional, Type

from . import _native

__all__ = [
    "Error",
    "InvalidArgument",
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
    "ArgumentTypeError",
]


class Error(Exception):
    """Base class of every error the outbox library reports.

    Attributes:
        message: the library's message (``outbox_last_error()`` for errors from the C library).
        code: the stable status name, e.g. ``"INVALID_EVENT"`` (``outbox_status_name()``).
        status: the numeric C status, e.g. ``-2``.
        sqlstate: PostgreSQL's SQLSTATE when the server reported the error (``Db.execute``), else None.
        retriable: True when the same call may succeed later (a server was unreachable or
            dropped the connection, a bounded wait ran out); False for bad input. The library's
            answer (``outbox_status_retriable``), the same in every language.
    """

    code: str = "INTERNAL"
    status: int = _native.STATUS["INTERNAL"]

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: Optional[int] = None,
        sqlstate: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.sqlstate = sqlstate

    @property
    def retriable(self) -> bool:
        return bool(_native.status_retriable(self.status))

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r})"

    def __reduce__(self):  # picklable across processes (multiprocessing, concurrent.futures)
        return (_rebuild, (type(self), self.message, self.code, self.status, self.sqlstate))


def _rebuild(cls, message, code, status, sqlstate):  # type: ignore[no-untyped-def]
    return cls(message, code=code, status=status, sqlstate=sqlstate)


class InvalidArgument(Error, ValueError):
    """INVALID_ARGUMENT: a missing or malformed argument or configuration value (also a
    hostile table name, a purge younger than the inbox retention, a closed handle)."""

    code = "INVALID_ARGUMENT"


class InvalidEvent(Error, ValueError):
    """INVALID_EVENT: a missing field, invalid JSON, an unknown operation, a NUL byte or invalid UTF-8."""

    code = "INVALID_EVENT"


class TooLarge(Error, ValueError):
    """TOO_LARGE: the payload (or previous payload, metadata) is over ``event.max_payload_bytes``."""

    code = "TOO_LARGE"


class DuplicateEvent(Error):
    """DUPLICATE: the idempotency key is already used (the caller's transaction stays usable)."""

    code = "DUPLICATE"


class DatabaseError(Error):
    """DATABASE: PostgreSQL reported an error (see ``sqlstate`` when it is known)."""

    code = "DATABASE"


class ConnectionLost(Error):
    """CONNECTION: a PostgreSQL or RabbitMQ connection is closed, broken or unreachable.

    Not a subclass of the built-in ``ConnectionError`` (an ``OSError``), whose constructor
    interprets its arguments as an errno."""

    code = "CONNECTION"


class BrokerError(Error):
    """BROKER: RabbitMQ reported an error (a channel or connection was closed by the broker)."""

    code = "BROKER"


class Timeout(Error):
    """TIMEOUT: a bounded wait ran out (e.g. no publisher confirm in time)."""

    code = "TIMEOUT"


class SchemaError(Error):
    """SCHEMA: the tables are missing (run ``outbox.migrate``), or newer than this library knows."""

    code = "SCHEMA"


class TransactionError(Error):
    """TRANSACTION: the transaction is aborted (roll it back) or in the wrong state."""

    code = "TRANSACTION"


class OutOfMemory(Error, MemoryError):
    """NO_MEMORY: the library could not allocate memory."""

    code = "NO_MEMORY"


class Stopped(Error):
    """STOPPED: interrupted by a stop request (``Relay.stop()``, ``Consumer.stop()``)."""

    code = "STOPPED"


class InternalError(Error):
    """INTERNAL: a bug in the library; please report it with the message."""

    code = "INTERNAL"


class UnknownKey(Error, KeyError):
    """UNKNOWN_KEY: an unknown configuration key or event field."""

    code = "UNKNOWN_KEY"


class NotFound(Error, LookupError):
    """NOT_FOUND: nothing at that index or name."""

    code = "NOT_FOUND"


class ArgumentTypeError(InvalidArgument, TypeError):
    """INVALID_ARGUMENT for a value of the wrong type (a pool or an async connection where a
    connection is lent, a number where a string goes): a ``TypeError`` too, so ``except TypeError``
    keeps working, and it carries ``code`` like every other error (Node's TypeErrors do too)."""


class LibpqMismatch(InvalidArgument):
    """A driver connection cannot be lent: the driver uses a different libpq than this module.

    A ``PGconn *`` belongs to the libpq copy that made it. ``psycopg[binary]`` and
    ``psycopg2-binary`` wheels bundle their own libpq; passing their connection to this
    module's libpq would be undefined behaviour, so it is refused. Install the pure ``psycopg``
    (it loads the system libpq) or ``psycopg2`` built from source (``pip install psycopg2``),
    or use ``outbox.render_write()`` and run the statement with your driver."""


_CLASSES = (
        InvalidArgument,
        InvalidEvent,
        TooLarge,
        DuplicateEvent,
        DatabaseError,
        ConnectionLost,
        BrokerError,
        Timeout,
        SchemaError,
        TransactionError,
        OutOfMemory,
        Stopped,
        InternalError,
        UnknownKey,
        NotFound,
)
for _cls in _CLASSES:  # each status number from the library (outbox.h), by the class's code
    _cls.status = _native.STATUS[_cls.code]
_BY_STATUS: Dict[int, Type[Error]] = {cls.status: cls for cls in _CLASSES}


def error_class(status: int) -> Type[Error]:
    """The exception class for a C status code (``Error`` for an unknown one)."""
    return _BY_STATUS.get(status, Error)
