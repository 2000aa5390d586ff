"""Events: written (the dataclass, its fields as the library takes them, rendered statements) and delivered."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import json
import uuid
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any, Dict, Literal, Mapping, NamedTuple, Optional, Tuple, TypedDict, TypeVar, Union

from . import _native
from ._config import ConfigLike, native_config
from ._errors import ArgumentTypeError, InvalidArgument, InvalidEvent, UnknownKey

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._handles import Consumer

JSONValue = Any  # a JSON-serialisable Python object, or JSON text (str/bytes) passed through

class Operation(str, enum.Enum):
    """The operations of the documents' convention, and the event names they give."""
    POST = "POST"  #: ``{Name}Created``
    PUT = "PUT"  #: ``{Name}Updated``
    PATCH = "PATCH"  #: ``{Name}Updated``
    DELETE = "DELETE"  #: ``{Name}Deleted``
    FORCE_DELETE = "FORCE_DELETE"  #: ``{Name}ForceDeleted`` (stored as DELETE)

    def __str__(self) -> str:
        return self.value

#: An operation by name: ``mypy --strict`` refuses any other string (``"POSTT"``).
OperationName = Literal["POST", "PUT", "PATCH", "DELETE", "FORCE_DELETE"]

class EventFields(TypedDict, total=False):
    """The event's fields as keywords: a type checker refuses a misspelt field or operation."""
    aggregate_type: str
    aggregate_id: Union[str, int]
    operation: Union[OperationName, Operation]
    payload: JSONValue
    previous_payload: JSONValue
    metadata: JSONValue
    user: Optional[str]
    event_type: Optional[str]
    idempotency_key: Optional[str]
    event_id: Optional[Union[str, uuid.UUID]]
    force_delete: bool

@dataclasses.dataclass
class Event:
    """An event to write, the documents' outbox row: ``payload``, ``previous_payload`` and
    ``metadata`` as Python objects (serialised once) or JSON text (passed through); ``event_type``
    from the documents' naming (``POST`` -> ``{Name}Created``...) and ``event_id`` a UUIDv7 by default."""
    aggregate_type: str
    aggregate_id: Union[str, int]
    operation: Union[OperationName, Operation]
    payload: JSONValue
    previous_payload: JSONValue = None
    metadata: JSONValue = None
    user: Optional[str] = None
    event_type: Optional[str] = None
    idempotency_key: Optional[str] = None
    event_id: Optional[Union[str, uuid.UUID]] = None
    force_delete: bool = False

class Written(NamedTuple):
    """What a write stored: the event's id (UUID text), its type and its per-aggregate sequence."""
    id: str
    event_type: str
    seq: int

@dataclasses.dataclass(frozen=True)
class Statement:
    """A rendered statement for your own driver: ``sql`` in the placeholder style asked for,
    ``params`` a tuple (a dict for the named styles) of text; a write's returns the event's ``seq``."""
    sql: str
    params: Union[Tuple[Optional[str], ...], Dict[str, Optional[str]]]
    event_id: Optional[str] = None
    event_type: Optional[str] = None

    def __iter__(self):  # type: ignore[no-untyped-def]
        """``sql, params = statement`` unpacks, for ``cursor.execute(*statement)``."""
        return iter((self.sql, self.params))

def _json_default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, (_dt.datetime, _dt.date, _dt.time)):
        return o.isoformat()
    if isinstance(o, (uuid.UUID, enum.Enum, set, frozenset)):
        return o.value if isinstance(o, enum.Enum) else str(o) if isinstance(o, uuid.UUID) else list(o)
    raise ArgumentTypeError(f"Object of type {type(o).__name__} is not JSON serializable "
                            "(convert it first, e.g. str(decimal) or float(decimal), or pass JSON text)")

# The C encoder made once (json.dumps makes one per call), else the pure one: the same text.
_encode = (c_make_encoder(None, _json_default, encode_basestring, None, ":", ",", False, False, True) if c_make_encoder
           else json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_json_default).iterencode)

def _json(field: str, value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent(f"{field} is not valid UTF-8: {exc}") from None
    try:
        return "".join(_encode(value, 0))
    except RecursionError:
        raise InvalidEvent(f"{field} is not JSON-serialisable: Circular reference detected") from None
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"{field} is not JSON-serialisable: {exc}") from None

def _text(field: str, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (enum.Enum, int, uuid.UUID)):
        return str(value.value if isinstance(value, enum.Enum) else value)
    raise ArgumentTypeError(f"{field} must be a str, not {type(value).__name__}")

# The fields in the library's order (outbox_event_field), each with its kind's conversion; the
# native layer takes them as one tuple (str passes as it is).
_CONVERT = {_native.FIELD_TEXT: _text, _native.FIELD_JSON: _json, _native.FIELD_FLAG: lambda f, v: True if v else None}
_FIELDS = tuple((name, _CONVERT[kind]) for name, kind in _native.event_fields())
_NAMES = frozenset(name for name, _ in _FIELDS)

def event_fields(event: Any, overrides: Mapping[str, Any]) -> Tuple[Any, ...]:
    """The native field tuple from an Event, any dataclass or mapping, and keyword arguments."""
    values: Mapping[str, Any] = overrides
    if event is not None:
        if dataclasses.is_dataclass(event) and not isinstance(event, type):
            values = {f.name: getattr(event, f.name) for f in dataclasses.fields(event) if f.name in _NAMES}
        elif isinstance(event, Mapping):
            values = dict(event)
        else:
            raise ArgumentTypeError(f"event must be an outbox.Event, a dataclass or a mapping, not {type(event).__name__}")
        values.update(overrides)  # type: ignore[attr-defined]
    if not _NAMES.issuperset(values):
        bad = sorted(set(values) - _NAMES)[0]
        raise UnknownKey(f"unknown event field {bad!r} (fields: {', '.join(n for n, _ in _FIELDS)})")
    get = values.get
    return tuple([v if (v := get(n)) is None or v.__class__ is str else conv(n, v) for n, conv in _FIELDS])

def render_write(event: Any = None, /, *, config: ConfigLike = None, placeholders: Optional[str] = None,
                 **fields: Unpack[EventFields]) -> Statement:
    """Renders the exact INSERT ``outbox.write()`` would run, for a driver of your own, in your transaction;
    ``placeholders``: ``"dollar"`` ($1, the default), ``"qmark"``, ``"format"``, ``"named"`` or ``"pyformat"``."""
    sql, params, event_id, event_type = _native.render_write(native_config(config, placeholders),
                                                             event_fields(event, fields))
    return Statement(sql, params, event_id, event_type)

def render_dedupe(consumer: str, event_id: Union[str, uuid.UUID], aggregate_type: Optional[str] = None,
                  aggregate_id: Optional[str] = None, seq: int = 0, *, config: ConfigLike = None,
                  placeholders: Optional[str] = None) -> Statement:
    """Renders the inbox statement ``outbox.dedupe()`` runs, for a driver of your own: run it first
    in the handler's transaction; it returns ``first_time`` (boolean) and ``previous_seq``."""
    sql, params = _native.render_dedupe(native_config(config, placeholders), str(consumer), str(event_id),
                                        aggregate_type, None if aggregate_id is None else str(aggregate_id),
                                        int(seq or 0))
    return Statement(sql, params)

class Order(enum.IntEnum):
    """Order of an event within its aggregate, as a consumer saw it (``outbox_order``)."""
    UNCHECKED = _native.ORDER_UNCHECKED  #: a duplicate, no sequence, or inbox.order_check=false
    IN_ORDER = _native.ORDER_IN_ORDER  #: the next sequence number of its aggregate
    STALE = _native.ORDER_STALE  #: a later (or equal) sequence of its aggregate was already processed
    GAP = _native.ORDER_GAP  #: earlier sequence numbers of its aggregate were never processed

@dataclasses.dataclass(frozen=True)
class DedupeResult:
    """What ``dedupe`` found: ``first_time`` False means already processed: skip the event."""
    first_time: bool
    order: Order = Order.UNCHECKED
    previous_seq: int = 0

def _parsed(text: str) -> Any:  # a cached property: the JSON text attribute ``text``, parsed
    return functools.cached_property(lambda self: None if getattr(self, text) is None else json.loads(getattr(self, text)))

_BY_FIELD = {field: attr for attr, field in _native.ENVELOPE.items()}
C = TypeVar("C", bound="Closing")

class Closing:
    """Something with a ``close()`` that a ``with`` block calls (a Message, a Db, a relay or consumer)."""

    __slots__ = ()

    def close(self) -> None: ...
    def __enter__(self: C) -> C:
        return self
    def __exit__(self, *exc: Any) -> None:
        self.close()

class Message(Closing):
    """One delivered event: the envelope's fields (``id`` is OUTBOX_ID; ``payload`` parsed, its text in
    ``payload_json``...) and the delivery. Settle it (:meth:`ack` after your commit, :meth:`nack`,
    :meth:`dead_letter`) unless :meth:`Consumer.run` does."""
    id: str
    event_type: str
    aggregate_type: str
    aggregate_id: str
    operation: Optional[str]
    user: Optional[str]
    created_at: Optional[str]  #: ``YYYYMMDDHHMMSS`` in UTC
    payload_json: str
    previous_payload_json: Optional[str]
    metadata_json: Optional[str]
    body: bytes  #: the envelope as published, byte for byte
    seq: int  #: the per-aggregate sequence number (header outbox-seq), 0 when absent
    redelivered: bool
    delivery_count: int  #: earlier deliveries (quorum queues), -1 when the queue does not say
    routing_key: Optional[str]
    order: Order  #: order within its aggregate, once deduplicated
    previous_seq: int
    payload = _parsed("payload_json")
    previous_payload = _parsed("previous_payload_json")
    metadata = _parsed("metadata_json")

    def __init__(self, native: "_native.Message", consumer: Optional["Consumer"]) -> None:
        self.__dict__.update(native.snapshot())
        self.order = Order(self.order)
        self._native: Optional[_native.Message] = native
        self._consumer = consumer
        self._settled: Optional[str] = None

    def _handle(self) -> "_native.Message":
        if self._native is None or self._native.closed:
            raise InvalidArgument("the message is closed")
        return self._native

    def envelope(self) -> Dict[str, Any]:
        """The whole body parsed as JSON."""
        return dict(json.loads(self.body))

    def field(self, name: str) -> Optional[str]:
        """An envelope field by name (objects as their JSON text), None when absent or null."""
        attr = _BY_FIELD.get(name)
        return getattr(self, attr) if attr is not None else self._handle().field(name)

    def property(self, name: str) -> Optional[str]:
        """An AMQP property (``message_id``, ``type``, ``routing_key``, ``timestamp``...) or a header
        (``outbox-seq``, ``traceparent``) by name, as text; None when absent."""
        return self.routing_key if name == "routing_key" else self._handle().property(name)

    header = property

    def _owner(self) -> "Consumer":
        if self._consumer is None:
            raise InvalidArgument("this message has no consumer to acknowledge to")
        return self._consumer

    def ack(self) -> None:
        """Acknowledges: the broker forgets the message. Call after your transaction committed."""
        self._owner().ack(self)

    def nack(self, requeue: bool = True) -> None:
        """Rejects; ``requeue`` redelivers it (counting a delivery)."""
        self._owner().nack(self, requeue=requeue)

    def dead_letter(self, reason: str) -> None:
        """Sends it to the dead-letter queue with ``reason`` (header x-outbox-dead-reason), then acks."""
        self._owner().dead_letter(self, reason)

    def close(self) -> None:
        """Frees the native message (a context manager does it too)."""
        n, self._native = self._native, None
        if n is not None:
            n.close()

    def __repr__(self) -> str:
        return f"<outbox.Message {self.event_type} {self.aggregate_type}:{self.aggregate_id} seq={self.seq} id={self.id}>"
