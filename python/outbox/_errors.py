"""The exception hierarchy: one class per C status (``outbox_status``), its number read from the library."""

from __future__ import annotations

from typing import Dict, Optional, Type

from . import _native

class Error(Exception):
    """Base class of every error the outbox library reports: ``message`` (the library's), ``code`` (the
    status name, e.g. ``"INVALID_EVENT"``), ``status`` (its number), ``sqlstate`` (PostgreSQL's) and
    ``retriable`` (the same call may succeed later: ``outbox_status_retriable``)."""
    code: str = "INTERNAL"
    status: int = _native.STATUS["INTERNAL"]

    def __init__(self, message: str, *, code: Optional[str] = None, status: Optional[int] = None,
                 sqlstate: Optional[str] = None) -> None:
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

    def __reduce__(self):  # type: ignore[no-untyped-def]  # picklable across processes
        return (_rebuild, (type(self), self.message, self.code, self.status, self.sqlstate))

def _rebuild(cls, message, code, status, sqlstate):  # type: ignore[no-untyped-def]
    return cls(message, code=code, status=status, sqlstate=sqlstate)

class InvalidArgument(Error, ValueError): """A missing or malformed argument or configuration value, a closed handle."""
class InvalidEvent(Error, ValueError): """A missing field, invalid JSON, an unknown operation, a NUL byte or invalid UTF-8."""
class TooLarge(Error, ValueError): """The payload (or previous payload, metadata) is over ``event.max_payload_bytes``."""
class DuplicateEvent(Error): """The idempotency key is already used (the caller's transaction stays usable)."""
class DatabaseError(Error): """PostgreSQL reported an error (``sqlstate`` says which)."""
class ConnectionLost(Error): """A PostgreSQL or RabbitMQ connection is closed, broken or unreachable (not an OSError)."""
class BrokerError(Error): """RabbitMQ reported an error (a channel or connection closed by the broker)."""
class Timeout(Error): """A bounded wait ran out (e.g. no publisher confirm in time)."""
class SchemaError(Error): """The tables are missing (run ``outbox.migrate``), or newer than this library knows."""
class TransactionError(Error): """The transaction is aborted (roll it back) or in the wrong state."""
class OutOfMemory(Error, MemoryError): """The library could not allocate memory."""
class Stopped(Error): """Interrupted by a stop request (``Relay.stop()``, ``Consumer.stop()``)."""
class InternalError(Error): """A bug in the library; please report it with the message."""
class UnknownKey(Error, KeyError): """An unknown configuration key or event field."""
class NotFound(Error, LookupError): """Nothing at that index or name."""
class ArgumentTypeError(InvalidArgument, TypeError): """INVALID_ARGUMENT for a value of the wrong type (a TypeError too)."""
class LibpqMismatch(InvalidArgument): """Deprecated, never raised: connections are no longer lent (kept for imports)."""
class PermanentFailure(Exception): """Raise it from a handler for an event that can never succeed: its aggregate is parked at once."""

# Each class's status name (outbox_status_name); its number comes from the library.
_CODES: Dict[Type[Error], str] = {
    InvalidArgument: "INVALID_ARGUMENT", InvalidEvent: "INVALID_EVENT", TooLarge: "TOO_LARGE",
    DuplicateEvent: "DUPLICATE", DatabaseError: "DATABASE", ConnectionLost: "CONNECTION", BrokerError: "BROKER",
    Timeout: "TIMEOUT", SchemaError: "SCHEMA", TransactionError: "TRANSACTION", OutOfMemory: "NO_MEMORY",
    Stopped: "STOPPED", InternalError: "INTERNAL", UnknownKey: "UNKNOWN_KEY", NotFound: "NOT_FOUND",
}
for _cls, _code in _CODES.items():
    _cls.code, _cls.status = _code, _native.STATUS[_code]
BY_STATUS: Dict[int, Type[Error]] = {cls.status: cls for cls in _CODES}
_native._set_error_classes(dict(BY_STATUS))  # the native layer raises these

def error_class(status: int) -> Type[Error]:  # Error for an unknown status
    return BY_STATUS.get(status, Error)
