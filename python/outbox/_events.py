"""Events: the dataclass, JSON serialisation, and rendered statements for foreign drivers."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Mapping, NamedTuple, Optional, Tuple, TypedDict, Union

if TYPE_CHECKING:
    from typing_extensions import Unpack

from . import _native
from ._config import Config, ConfigLike, as_config
from ._errors import ArgumentTypeError, InvalidEvent

__all__ = ["Event", "EventFields", "Operation", "OperationName", "Written", "Statement", "render_write", "render_dedupe",
           "JSONValue"]

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
    """The event's fields as keywords (``outbox.write(conn, **fields)``): a type checker refuses a
    misspelt field or an unknown operation."""

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

    ``payload``, ``previous_payload`` and ``metadata`` are JSON objects: pass a dict (or any
    JSON-serialisable object: dataclasses, datetimes and UUIDs are converted), serialised once
    with ``json.dumps(separators=(",", ":"), ensure_ascii=False)``, or JSON text as ``str`` /
    ``bytes``, passed through unchanged (the library checks it is one JSON object).

    ``event_type`` defaults to the documents' naming: ``POST`` -> ``{Name}Created``,
    ``PUT``/``PATCH`` -> ``{Name}Updated``, ``DELETE`` -> ``{Name}Deleted``,
    ``FORCE_DELETE`` -> ``{Name}ForceDeleted``, ``{Name}`` from ``event.type_map``.
    ``event_id`` defaults to a new time-ordered UUIDv7.
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


# The native layer takes the fields as one tuple, in the order the C API enumerates them
# (outbox_event_field()); kind 1 is JSON text.
_FIELDS: Tuple[str, ...] = tuple(name for name, _ in _native.event_fields())
_JSON_FIELDS = frozenset(name for name, kind in _native.event_fields() if kind == 1)
_FIELD_SET = frozenset(_FIELDS)


class Written(NamedTuple):
    """What a write stored: the event's id (UUID text), its type and its per-aggregate sequence."""

    id: str
    event_type: str
    seq: int


@dataclasses.dataclass(frozen=True)
class Statement:
    """A rendered statement to run with your own driver, in your own transaction.

    ``sql`` uses the requested placeholders; ``params`` is a tuple (a dict for ``named``).
    For a write, the statement returns one row with one column, the event's sequence number;
    ``event_id`` and ``event_type`` say what it writes. Every parameter is text (or None) and
    every placeholder is CAST in the SQL, so any driver can send them untyped.
    """

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
    if isinstance(o, uuid.UUID):
        return str(o)
    if isinstance(o, enum.Enum):
        return o.value
    if isinstance(o, (set, frozenset)):
        return list(o)
    raise ArgumentTypeError(
        f"Object of type {type(o).__name__} is not JSON serializable "
        "(convert it first, e.g. str(decimal) or float(decimal), or pass JSON text)"
    )


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_json_default)
try:  # the C encoder, made once (json.dumps makes one per call); same output as _encoder.encode
    from json.encoder import c_make_encoder as _c_make_encoder
    from json.encoder import encode_basestring as _encode_basestring

    _c_encode = _c_make_encoder(None, _json_default, _encode_basestring, None, ":", ",", False, False, True)
except (ImportError, TypeError):  # pragma: no cover - Pythons without the C accelerator
    _c_encode = None


def _dumps(value: Any) -> str:
    if _c_encode is None or isinstance(value, str):
        return _encoder.encode(value)
    try:
        return "".join(_c_encode(value, 0))
    except RecursionError:
        raise ValueError("Circular reference detected") from None


def json_text(field: str, value: Any) -> Optional[str]:
    """JSON text for a payload-like field: str passes through, bytes are decoded, objects dumped."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent(f"{field} is not valid UTF-8: {exc}") from None
    try:
        return _dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"{field} is not JSON-serialisable: {exc}") from None


def _scalar(field: str, value: Any) -> Any:
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (int, uuid.UUID)):
        return str(value)
    raise ArgumentTypeError(f"{field} must be a str, not {type(value).__name__}")


def _unknown(values: Mapping[str, Any]) -> None:
    from ._errors import UnknownKey

    bad = sorted(set(values) - _FIELD_SET)
    raise UnknownKey(f"unknown event field {bad[0]!r} (fields: {', '.join(_FIELDS)})")


def event_fields(event: Any, overrides: Mapping[str, Any]) -> Tuple[Any, ...]:
    """The native field tuple from an Event, any dataclass or mapping, and keyword arguments."""
    values: Mapping[str, Any]
    if event is None:
        values = overrides
    else:
        if isinstance(event, Event):
            d: Dict[str, Any] = {f: getattr(event, f) for f in _FIELDS}
        elif dataclasses.is_dataclass(event) and not isinstance(event, type):
            d = {f.name: getattr(event, f.name) for f in dataclasses.fields(event) if f.name in _FIELD_SET}
        elif isinstance(event, Mapping):
            d = dict(event)
        else:
            raise ArgumentTypeError(f"event must be an outbox.Event, a dataclass or a mapping, not {type(event).__name__}")
        if overrides:
            d.update(overrides)
        values = d
    if not _FIELD_SET.issuperset(values):
        _unknown(values)
    get = values.get
    out: List[Any] = []
    for f in _SCALARS_HEAD:
        v = get(f)
        out.append(v if v is None or v.__class__ is str else _scalar(f, v))
    for f in _JSON_ORDER:
        v = get(f)
        out.append(v if v is None or v.__class__ is str else json_text(f, v))
    for f in _SCALARS_TAIL:
        v = get(f)
        out.append(v if v is None or v.__class__ is str else _scalar(f, v))
    out.append(True if get("force_delete") else None)
    return tuple(out)


_SCALARS_HEAD = _FIELDS[0:3]  # aggregate_type, aggregate_id, operation
_JSON_ORDER = _FIELDS[3:6]  # payload, previous_payload, metadata
_SCALARS_TAIL = _FIELDS[6:10]  # user, event_type, idempotency_key, event_id
assert _JSON_ORDER == ("payload", "previous_payload", "metadata") and _FIELDS[10] == "force_delete"


def _render_config(config: ConfigLike, placeholders: Optional[str]) -> Any:
    """The native config to render with: the configuration's, with render.placeholders set to
    `placeholders` when given (the library converts, and names the parameters of named styles)."""
    c = as_config(config)
    if placeholders is None:
        return c.native if c is not None else None
    c = c.copy() if c is not None else Config()
    c["render.placeholders"] = placeholders
    return c.native


def render_write(
    event: Any = None,
    /,
    *,
    config: ConfigLike = None,
    placeholders: Optional[str] = None,
    **fields: Unpack[EventFields],
) -> Statement:
    """Renders the exact INSERT ``outbox.write()`` would run, for a driver whose connection
    cannot be lent (asyncpg, SQLAlchemy, pg8000, a psycopg cursor of your own...).

    The event is validated, named and given its id exactly as by ``write()``. Run the statement
    with your driver inside your transaction; it returns one row, the event's sequence number.

    Args:
        event: an :class:`Event`, another dataclass or a mapping; or pass the fields as keywords.
        config: table names and limits (``outbox.schema``, ``event.type_map``...).
        placeholders: ``"dollar"`` ($1: asyncpg, libpq), ``"qmark"`` (?), ``"format"`` (%s:
            psycopg, psycopg2), ``"named"`` (:p1, SQLAlchemy ``text()``; params is a dict) or
            ``"pyformat"`` (%(p1)s). Default: the configuration's ``render.placeholders``
            (``dollar`` unless set).

    Example::

        st = outbox.render_write(aggregate_type="ORD", aggregate_id="42", operation="POST",
                                 payload={"total": 10}, placeholders="dollar")
        seq = await asyncpg_conn.fetchval(st.sql, *st.params)

    Raises:
        InvalidEvent, TooLarge, UnknownKey: as ``write()`` (nothing touches the database).
    """
    sql, params, event_id, event_type = _native.render_write(_render_config(config, placeholders), event_fields(event, fields))
    return Statement(sql, params, event_id, event_type)


def render_dedupe(
    consumer: str,
    event_id: Union[str, uuid.UUID],
    aggregate_type: Optional[str] = None,
    aggregate_id: Optional[str] = None,
    seq: int = 0,
    *,
    config: ConfigLike = None,
    placeholders: Optional[str] = None,
) -> Statement:
    """Renders the inbox statement ``outbox.dedupe()`` runs, for subscribers whose database
    driver cannot be lent. It returns one row: ``first_time`` (boolean), ``previous_seq``
    (bigint or NULL), positions updated. Run it in the handler's transaction, first."""
    sql, params = _native.render_dedupe(
        _render_config(config, placeholders),
        str(consumer),
        str(event_id),
        aggregate_type,
        None if aggregate_id is None else str(aggregate_id),
        int(seq or 0),
    )
    return Statement(sql, params)
