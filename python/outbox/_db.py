"""Connections: ``Db`` (the library's own, or your driver's) and the calls that run on them."""

from __future__ import annotations

import contextlib
import datetime as _dt
import enum
import json
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _native
from ._config import Config, ConfigLike, as_config, with_urls
from ._drivers import LIBRARY, DedupeKey, Driver, driver_for, mapped
from ._errors import ArgumentTypeError, Error, InvalidArgument
from ._events import Closing, DedupeResult, EventFields, Message, Written, event_fields

if TYPE_CHECKING:
    from typing_extensions import Unpack

_MIGRATE = {name[len("MIGRATE_"):].lower(): v for name, v in vars(_native).items() if name.startswith("MIGRATE_")}

class TxState(enum.IntEnum):
    """Transaction state of a connection (``outbox_tx_state``)."""
    IDLE = _native.TX_IDLE  #: no transaction open
    ACTIVE = _native.TX_ACTIVE  #: a query is running
    INTRANS = _native.TX_INTRANS  #: inside a transaction
    INERROR = _native.TX_INERROR  #: inside a failed transaction: roll back
    UNKNOWN = _native.TX_UNKNOWN  #: the connection is bad

def _param(v: Any) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(v).hex()
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return str(v)  # numbers, Decimal, UUID

class Rows(List[Tuple[Optional[str], ...]]):
    """``Db.execute``'s rows as tuples of text (None for NULL), its ``rowcount`` (-1: unknown) and ``status`` tag."""
    rowcount: int = -1
    status: Optional[str] = None

    def scalar(self) -> Optional[str]:
        """The first column of the first row (None when there is none)."""
        return self[0][0] if self and self[0] else None

class Db(Closing):
    """A PostgreSQL connection for the outbox: the library's own (``Db.open(url)``, closed with the Db) or your driver's
    (``Db.wrap(conn)``: never closed, committed or rolled back by the library). ``execute``, ``exec``, ``pgconn``,
    ``migrate``, ``purge_inbox``, ``parked``... need the library's own. Shareable between threads (calls serialised)."""
    __slots__ = ("_conn", "_drv", "_config", "__weakref__")

    def __init__(self, url: Optional[str] = None, *, config: ConfigLike = None) -> None:
        """Same as ``Db.open(url, config=config)``."""
        c = as_config(config)
        if url:
            self._conn = _native.Db.open(url, c.native if c is not None else None)
        else:  # pg.url, else OUTBOX_PG_URL: the library's rule
            self._conn = _native.Db.open_config(with_urls(c, None, None).native)
        self._drv, self._config = LIBRARY, c

    @classmethod
    def open(cls, url: Optional[str] = None, *, config: ConfigLike = None) -> "Db":
        """Opens a connection the library owns to ``url`` (default ``pg.url``, else OUTBOX_PG_URL)."""
        return cls(url, config=config)

    @classmethod
    def wrap(cls, conn: Any, *, config: ConfigLike = None) -> "Db":
        """A Db over your psycopg 3 / psycopg2 connection or SQLAlchemy ``Session``/``Connection``."""
        return cls._over(conn, driver_for(conn), as_config(config))

    @classmethod
    def _over(cls, conn: Any, drv: Driver, config: Optional[Config]) -> "Db":
        self = cls.__new__(cls)
        self._conn, self._drv, self._config = conn, drv, config
        return self

    def _c(self) -> Any:
        if self._conn is None:
            raise InvalidArgument("the Db is closed")
        return self._conn

    def _native(self) -> "_native.Db":
        conn = self._c()
        if self._drv is not LIBRARY:
            raise InvalidArgument(f"this {type(conn).__module__} connection is the driver's: this call needs an "
                                  "outbox.Db of its own (outbox.Db.open)")
        return conn

    @property
    def config(self) -> Optional[Config]:
        return self._config

    @property
    def owned(self) -> bool:
        """True when the library opened the connection (and closes it)."""
        return self._drv is LIBRARY

    @property
    def closed(self) -> bool:
        return self._conn is None

    @property
    def tx_state(self) -> TxState:
        """The connection's transaction state."""
        return TxState(self._drv.state(self._c()))

    @property
    def pgconn(self) -> int:
        """The address of the library's libpq ``PGconn`` (for ctypes or other C extensions)."""
        return int(self._native().pgconn())

    def close(self) -> None:
        """Closes the library's connection (the server rolls back), or lets go of your driver's. Idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None and self._drv is LIBRARY:
            conn.close()

    def __repr__(self) -> str:
        t = type(self._conn)
        return f"<outbox.Db {'closed' if self.closed else 'owned' if self.owned else f'via {t.__module__}.{t.__name__}'}>"

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Runs one statement with ``$1..$n`` parameters; its rows as text (DatabaseError: ``.sqlstate``)."""
        rows, n, status = self._native().execute(sql, [_param(p) for p in params])
        out = Rows(rows)
        out.rowcount, out.status = int(n), status
        return out

    def exec(self, sql: str) -> None:
        """Runs SQL without parameters or results (``outbox_db_exec``): DDL, several statements."""
        self._native().exec(sql)

    def _tx(self, step: str) -> None:
        conn = self._c()
        try:
            self._drv.pump(getattr(self._drv, step)(conn, _native.TX_SQL[step]))
        except Error:
            raise
        except Exception as exc:
            raise mapped(exc, step.upper(), self._drv, conn) from exc

    def begin(self) -> None:
        """Opens a transaction, the driver's way (a no-op inside one)."""
        self._tx("begin")

    def commit(self) -> None:
        """Commits, the driver's way."""
        self._tx("commit")

    def rollback(self) -> None:
        """Rolls back, the driver's way."""
        self._tx("rollback")

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Db"]:
        """``with db.transaction():`` begins, commits on success and rolls back on an exception."""
        self.begin()
        try:
            yield self
        except BaseException:
            with contextlib.suppress(Exception):
                self.rollback()
            raise
        self.commit()

    def write(self, event: Any = None, /, **fields: Unpack[EventFields]) -> Written:
        """Writes one event in the connection's current transaction; see :func:`outbox.write`."""
        return self._drv.write(self._c(), event_fields(event, fields), self._config)  # type: ignore[no-any-return]

    def migrate(self, target: str = "all") -> int:
        """Creates or upgrades the tables; see :func:`outbox.migrate`."""
        if target not in _MIGRATE:
            raise InvalidArgument(f"target must be one of {', '.join(map(repr, _MIGRATE))}, not {target!r}")
        return int(self._native().migrate(_MIGRATE[target]))

    def dedupe(self, consumer: Any, event: Any, **kw: Any) -> DedupeResult:
        """Records the event in the inbox in this transaction; see :func:`outbox.dedupe`."""
        return self._drv.dedupe(self._c(), _dedupe_key(consumer, event, **kw), self._config)  # type: ignore[no-any-return]

    def purge_inbox(self, older_than: Union[float, _dt.timedelta], *, batch: int = 1000) -> int:
        """Removes inbox rows processed longer ago than ``older_than``; see :func:`outbox.purge_inbox`."""
        secs = older_than.total_seconds() if isinstance(older_than, _dt.timedelta) else float(older_than)
        return int(self._native().purge_inbox(int(secs), int(batch)))

def _dedupe_key(consumer: Any, event: Any, seq: Optional[int] = None, aggregate_type: Optional[str] = None,
                aggregate_id: Optional[str] = None) -> DedupeKey:
    """(consumer, event id, aggregate type, aggregate id, seq) from a Message, an envelope dict or an id."""
    env = _native.ENVELOPE
    if isinstance(event, Message):
        eid, at, ai, s = event.id, event.aggregate_type, event.aggregate_id, event.seq
    elif isinstance(event, dict):  # an envelope decoded by another AMQP client
        eid, at, ai, s = event.get(env["id"]), event.get(env["aggregate_type"]), event.get(env["aggregate_id"]), 0
    else:
        eid, at, ai, s = str(event), None, None, 0
    if eid is None:
        raise InvalidArgument(f"the event has no {env['id']}")
    at = aggregate_type if aggregate_type is not None else at
    ai = aggregate_id if aggregate_id is not None else ai
    name = consumer if isinstance(consumer, str) else str(getattr(consumer, "name", consumer))
    return name, str(eid), at, None if ai is None else str(ai), int((seq if seq is not None else s) or 0)

@contextlib.contextmanager
def _on(conn: Any, config: ConfigLike, allow_url: bool = False) -> Iterator[Db]:
    if isinstance(conn, Db):
        if config is not None:
            raise ArgumentTypeError("config= applies to a driver's connection; an outbox.Db has its own")
        yield conn
    elif isinstance(conn, str) and allow_url:
        with Db.open(conn, config=config) as db:
            yield db
    else:  # this Db is never handed out: a mapping's Config is made once (as_config(shared))
        yield Db.wrap(conn, config=as_config(config, True))

def write(conn: Any, event: Any = None, /, *, config: ConfigLike = None, **fields: Unpack[EventFields]) -> Written:
    """Writes one event into the outbox **in the connection's current transaction**: commit and it
    is stored with your rows, for the relay to publish; roll back and neither exists.

    Args:
        conn: a psycopg 3 or psycopg2 connection, a SQLAlchemy ``Session``/``Connection`` or an
            :class:`outbox.Db` (asyncio: :func:`write_async`). The library never commits or rolls back.
        event: an :class:`outbox.Event`, a dataclass or a mapping; or the fields as keywords
            (``aggregate_type``, ``aggregate_id``, ``operation``, ``payload``, ...).
        config: ``outbox.schema``, ``event.type_map``, ``event.max_payload_bytes``...
    Returns:
        :class:`outbox.Written`: the event's ``id``, ``event_type`` and per-aggregate ``seq``.
    Raises:
        InvalidEvent, TooLarge; DuplicateEvent (a reused idempotency key; your transaction stays
        usable); TransactionError (aborted); ConnectionLost, DatabaseError, SchemaError.

    Example::

        with psycopg.connect(url) as conn, conn.transaction():
            outbox.write(conn, aggregate_type="ORD", aggregate_id="42", operation="POST", payload={"id": 42})
    """
    if not isinstance(conn, Db):
        return driver_for(conn).write(conn, event_fields(event, fields), config)  # type: ignore[no-any-return]
    with _on(conn, config) as db:  # config= is refused: an outbox.Db has its own
        return db.write(event, **fields)

async def write_async(conn: Any, event: Any = None, /, *, config: ConfigLike = None,
                      **fields: Unpack[EventFields]) -> Written:
    """``await outbox.write_async(conn, ...)``: :func:`outbox.write` on asyncpg, psycopg's
    ``AsyncConnection`` or SQLAlchemy's ``AsyncSession``/``AsyncConnection``; the same result and errors."""
    return await driver_for(conn, asyncio=True).write(conn, event_fields(event, fields), config)  # type: ignore[no-any-return]

def migrate(conn: Any, *, config: ConfigLike = None, target: str = "all") -> int:
    """Creates or upgrades the outbox and inbox tables idempotently (``outbox_migrate``) on a URL or
    an :class:`outbox.Db`; ``target``: ``"all"``, ``"outbox"`` or ``"inbox"``. Returns the schema
    version now installed (SchemaError: the tables are newer than this library)."""
    with _on(conn, config, allow_url=True) as db:
        return db.migrate(target)

def dedupe(conn: Any, consumer: Any, event: Any, *, seq: Optional[int] = None,
           aggregate_type: Optional[str] = None, aggregate_id: Optional[str] = None,
           config: ConfigLike = None) -> DedupeResult:
    """Records (consumer, event) in the inbox **in the connection's current transaction** and says whether
    this is the first time (``outbox_consumer_dedupe``). ``consumer``: a name or an :class:`outbox.Consumer`
    (its configuration by default); ``event``: a Message, an envelope dict or an event id."""
    if config is None and not isinstance(conn, Db):
        config = getattr(consumer, "config", None)
    with _on(conn, config) as db:
        return db.dedupe(consumer, event, seq=seq, aggregate_type=aggregate_type, aggregate_id=aggregate_id)

async def dedupe_async(conn: Any, consumer: Any, event: Any, *, seq: Optional[int] = None,
                       aggregate_type: Optional[str] = None, aggregate_id: Optional[str] = None,
                       config: ConfigLike = None) -> DedupeResult:
    """``await outbox.dedupe_async(conn, consumer, message)``: :func:`outbox.dedupe` on an asyncio connection."""
    key = _dedupe_key(consumer, event, seq, aggregate_type, aggregate_id)
    config = config if config is not None else getattr(consumer, "config", None)
    return await driver_for(conn, asyncio=True).dedupe(conn, key, config)  # type: ignore[no-any-return]

def purge_inbox(conn: Any, older_than: Union[float, _dt.timedelta], *, batch: int = 1000, config: ConfigLike = None) -> int:
    """Removes inbox rows processed over ``older_than`` ago (``outbox_inbox_purge``; a URL or a Db); returns how many."""
    with _on(conn, config, allow_url=True) as db:
        return db.purge_inbox(older_than, batch=batch)

def _parked(conn: Any, config: ConfigLike, call: str, *args: Any) -> Any:  # URL or Db, as purge_inbox
    with _on(conn, config, allow_url=True) as db:  # args[0], if any: the consumer, a name, a Consumer or None
        who = [None if args[0] is None else str(getattr(args[0], "name", args[0]))] if args else []
        return getattr(db._native(), call)(*who, *args[1:])

def metrics_text(conn: Any, *, config: ConfigLike = None) -> str:
    return str(_parked(conn, config, "metrics_text"))  # outbox_metrics_text: Prometheus text for your own /metrics

def parked(conn: Any, consumer: Any = None, include_relay: bool = True, limit: int = 100, *,
           config: ConfigLike = None) -> List[Dict[str, Any]]:
    """Aggregates held after a handler failed, oldest first (``outbox_parked_list``'s dicts; ``consumer`` None: all)."""
    return list(json.loads(_parked(conn, config, "parked_list", consumer, bool(include_relay), int(limit))))

def redrive(conn: Any, consumer: Any, aggregate_type: Optional[str], aggregate_id: Any, *, config: ConfigLike = None) -> int:
    """Retries a held aggregate's head now, then its held events in order (``outbox_parked_redrive``); 1 if held."""
    return int(_parked(conn, config, "parked_redrive", consumer, aggregate_type, str(aggregate_id)))

def redrive_all(conn: Any, consumer: Any, *, config: ConfigLike = None) -> int:
    """Redrives every parked aggregate of ``consumer`` (``outbox_parked_redrive_all``); returns how many."""
    return int(_parked(conn, config, "parked_redrive_all", consumer))

def skip(conn: Any, consumer: Any, aggregate_type: Optional[str], aggregate_id: Any, *, by: str, reason: str = "",
         event_id: Optional[str] = None, config: ConfigLike = None) -> str:
    """Skips a held aggregate's head with ``by``, ``reason`` (``outbox_parked_skip``; NotFound: not it); returns its id."""
    return str(_parked(conn, config, "parked_skip", consumer, aggregate_type, str(aggregate_id),
                       None if event_id is None else str(event_id), by, reason))
