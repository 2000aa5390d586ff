"""Connections: the library's own (``Db.open``) and lent driver connections (psycopg 3, psycopg2),
and the calls that run on them: write, migrate, dedupe, purge_inbox."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import decimal
import enum
import json
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _native
from ._config import Config, ConfigLike, as_config
from ._errors import ArgumentTypeError, ConnectionLost, InvalidArgument, LibpqMismatch
from . import _drivers
from ._events import EventFields, Written, event_fields
from ._message import DedupeResult, Message, Order

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "Db",
    "TxState",
    "Order",
    "DedupeResult",
    "Rows",
    "write",
    "migrate",
    "dedupe",
    "purge_inbox",
    "Connection",
]

#: What the connection-taking functions accept: an :class:`outbox.Db`, a psycopg 3 connection,
#: a psycopg2 connection (and, for ``migrate``/``purge_inbox``, a connection URL).
Connection = Any


class TxState(enum.IntEnum):
    """Transaction state of a connection (``outbox_tx_state``)."""

    IDLE = _native.TX_IDLE  #: no transaction open
    ACTIVE = _native.TX_ACTIVE  #: a query is running
    INTRANS = _native.TX_INTRANS  #: inside a transaction
    INERROR = _native.TX_INERROR  #: inside a failed transaction: roll back
    UNKNOWN = _native.TX_UNKNOWN  #: the connection is bad


_MIGRATE_TARGETS = {"all": _native.MIGRATE_ALL, "outbox": _native.MIGRATE_OUTBOX, "inbox": _native.MIGRATE_INBOX}

# --------------------------------------------------------------------------- libpq identity

_libpq_lock = threading.Lock()


def _our_libpq() -> Tuple[int, str]:
    addr = int(_native.libpq_address())
    return addr, _native.library_path(addr) or "libpq"


def _refuse(driver: str, theirs: int, detail: str) -> None:
    ours_addr, ours_path = _our_libpq()
    where = _native.library_path(theirs) if theirs else ""
    raise LibpqMismatch(
        f"cannot lend this {driver} connection to outbox: {driver} uses "
        f"{where or 'a different libpq'}, outbox uses {ours_path} ({detail}). A PGconn belongs to "
        "the libpq that made it; binary wheels (psycopg[binary], psycopg2-binary) bundle their own. "
        "Install the pure 'psycopg' (system libpq) or 'psycopg2' built from source "
        "(pip install --no-binary psycopg2 psycopg2), or use outbox.render_write() with your driver."
    )


def _psycopg3_libpq() -> Tuple[int, str]:
    import psycopg.pq  # the driver is imported already: we were given one of its connections

    impl = getattr(psycopg.pq, "__impl__", "?")
    if impl == "python":
        from psycopg.pq import _pq_ctypes

        return ctypes.cast(_pq_ctypes.pq.PQlibVersion, ctypes.c_void_p).value or 0, impl  # type: ignore[attr-defined]
    mod = sys.modules.get("psycopg_binary.pq" if impl == "binary" else "psycopg_c.pq")
    path = getattr(mod, "__file__", None)
    return (int(_native.libpq_address_in(path)) if path else 0), impl


def _psycopg2_libpq() -> int:
    import psycopg2._psycopg as ext

    return int(_native.libpq_address_in(ext.__file__))


def lendable(driver: str) -> bool:
    """True when the driver's connections may be lent: it uses this module's libpq (the pure
    psycopg, psycopg2 built from source); binary wheels bundle their own."""
    known = _lendable.get(driver)
    if known is None:
        with _libpq_lock:
            theirs = _psycopg3_libpq()[0] if driver == "psycopg" else _psycopg2_libpq()
            known = _lendable[driver] = theirs != 0 and theirs == _our_libpq()[0]
    return known


_lendable: Dict[str, bool] = {}


def _check_psycopg3() -> None:
    if not lendable("psycopg"):
        import psycopg.pq

        theirs, impl = _psycopg3_libpq()
        _refuse("psycopg", theirs, f"psycopg.pq.__impl__ = {impl!r}, libpq {psycopg.pq.version()} "
                f"vs ours {_native.libpq_version()}")


def _check_psycopg2() -> None:
    if not lendable("psycopg2"):
        import psycopg2.extensions

        _refuse("psycopg2", _psycopg2_libpq(), f"libpq {psycopg2.extensions.libpq_version()} vs ours {_native.libpq_version()}")


# --------------------------------------------------------------------------- drivers


class _Driver:
    """How a connection is lent and how its transactions are run, per driver."""

    name = "libpq"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def ptr(self) -> int:
        raise NotImplementedError

    def lock(self) -> Any:
        return contextlib.nullcontext()

    def begin_sql(self) -> Optional[str]:
        """SQL that starts a transaction the way the driver would (None: the driver would not)."""
        return None

    def ensure_transaction(self, db: Optional["_native.Db"] = None) -> None:
        """Opens a transaction when the driver would have opened one for a statement of yours
        (psycopg 3 and psycopg2 outside autocommit); an owned Db follows plain libpq: none."""

    def begin(self, db: "_native.Db") -> None:
        if db.tx_state() == TxState.IDLE:
            db.exec(self.begin_sql() or "BEGIN")

    def commit(self, db: "_native.Db") -> None:
        db.exec("COMMIT")

    def rollback(self, db: "_native.Db") -> None:
        if db.tx_state() not in (TxState.IDLE, TxState.UNKNOWN):
            db.exec("ROLLBACK")


class _Psycopg3(_Driver):
    name = "psycopg"

    def __init__(self, conn: Any) -> None:
        _check_psycopg3()
        super().__init__(conn)

    def ptr(self) -> int:
        p = self.conn.pgconn.pgconn_ptr
        if not p:
            raise ConnectionLost("the psycopg connection is closed")
        return int(p)

    def lock(self) -> Any:
        return self.conn.lock

    def begin_sql(self) -> Optional[str]:
        if self.conn.autocommit:
            return None
        start = getattr(self.conn, "_get_tx_start_command", None)  # honours isolation_level/read_only
        return start().decode() if start is not None else "BEGIN"

    def ensure_transaction(self, db: Optional["_native.Db"] = None) -> None:
        sql = self.begin_sql()
        if sql is not None and db is not None:
            with self.conn.lock:
                if db.tx_state() == TxState.IDLE:
                    db.exec(sql)

    def begin(self, db: "_native.Db") -> None:
        with self.conn.lock:
            if db.tx_state() == TxState.IDLE:
                db.exec(self.begin_sql() or "BEGIN")

    def commit(self, db: "_native.Db") -> None:
        self.conn.commit()  # psycopg 3 reads the transaction state from libpq: COMMIT is sent

    def rollback(self, db: "_native.Db") -> None:
        self.conn.rollback()


class _Psycopg2(_Driver):
    name = "psycopg2"

    def __init__(self, conn: Any) -> None:
        _check_psycopg2()
        super().__init__(conn)

    def ptr(self) -> int:
        if self.conn.closed:
            raise ConnectionLost("the psycopg2 connection is closed")
        return int(self.conn.pgconn_ptr)

    def ensure_transaction(self, db: Optional["_native.Db"] = None) -> None:
        # psycopg2 keeps its own transaction flag: a BEGIN it did not send would leave its
        # commit() a no-op. When it has no transaction yet, let it open one (with its isolation
        # level) by running a statement through it.
        c = self.conn
        if c.closed:
            raise ConnectionLost("the psycopg2 connection is closed")
        if not c.autocommit and c.status == 1:  # STATUS_READY
            try:
                with c.cursor() as cur:
                    cur.execute("SELECT 1")
            except (c.InterfaceError, c.OperationalError) as exc:
                raise ConnectionLost(f"psycopg2 could not begin a transaction: {exc}".strip()) from exc

    def begin(self, db: "_native.Db") -> None:
        if self.conn.autocommit:
            super().begin(db)
        else:
            self.ensure_transaction(db)

    def commit(self, db: "_native.Db") -> None:
        if self.conn.autocommit:
            super().commit(db)
        else:
            self.conn.commit()

    def rollback(self, db: "_native.Db") -> None:
        if self.conn.autocommit:
            super().rollback(db)
        else:
            self.conn.rollback()


class _Owned(_Driver):
    name = "outbox"

    def __init__(self, db: "Db") -> None:
        super().__init__(db)

    def ptr(self) -> int:
        return int(self.conn._handle().pgconn())

    # A connection the library owns and found lost (UNKNOWN) is opened again by the library at the
    # next BEGIN (outbox_db_exec), through its conninfo's host list: send it then too. A rollback
    # of a lost connection stays a no-op (the inherited rule), so a clean-up after a failure never
    # reopens it and the consumer's settle still sees the database lost.
    def begin(self, db: "_native.Db") -> None:
        if db.tx_state() in (TxState.IDLE, TxState.UNKNOWN):
            db.exec("BEGIN")


def _refuse_async(conn: Any) -> None:
    """An asyncio connection (psycopg's AsyncConnection, asyncpg) is driven by its event loop:
    outbox's calls block, so lending it would deadlock or race the loop. Say what works."""
    name = f"{type(conn).__module__}.{type(conn).__name__}"
    raise ArgumentTypeError(
        f"an asyncio connection ({name}) cannot run outbox's blocking calls: "
        "use await outbox.write_async(conn, ...) / outbox.dedupe_async, or Consumer.run_async"
    )


def _driver_for(conn: Any) -> _Driver:
    mod = type(conn).__module__ or ""
    psycopg_type = mod == "psycopg" or mod.startswith("psycopg.")  # public classes say "psycopg"
    if mod.startswith("asyncpg") or (psycopg_type and hasattr(type(conn), "__aenter__")):
        _refuse_async(conn)
    if mod.startswith("psycopg.") or (mod == "psycopg" and hasattr(conn, "pgconn")):
        return _Psycopg3(conn)
    if hasattr(conn, "pgconn_ptr") and "psycopg2" in sys.modules:
        import psycopg2.extensions

        if isinstance(conn, psycopg2.extensions.connection):
            return _Psycopg2(conn)
    if hasattr(conn, "pgconn") and hasattr(conn.pgconn, "pgconn_ptr"):
        return _Psycopg3(conn)  # a psycopg 3 connection subclass from elsewhere
    raise ArgumentTypeError(
        f"cannot lend a {type(conn).__module__}.{type(conn).__name__} to outbox: pass an outbox.Db, a psycopg 3 "
        "or psycopg2 connection, or run outbox.render_write()'s statement with your driver"
    )


# --------------------------------------------------------------------------- parameters


def _param(v: Any) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, decimal.Decimal, uuid.UUID)):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(v).hex()
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return str(v)


class Rows(List[Tuple[Optional[str], ...]]):
    """Rows of ``Db.execute`` as tuples of text (None for NULL); ``rowcount`` is the number of
    rows the command affected or returned (-1 when it does not say), ``status`` its tag."""

    rowcount: int = -1
    status: Optional[str] = None

    def scalar(self) -> Optional[str]:
        """The first column of the first row (None when there is none)."""
        return self[0][0] if self and self[0] else None


# --------------------------------------------------------------------------- Db


class Db:
    """A PostgreSQL connection for the outbox: opened by the library, or lent by your driver.

    Open one (the library owns it and closes it)::

        with outbox.Db.open("postgresql://...", config={"outbox.schema": "shop"}) as db:
            with db.transaction():
                db.execute("INSERT INTO orders (id) VALUES ($1)", [42])
                db.write(aggregate_type="ORD", aggregate_id="42", operation="POST", payload={"id": 42})

    Or wrap a psycopg 3 / psycopg2 connection (``Db.wrap(conn)``): the library never closes,
    commits or rolls back a lent connection; ``begin``/``commit``/``rollback`` go through the
    driver so it keeps track. Most code can skip this and call ``outbox.write(conn, ...)``.

    A Db may be used from several threads; calls are serialised.
    """

    __slots__ = ("_native", "_config", "_driver", "_ptr", "__weakref__")

    def __init__(self, url: Optional[str] = None, *, config: ConfigLike = None) -> None:
        """Same as ``Db.open(url, config=config)``."""
        c = as_config(config)
        self._config = c
        self._native: Optional[_native.Db]
        if url:
            self._native = _native.Db.open(url, c.native if c is not None else None)
        else:  # pg.url, else OUTBOX_PG_URL: the library's rule
            opened = c.copy() if c is not None else Config()
            opened.apply_env()
            self._native = _native.Db.open_config(opened.native)
        self._driver: _Driver = _Owned(self)
        self._ptr = 0

    @classmethod
    def open(cls, url: Optional[str] = None, *, config: ConfigLike = None) -> "Db":
        """Opens a connection the library owns (``outbox_db_open``).

        Args:
            url: a libpq URL or ``key=value`` string; default ``pg.url`` of the configuration,
                else the OUTBOX_PG_URL environment variable.
            config: table names and limits.
        Raises:
            ConnectionLost: the server cannot be reached (the message never shows the password).
        """
        return cls(url, config=config)

    @classmethod
    def wrap(cls, conn: Any, *, config: ConfigLike = None) -> "Db":
        """A :class:`Db` over your psycopg 3 or psycopg2 connection (or SQLAlchemy ``Session`` /
        ``Connection``); it stays yours. When the driver uses this module's libpq (the pure psycopg,
        psycopg2 from source) its ``PGconn`` is lent (``outbox_db_wrap``); otherwise (binary wheels,
        SQLAlchemy) the Db runs the library's rendered statements through the driver's cursor:
        ``write``, ``dedupe``, ``begin``/``commit``/``rollback`` and ``tx_state`` work alike;
        ``execute``, ``exec``, ``migrate`` and ``purge_inbox`` need a lent or owned connection.
        """
        c = as_config(config)
        kind, drv = _path(conn)
        if kind == "cursor":
            return _DriverDb(conn, drv, c)
        self = cls.__new__(cls)
        driver = _driver_for(conn)
        self._config = c
        self._driver = driver
        self._ptr = driver.ptr()
        self._native = _native.Db.wrap(self._ptr, c.native if c is not None else None)
        return self

    # -- state

    def _handle(self) -> "_native.Db":
        n = self._native
        if n is None:
            raise InvalidArgument("the Db is closed")
        if self._ptr and self._driver.ptr() != self._ptr:
            raise ConnectionLost(f"the lent {self._driver.name} connection was closed or replaced")
        return n

    @property
    def config(self) -> Optional[Config]:
        return self._config

    @property
    def owned(self) -> bool:
        """True when the library opened the connection (and closes it)."""
        return isinstance(self._driver, _Owned)

    @property
    def closed(self) -> bool:
        return self._native is None

    @property
    def tx_state(self) -> TxState:
        """The connection's transaction state."""
        return TxState(self._handle().tx_state())

    @property
    def pgconn(self) -> int:
        """The address of the underlying libpq ``PGconn`` (for ctypes or other C extensions)."""
        return int(self._handle().pgconn())

    def close(self) -> None:
        """Closes an owned connection (uncommitted work is rolled back by the server), or
        releases a lent one. Idempotent."""
        n, self._native = self._native, None
        if n is not None:
            n.close()

    def __enter__(self) -> "Db":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._native is None else ("owned" if self.owned else f"lent {self._driver.name}")
        return f"<outbox.Db {state}>"

    # -- SQL

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Runs one SQL statement with ``$1..$n`` parameters (libpq ``PQexecParams``) and returns
        its rows as tuples of text. Parameters: None, str, bool, numbers, Decimal, UUID,
        datetimes, bytes (bytea), dict/list (JSON).

        Raises:
            DatabaseError: the server refused it (``.sqlstate`` says why); ConnectionLost.
        """
        rows, n, status = self._handle().execute(sql, [_param(p) for p in params])
        out = Rows(rows)
        out.rowcount = int(n)
        out.status = status
        return out

    def exec(self, sql: str) -> None:
        """Runs SQL without parameters or results (``outbox_db_exec``): BEGIN, DDL, several
        statements separated by semicolons."""
        self._handle().exec(sql)

    def begin(self) -> None:
        """Opens a transaction (the driver's way for a lent connection); no-op inside one."""
        self._driver.begin(self._handle())

    def commit(self) -> None:
        self._driver.commit(self._handle())

    def rollback(self) -> None:
        self._driver.rollback(self._handle())

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

    # -- outbox calls

    def write(self, event: Any = None, /, **fields: Unpack[EventFields]) -> Written:
        """Writes one event in the connection's current transaction; see :func:`outbox.write`."""
        h = self._handle()
        fields_t = event_fields(event, fields)
        self._driver.ensure_transaction(h)
        with self._driver.lock():
            return Written(*h.write(fields_t, None))

    def migrate(self, target: str = "all") -> int:
        """Creates or upgrades the tables; see :func:`outbox.migrate`."""
        try:
            t = _MIGRATE_TARGETS[str(target)]
        except KeyError:
            raise InvalidArgument(f"target must be 'all', 'outbox' or 'inbox', not {target!r}") from None
        with self._driver.lock():
            return int(self._handle().migrate(t))

    def dedupe(self, consumer: Any, event: Any, **kw: Any) -> DedupeResult:
        """Records the event in the inbox in this transaction; see :func:`outbox.dedupe`."""
        return _dedupe_on(self, consumer, event, **kw)

    def purge_inbox(self, older_than: Union[float, _dt.timedelta], *, batch: int = 1000) -> int:
        """Removes inbox rows processed longer ago than ``older_than``; see :func:`outbox.purge_inbox`."""
        secs = older_than.total_seconds() if isinstance(older_than, _dt.timedelta) else float(older_than)
        with self._driver.lock():
            return int(self._handle().purge_inbox(int(secs), int(batch)))


def _dedupe_on(db: Db, consumer: Any, event: Any, *, seq: Optional[int] = None,
               aggregate_type: Optional[str] = None, aggregate_id: Optional[str] = None) -> DedupeResult:
    key = _dedupe_key(consumer, event, seq, aggregate_type, aggregate_id)
    if isinstance(db, _DriverDb):
        return db._dedupe_key(key)
    h = db._handle()
    db._driver.ensure_transaction(h)
    native_consumer = getattr(consumer, "_handle", None)  # an outbox.Consumer
    if isinstance(event, Message) and callable(native_consumer) and seq is None and aggregate_type is None \
            and aggregate_id is None:
        with db._driver.lock():
            first, order, prev = h.dedupe_message(native_consumer(), event._handle())
    else:
        with db._driver.lock():
            first, order, prev = h.dedupe(*key)
    return DedupeResult(bool(first), Order(order), int(prev))


DedupeKey = Tuple[str, str, Optional[str], Optional[str], int]


def _dedupe_key(consumer: Any, event: Any, seq: Optional[int], aggregate_type: Optional[str],
                aggregate_id: Optional[str]) -> DedupeKey:
    """(consumer, event id, aggregate type, aggregate id, seq) for the dedupe statement."""
    name = consumer if isinstance(consumer, str) else str(getattr(consumer, "name", consumer))
    eid: Any
    at: Optional[str]
    ai: Any
    s: int
    if isinstance(event, Message):
        eid, at, ai, s = event.id, event.aggregate_type, event.aggregate_id, event.seq
    elif isinstance(event, dict):  # an envelope decoded by another AMQP client
        eid, at, ai, s = event.get("OUTBOX_ID"), event.get("AGGREGATE_TYPE"), event.get("AGGREGATE_ID"), 0
    else:
        eid, at, ai, s = str(event), None, None, 0
    if eid is None:
        raise InvalidArgument("the event has no OUTBOX_ID")
    at = aggregate_type if aggregate_type is not None else at
    ai = aggregate_id if aggregate_id is not None else ai
    s = seq if seq is not None else s
    return name, str(eid), at, None if ai is None else str(ai), int(s or 0)


class _DriverDb(Db):
    """A Db over a driver connection that is not lent: the library's rendered statements run
    through the driver's own cursor (binary psycopg wheels, SQLAlchemy)."""

    __slots__ = ("_conn", "_drv")

    def __init__(self, conn: Any, drv: Any, config: Optional[Config]) -> None:  # noqa: D107
        self._conn, self._drv, self._config = conn, drv, config
        self._native = None
        self._ptr = 0
        self._driver = _Driver(conn)
        self._driver.name = "cursor"

    def _handle(self) -> "_native.Db":
        raise InvalidArgument(
            f"this {type(self._conn).__module__} connection is not lent to the library (its driver bundles "
            "another libpq): this call needs an outbox.Db of its own (outbox.Db.open) or the pure psycopg")

    @property
    def closed(self) -> bool:
        return False

    @property
    def owned(self) -> bool:
        return False

    @property
    def tx_state(self) -> TxState:
        if isinstance(self._drv, _drivers.SqlAlchemy):
            return TxState.INTRANS if self._conn.in_transaction() else TxState.IDLE
        return TxState(self._drv.state(self._conn))

    def close(self) -> None:
        """Releases nothing: the connection stays yours."""

    def __repr__(self) -> str:
        return f"<outbox.Db via {type(self._conn).__module__}.{type(self._conn).__name__}>"

    def lost(self) -> bool:
        try:
            return bool(self._drv.is_lost(self._conn))
        except Exception:
            return True

    def begin(self) -> None:
        try:
            self._drv.begin(self._conn)
        except Exception as exc:
            raise _drivers.mapped(exc, "BEGIN") from exc

    def commit(self) -> None:
        try:
            self._drv.commit(self._conn)
        except Exception as exc:
            raise _drivers.mapped(exc, "COMMIT") from exc

    def rollback(self) -> None:
        try:
            self._drv.rollback(self._conn)
        except Exception as exc:
            raise _drivers.mapped(exc, "ROLLBACK") from exc

    def write(self, event: Any = None, /, **fields: Unpack[EventFields]) -> Written:
        return _drivers.write(self._drv, self._conn, event_fields(event, fields), self._config)

    def _dedupe_key(self, key: DedupeKey) -> DedupeResult:
        first, order, prev = _drivers.dedupe(self._drv, self._conn, self._config, key)
        return DedupeResult(first, Order(order), prev)


# --------------------------------------------------------------------------- module functions


@contextlib.contextmanager
def _on(conn: Any, config: ConfigLike, *, allow_url: bool = False) -> Iterator[Db]:
    if isinstance(conn, Db):
        if config is not None:
            raise ArgumentTypeError("config= applies when lending a driver connection; an outbox.Db has its own")
        yield conn
        return
    if isinstance(conn, str):
        if not allow_url:
            raise ArgumentTypeError("pass a connection (outbox.Db, psycopg, psycopg2), not a URL")
        with Db.open(conn, config=config) as db:
            yield db
        return
    db = Db.wrap(conn, config=config)
    try:
        yield db
    finally:
        db.close()


# Per connection type: "psycopg"/"psycopg2" (lent: the driver uses our libpq) or "cursor" (the
# rendered statement through the driver's own cursor), and the driver family.
_paths: Dict[type, Tuple[str, Any]] = {}

#: Lend the PGconn when the driver's libpq is ours (an optimisation; see python/README.md).
LEND = True


def _path(conn: Any) -> Tuple[str, Any]:
    t = type(conn)
    p = _paths.get(t)
    if p is None:
        drv = _drivers.sync_driver(conn)
        if drv is None:
            _driver_for(conn)  # raises the precise error (an asyncio connection, an unknown type)
        kind = "cursor"
        if drv is _drivers._PSYCOPG3 and lendable("psycopg"):
            kind = "psycopg"
        elif drv is _drivers._PSYCOPG2 and lendable("psycopg2"):
            kind = "psycopg2"
        p = _paths[t] = (kind, drv)
    return p


def write(conn: Connection, event: Any = None, /, *, config: ConfigLike = None, **fields: Unpack[EventFields]) -> Written:
    """Writes one event into the outbox **in the connection's current transaction**.

    Commit and the event is stored with your rows, for the relay to publish; roll back and
    neither exists. The library never commits or rolls back your transaction. When the driver
    has no transaction open yet (psycopg 3 or psycopg2 outside autocommit), one is begun the
    driver's way, as your own first statement would have.

    Args:
        conn: a psycopg 3 or psycopg2 connection (binary wheels included), a SQLAlchemy
            ``Session`` or ``Connection``, or an :class:`outbox.Db`. The library renders the
            statement and the driver's cursor runs it (a connection whose libpq is this module's,
            the pure ``psycopg`` or ``psycopg2`` from source, is lent instead: one native call).
            For asyncpg and psycopg's ``AsyncConnection``: ``await outbox.write_async(...)``.
        event: an :class:`outbox.Event`, another dataclass or a mapping; or the fields as keywords:
            ``aggregate_type``, ``aggregate_id``, ``operation`` (POST, PUT, PATCH, DELETE,
            FORCE_DELETE), ``payload`` (dict or JSON text), and optionally ``previous_payload``,
            ``metadata``, ``user``, ``event_type``, ``idempotency_key``, ``event_id``.
        config: ``outbox.schema``, ``outbox.table``, ``event.type_map``, ``event.max_payload_bytes``...

    Returns:
        :class:`outbox.Written`: the event's ``id``, ``event_type`` and per-aggregate ``seq``.

    Raises:
        InvalidEvent: a missing field, invalid JSON, an unknown operation, a NUL byte.
        TooLarge: the payload is over ``event.max_payload_bytes``.
        DuplicateEvent: the idempotency key is used already (your transaction stays usable).
        TransactionError: your transaction is aborted: roll it back.
        ConnectionLost, DatabaseError, SchemaError (tables missing: run ``outbox.migrate``).
            A driver's own error is mapped by its SQLSTATE as the library maps libpq's.

    Example::

        with psycopg.connect(url) as conn:
            with conn.transaction():
                conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (42, 99.5))
                outbox.write(conn, aggregate_type="ORD", aggregate_id="42", operation="POST",
                             payload={"id": 42, "total": 99.5})
    """
    if isinstance(conn, Db):
        if config is not None:
            raise ArgumentTypeError("config= applies when lending a driver connection; an outbox.Db has its own")
        return conn.write(event, **fields)
    kind, drv = _paths.get(type(conn)) or _path(conn)
    if kind == "cursor" or not LEND:
        return _drivers.write(drv, conn, event_fields(event, fields), config)
    c = as_config(config)
    native_cfg = c.native if c is not None else None
    if kind == "psycopg":  # checked for its libpq when its type entered _drivers
        pg = conn.pgconn
        ptr = pg.pgconn_ptr
        if not ptr:
            raise ConnectionLost("the psycopg connection is closed")
        begin = None
        if not conn.autocommit:
            start = getattr(conn, "_get_tx_start_command", None)
            begin = start().decode() if start is not None else "BEGIN"
        fields_t = event_fields(event, fields)
        with conn.lock:
            return Written(*_native.write_pgconn(ptr, native_cfg, fields_t, begin))
    else:
        driver = _driver_for(conn)
        fields_t = event_fields(event, fields)
        driver.ensure_transaction()
    return Written(*_native.write_pgconn(driver.ptr(), native_cfg, fields_t, None))


def migrate(conn: Connection, *, config: ConfigLike = None, target: str = "all") -> int:
    """Creates or upgrades the outbox and inbox tables, idempotently (``outbox_migrate``).

    Concurrent migrations serialise on an advisory lock. On an idle connection it runs in its
    own transaction; inside yours it joins it.

    Args:
        conn: an :class:`outbox.Db`, a psycopg 3 / psycopg2 connection, or a connection URL.
        config: ``outbox.schema``, ``outbox.table``, ``inbox.table``.
        target: ``"all"``, ``"outbox"`` (outbox and aggregate counter tables) or ``"inbox"``.
    Returns:
        the schema version now installed.
    Raises:
        SchemaError: the tables are newer than this library knows.
    """
    with _on(conn, config, allow_url=True) as db:
        return db.migrate(target)


def dedupe(
    conn: Connection,
    consumer: Any,
    event: Any,
    *,
    seq: Optional[int] = None,
    aggregate_type: Optional[str] = None,
    aggregate_id: Optional[str] = None,
    config: ConfigLike = None,
) -> DedupeResult:
    """Records (consumer, event) in the inbox **in the connection's current transaction** and
    says whether this is the first time (``outbox_consumer_dedupe``).

    Commit it together with your handler's writes: after the commit every redelivery answers
    ``first_time=False``; a crash before it leaves no trace and the redelivery is processed.

    Args:
        conn: an :class:`outbox.Db` or a psycopg 3 / psycopg2 connection (a transaction is begun
            the driver's way when none is open).
        consumer: the consumer's name, or an :class:`outbox.Consumer`.
        event: an :class:`outbox.Message`, an envelope dict decoded by another AMQP client
            (``OUTBOX_ID``, ``AGGREGATE_TYPE``, ``AGGREGATE_ID``), or an event id.
        seq: the per-aggregate sequence (header ``outbox-seq``) for order and gap reports.
    Returns:
        :class:`outbox.DedupeResult` (``first_time``, ``order``, ``previous_seq``).
    """
    with _on(conn, config) as db:
        return _dedupe_on(db, consumer, event, seq=seq, aggregate_type=aggregate_type, aggregate_id=aggregate_id)


def purge_inbox(
    conn: Connection,
    older_than: Union[float, _dt.timedelta],
    *,
    batch: int = 1000,
    config: ConfigLike = None,
) -> int:
    """Removes inbox rows processed more than ``older_than`` ago (seconds or a timedelta)
    (``outbox_inbox_purge``). The inbox is partitioned by the time in the event ids: run as the
    tables' owner, whole partitions past the age are dropped (rows may stay up to
    ``inbox.partition_s`` longer) and rows of ids that are not uuid v7 are deleted in batches of
    ``batch``; any other role deletes rows in batches.

    Raises:
        InvalidArgument: ``older_than`` is below ``inbox.retention_s`` (default 7 days): a
            redelivery may still need those rows.
    Returns:
        the number of rows removed.
    """
    with _on(conn, config, allow_url=True) as db:
        return db.purge_inbox(older_than, batch=batch)
