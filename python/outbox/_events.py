"""Events: the dataclass, its fields as the library takes them, and rendered statements."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import uuid
from typing import TYPE_CHECKING, Any, Dict, Literal, Mapping, NamedTuple, Optional, Tuple, TypedDict, Union

if TYPE_CHECKING:
    from typing_extensions import Unpack

from . import _native
from ._config import ConfigLike, native_config
from ._errors import ArgumentTypeError, InvalidEvent, UnknownKey

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
    """An event to write, the documents' outbox row.

    ``payload``, ``previous_payload`` and ``metadata``: JSON objects, as Python objects (serialised
    once; dataclasses, datetimes and UUIDs converted) or JSON text (passed through). ``event_type``
    defaults to the documents' naming (``POST`` -> ``{Name}Created``, ...), ``event_id`` to a UUIDv7.
    """

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
    """A rendered statement to run with your own driver, in your own transaction: ``sql`` in the
    placeholder style asked for, ``params`` a tuple (a dict for the named styles), all text or
    None (every placeholder is CAST in the SQL). A write's returns one row, the event's ``seq``."""

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
    if isinstance(o, (uuid.UUID, enum.Enum)):
        return o.value if isinstance(o, enum.Enum) else str(o)
    if isinstance(o, (set, frozenset)):
        return list(o)
    raise ArgumentTypeError(f"Object of type {type(o).__name__} is not JSON serializable "
                            "(convert it first, e.g. str(decimal) or float(decimal), or pass JSON text)")


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_json_default)
try:  # the C encoder, made once (json.dumps makes one per call); the same output
    from json.encoder import c_make_encoder, encode_basestring

    _c_encode = c_make_encoder(None, _json_default, encode_basestring, None, ":", ",", False, False, True)
except (ImportError, TypeError):  # pragma: no cover - Pythons without the C accelerator
    _c_encode = None


def _json(field: str, value: Any) -> str:
    """JSON text for a payload-like field: bytes are decoded, objects dumped."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent(f"{field} is not valid UTF-8: {exc}") from None
    try:
        return "".join(_c_encode(value, 0)) if _c_encode is not None else _encoder.encode(value)
    except RecursionError:
        raise InvalidEvent(f"{field} is not JSON-serialisable: Circular reference detected") from None
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"{field} is not JSON-serialisable: {exc}") from None


def _text(field: str, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (int, uuid.UUID)):
        return str(value)
    raise ArgumentTypeError(f"{field} must be a str, not {type(value).__name__}")


def _flag(field: str, value: Any) -> Optional[bool]:
    return True if value else None


# The fields in the order the library enumerates them (outbox_event_field), each with the
# conversion its kind needs (0 text, 1 JSON text, 2 a flag); the native layer takes them as a tuple.
_FIELDS = tuple((name, (_text, _json, _flag)[kind]) for name, kind in _native.event_fields())
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
    """Renders the exact INSERT ``outbox.write()`` would run, for a driver of your own (pg8000, ...).

    The event is validated, named and given its id as by ``write()``; run the statement inside your
    transaction: it returns one row, the event's sequence number.

    Args:
        event: an :class:`Event`, another dataclass or a mapping; or the fields as keywords.
        config: table names and limits (``outbox.schema``, ``event.type_map``...).
        placeholders: ``"dollar"`` ($1), ``"qmark"`` (?), ``"format"`` (%s), ``"named"`` (:p1;
            params a dict) or ``"pyformat"`` (%(p1)s); default the configuration's ``render.placeholders``.
    Raises:
        InvalidEvent, TooLarge, UnknownKey: as ``write()`` (nothing touches the database).
    """
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
