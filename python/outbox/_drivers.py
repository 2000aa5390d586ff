"""Drivers: one protocol for every connection the package takes, blocking or asyncio. A driver's I/O methods
(``run``, ``begin``, ``commit``, ``rollback``) are *steps*: generators that yield the calls to make as
``(function, *args)`` and receive each one's result. ``drive`` makes the calls in this thread; ``drive_async`` awaits
what they return (and runs blocking native calls on a worker thread). So one class serves psycopg's ``Connection``
and ``AsyncConnection``, and the library's write plan, dedupe statement and consumer loop are driven once for both;
their statements and what a failure means are the library's."""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
import threading
from typing import Any, Callable, Coroutine, Dict, Generator, Optional, Tuple

from . import _native
from ._config import ConfigLike, native_config
from ._errors import ArgumentTypeError, ConnectionLost, Error, InternalError, error_class
from ._events import DedupeResult, Order, Written

IDLE, INTRANS, INERROR, UNKNOWN = _native.TX_IDLE, _native.TX_INTRANS, _native.TX_INERROR, _native.TX_UNKNOWN
Steps = Generator[Tuple[Any, ...], Any, Any]
DedupeKey = Tuple[str, str, Optional[str], Optional[str], int]  # consumer, event id, aggregate type and id, seq

def block(fn: Callable[[], Any]) -> Any:  # a step's blocking native call (a worker thread's under asyncio)
    return fn()

def sleep(seconds: float, stopped: threading.Event) -> None:  # a step's wait, cut short by a stop request
    stopped.wait(seconds)

async def _block_async(fn: Callable[[], Any]) -> Any:
    fut = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:  # the call finishes first: a native handle is one thread's at a time
        await asyncio.wait({fut})
        raise

async def _sleep_async(seconds: float, stopped: threading.Event) -> None:
    while seconds > 0 and not stopped.is_set():
        await asyncio.sleep(min(seconds, 0.1))
        seconds -= 0.1

_ASYNC: Dict[Any, Any] = {block: _block_async, sleep: _sleep_async}

async def _pump(steps: Steps, awaits: bool) -> Any:
    ok = send = steps.send
    arg = None
    while True:
        try:
            op = send(arg)
        except StopIteration as done:
            return done.value
        try:  # a call's exception goes into the steps, a KeyboardInterrupt or a cancellation too
            arg, send = (_ASYNC.get(op[0], op[0]) if awaits else op[0])(*op[1:]), ok
            if awaits and inspect.isawaitable(arg):
                arg = await arg
        except BaseException as exc:
            arg, send = exc, steps.throw

def drive(steps: Steps) -> Any:
    """Runs steps in this thread; returns what they return."""
    try:
        _pump(steps, False).send(None)  # nothing is awaited: it runs to its end at once
    except StopIteration as done:
        return done.value
    raise InternalError("a blocking driver suspended")  # pragma: no cover

def drive_async(steps: Steps) -> Coroutine[Any, Any, Any]:  # await drive_async(steps): runs them in asyncio
    return _pump(steps, True)

_LOST = ("OperationalError", "InterfaceError", "ConnectionDoesNotExistError", "ConnectionFailureError")
_text = functools.lru_cache(64)(lambda sql: sys.modules["sqlalchemy"].text(sql))  # SQLAlchemy's, once per statement

def _gone(exc: BaseException) -> bool:  # a driver's exception that says the connection is gone
    e = getattr(exc, "orig", None) or exc  # SQLAlchemy's DBAPIError wraps the driver's exception
    return bool(getattr(exc, "connection_invalidated", False)) or isinstance(e, (OSError, EOFError, ConnectionLost)) \
        or any(t.__name__ in _LOST for t in type(e).__mro__)

def closed(drv: "Driver", conn: Any) -> bool:
    try:
        return bool(drv.lost(conn))
    except Exception as exc:  # lost only when it says so (ConnectionLost, a driver's connection error)
        if _gone(exc):
            return True
        raise

def failure(exc: BaseException, drv: "Driver", conn: Any) -> Tuple[Optional[str], Optional[str], str, bool]:
    """A driver's exception as the library's step machines take it: (SQLSTATE, constraint, message,
    whether the connection is gone), from psycopg, psycopg2, asyncpg or SQLAlchemy."""
    e = getattr(exc, "orig", None) or exc  # SQLAlchemy's DBAPIError wraps the driver's exception
    state = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
    state = "25P02" if type(exc).__name__ == "PendingRollbackError" else state  # SQLAlchemy: an aborted transaction
    state = state if isinstance(state, str) and len(state) == 5 else None
    diag = getattr(e, "diag", e)
    name = getattr(diag, "constraint_name", None)
    text = getattr(diag, "message_primary", None) or str(e).strip() or type(e).__name__
    return state, name if isinstance(name, str) else None, text, closed(drv, conn) or (state is None and _gone(exc))

def mapped(exc: BaseException, context: str, drv: "Driver", conn: Any) -> Error:
    """A driver's exception as the library's error (``outbox_driver_error``, the write plan's rule)."""
    state, _, text, lost = failure(exc, drv, conn)
    status, message = _native.driver_error(context, state, text, lost)
    return error_class(status)(message, sqlstate=state)

def result(t: Tuple[bool, int, int]) -> DedupeResult:
    return DedupeResult(bool(t[0]), Order(t[1]), int(t[2]))

class Driver:
    """One driver family: ``state(conn)`` (a TX_* state; ConnectionLost when closed), ``autocommit``, ``lost``, the
    steps ``run(conn, sql, params)`` (the first row or None) and ``begin``/``commit``/``rollback(conn, sql)``, and
    ``write``/``dedupe``, which return their result (asyncio: an awaitable of it)."""
    placeholders = "format"

    def __init__(self, asyncio: bool = False) -> None:
        self.asyncio, self.pump = asyncio, drive_async if asyncio else drive

    def autocommit(self, conn: Any) -> bool:  # False: the driver begins a transaction at the first statement
        return True
    def lost(self, conn: Any) -> bool:
        return self.state(conn) == UNKNOWN

    def write(self, conn: Any, fields: Tuple[Any, ...], config: ConfigLike) -> Any:
        return self.pump(self._write(conn, fields, config))
    def dedupe(self, conn: Any, key: DedupeKey, config: ConfigLike) -> Any:
        return self.pump(self._dedupe(conn, key, config))

    # The transaction statements run as they are, unless a driver has calls of its own. Outside
    # autocommit a driver begins by itself; a lost owned Db is reopened by BEGIN, never by ROLLBACK.
    def begin(self, conn: Any, sql: str) -> Steps:
        if self.autocommit(conn) and self.state(conn) in (IDLE, UNKNOWN):
            yield from self.run(conn, sql, None)

    def commit(self, conn: Any, sql: str) -> Steps:
        yield from self.run(conn, sql, None)

    def rollback(self, conn: Any, sql: str) -> Steps:
        if not self.lost(conn) and self.state(conn) not in (IDLE, UNKNOWN):
            yield from self.run(conn, sql, None)

    def _write(self, conn: Any, fields: Tuple[Any, ...], config: ConfigLike) -> Steps:
        """The library's write plan (outbox_write_plan_*), each statement on the driver."""
        state = self.state(conn)  # outside autocommit the driver begins at the first statement
        tx = INERROR if state == INERROR else INTRANS if state == INTRANS or not self.autocommit(conn) else IDLE
        plan, sqlstate = _native.WritePlan(native_config(config), fields, tx, self.placeholders), None
        while (st := plan.next()) is not None:
            try:  # statements without parameters (the savepoint's) run as they are
                row = yield from self.run(conn, st[1], st[2] or None)
            except Exception as exc:
                why = failure(exc, self, conn)
                sqlstate = why[0]  # the error the plan ends with carries it
                plan.failed(*why)
                continue
            plan.done(row)
        try:
            return Written(*plan.result())
        except Error as e:
            e.sqlstate = e.sqlstate or sqlstate
            raise

    def _dedupe(self, conn: Any, key: DedupeKey, config: ConfigLike) -> Steps:
        """The library's inbox statement (outbox_render_dedupe) on the driver, its row read by the library."""
        native = native_config(config, self.placeholders)
        sql, params = _native.render_dedupe(native, *key)
        try:
            row = yield from self.run(conn, sql, params)
        except Exception as exc:
            raise mapped(exc, "outbox dedupe", self, conn) from exc
        if row is None:
            raise InternalError("outbox dedupe: the inbox statement returned no row")
        return result(_native.dedupe_interpret(native, key[2], key[3], key[4], row[0], row[1]))

class Library(Driver):
    """The library's own connection (a native Db): the library's own calls, not the plan."""
    placeholders = "dollar"

    def state(self, conn: Any) -> int:
        return int(conn.tx_state())
    def run(self, conn: Any, sql: str, params: Any) -> Steps:  # the transaction statements only
        yield (conn.exec, sql)
    def write(self, conn: Any, fields: Tuple[Any, ...], config: ConfigLike) -> Any:
        return Written(*conn.write(fields))
    def dedupe(self, conn: Any, key: DedupeKey, config: ConfigLike) -> Any:
        return result(conn.dedupe(*key))

class Psycopg(Driver):
    """psycopg 3's ``Connection`` and ``AsyncConnection``: outside autocommit psycopg begins by itself."""

    def state(self, conn: Any) -> int:
        if conn.closed:
            raise ConnectionLost(f"the {type(conn).__module__.split('.')[0]} connection is closed")
        return int((getattr(conn, "pgconn", None) or conn.info).transaction_status)  # psycopg's pgconn: no enum made

    def autocommit(self, conn: Any) -> bool:
        return bool(conn.autocommit)

    def run(self, conn: Any, sql: str, params: Any) -> Steps:
        cur = yield (conn.execute, sql, params)
        if cur.pgresult is None or not cur.pgresult.ntuples:  # no rows (cur.description would build Columns)
            return None
        return (yield (cur.fetchone,)) if self.asyncio else cur.fetchone()

    def commit(self, conn: Any, sql: str) -> Steps:
        yield (conn.commit,)
    def rollback(self, conn: Any, sql: str) -> Steps:
        yield (conn.rollback,)

class Psycopg2(Psycopg):
    """psycopg2's connection: outside autocommit it begins at the first statement; in autocommit
    its commit() and rollback() do nothing, so the statements run."""

    def run(self, conn: Any, sql: str, params: Any) -> Steps:
        with conn.cursor() as cur:
            yield (cur.execute, sql, params)
            return (yield (cur.fetchone,)) if cur.description is not None else None

    def commit(self, conn: Any, sql: str) -> Steps:
        yield from (Driver if conn.autocommit else Psycopg).commit(self, conn, sql)
    def rollback(self, conn: Any, sql: str) -> Steps:
        yield from (Driver if conn.autocommit else Psycopg).rollback(self, conn, sql)

class SqlAlchemy(Psycopg):
    """SQLAlchemy's ``Session``/``Connection`` and their asyncio forms: ``text()`` statements in the
    session's transaction, which SQLAlchemy begins at the first statement."""
    placeholders = "named"

    def state(self, conn: Any) -> int:
        return INTRANS if conn.in_transaction() else IDLE
    def autocommit(self, conn: Any) -> bool:
        return False

    def lost(self, conn: Any) -> bool:  # the Connection's flags (an AsyncConnection's too): never reconnects
        s = getattr(conn, "sync_session", conn)  # a Session (an AsyncSession's): connection() begins outside one
        if callable(getattr(type(s), "connection", None)):
            conn = s.connection() if s.in_transaction() and s.is_active else None
        return conn is not None and bool(conn.invalidated or conn.closed)

    def run(self, conn: Any, sql: str, params: Any) -> Steps:
        res = yield (conn.execute, _text(sql), params or {})
        return tuple(res.one()) if res.returns_rows else None

class Asyncpg(Driver):
    """asyncpg's connection: autocommit outside a transaction."""
    placeholders = "dollar"

    def state(self, conn: Any) -> int:
        if conn.is_closed():
            raise ConnectionLost("the asyncpg connection is closed")
        return INTRANS if conn.is_in_transaction() else IDLE

    def run(self, conn: Any, sql: str, params: Any) -> Steps:
        row = yield (conn.fetchrow, sql, *params) if params is not None else (conn.execute, sql)
        return tuple(row) if params is not None and row is not None else None

LIBRARY = Library()
_BY_TYPE: Dict[type, Optional[Driver]] = {}

def _match(conn: Any) -> Optional[Driver]:
    t = type(conn)
    mod = t.__module__ or ""
    if mod.startswith("asyncpg"):
        return Asyncpg(asyncio=True)
    if mod.startswith("sqlalchemy."):
        return SqlAlchemy(asyncio=mod.startswith("sqlalchemy.ext.asyncio"))
    if hasattr(conn, "pgconn") and hasattr(conn, "info"):  # psycopg 3, or a subclass from elsewhere
        return Psycopg(asyncio=hasattr(t, "__aenter__"))
    ext = sys.modules.get("psycopg2.extensions")
    return Psycopg2() if ext is not None and isinstance(conn, ext.connection) else None

def driver_for(conn: Any, asyncio: bool = False) -> Driver:
    """The driver of a connection; ArgumentTypeError, saying what to use, for anything else."""
    t = type(conn)
    drv = _BY_TYPE.get(t) or _BY_TYPE.setdefault(t, _match(conn))
    if drv is not None and drv.asyncio == asyncio:
        return drv
    name = f"{t.__module__}.{t.__name__}"
    raise ArgumentTypeError(
        f"cannot use a {name} with outbox: pass an outbox.Db, a psycopg 3 or psycopg2 connection, a SQLAlchemy "
        "Session or Connection, or run outbox.render_write()'s statement with your driver" if drv is None else
        f"an asyncio connection ({name}) cannot run outbox's blocking calls: use await outbox.write_async(conn, ...), "
        "outbox.dedupe_async or Consumer.run_async" if drv.asyncio else
        f"cannot await outbox calls on a {name}: use outbox.write, outbox.dedupe or Consumer.run")
