"""Drivers: one protocol for every connection the package takes, blocking or asyncio.

A driver's I/O methods (``run``, ``begin``, ``commit``, ``rollback``) are *steps*: generators that
yield the driver calls to make as ``(function, *args)`` and receive each call's result. A driver's
``pump`` makes the calls: ``drive`` in this thread, or ``drive_async``, which awaits what a call
returns and runs blocking calls on a worker thread. So psycopg's ``Connection`` and
``AsyncConnection`` (and SQLAlchemy's sessions) share one class, and the write plan
(``outbox_write_plan_*``), the dedupe statement (``outbox_render_dedupe``) and the consumer loop
(``outbox_loop_*``) are driven once for both. The statements, what a failure means and what comes
next are the library's; a driver only runs statements and reports.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
from typing import Any, Callable, Coroutine, Dict, Generator, Optional, Tuple

from . import _native
from ._config import ConfigLike, native_config
from ._errors import ArgumentTypeError, ConnectionLost, Error, InternalError, error_class
from ._events import Written
from ._message import DedupeResult, Order

IDLE, INTRANS, INERROR, UNKNOWN = _native.TX_IDLE, _native.TX_INTRANS, _native.TX_INERROR, _native.TX_UNKNOWN
Steps = Generator[Tuple[Any, ...], Any, Any]
DedupeKey = Tuple[str, str, Optional[str], Optional[str], int]  # consumer, event id, aggregate type and id, seq
_TUPLES_OK = 2  # libpq's PGRES_TUPLES_OK: rows came back (psycopg's cursor.pgresult.status)


# --------------------------------------------------------------------------- pumps


def block(fn: Callable[[], Any]) -> Any:
    """A blocking native call (on a worker thread under asyncio)."""
    return fn()


def sleep(seconds: float, stopped: threading.Event) -> None:
    """A wait that a stop request cuts short."""
    stopped.wait(seconds)


async def _block_async(fn: Callable[[], Any]) -> Any:
    # Cancelled meanwhile: the call is let finish (the native handle is one thread's at a time).
    fut = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait({fut})
        raise


async def _sleep_async(seconds: float, stopped: threading.Event) -> None:
    while seconds > 0 and not stopped.is_set():
        await asyncio.sleep(min(seconds, 0.1))
        seconds -= 0.1


_ASYNC: Dict[Any, Any] = {block: _block_async, sleep: _sleep_async}


async def _pump(steps: Steps, awaits: bool) -> Any:
    result = error = None
    while True:
        try:
            op = steps.throw(error) if error is not None else steps.send(result)
        except StopIteration as done:
            return done.value
        try:
            result, error = (_ASYNC.get(op[0], op[0]) if awaits else op[0])(*op[1:]), None
            if awaits and inspect.isawaitable(result):
                result = await result
        except BaseException as exc:  # into the steps: a KeyboardInterrupt or a cancellation too
            result, error = None, exc


def drive(steps: Steps) -> Any:
    """Runs steps in this thread; returns what they return."""
    coro = _pump(steps, False)
    try:
        coro.send(None)  # nothing is awaited: it runs to its end at once
    except StopIteration as done:
        return done.value
    raise InternalError("a blocking driver suspended")  # pragma: no cover


def drive_async(steps: Steps) -> Coroutine[Any, Any, Any]:
    """Runs steps in asyncio: ``await drive_async(steps)``."""
    return _pump(steps, True)


# --------------------------------------------------------------------------- errors


def _cause(exc: BaseException) -> BaseException:
    orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's exception
    return orig if isinstance(orig, BaseException) else exc


def sqlstate_of(exc: BaseException) -> Optional[str]:
    e = _cause(exc)
    s = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)  # psycopg 3, asyncpg / psycopg2
    if s is None and type(exc).__name__ == "PendingRollbackError":  # SQLAlchemy: an aborted transaction
        s = "25P02"
    return s if isinstance(s, str) and len(s) == 5 else None


def _text(exc: BaseException) -> str:
    e = _cause(exc)
    diag = getattr(e, "diag", None)
    return getattr(diag, "message_primary", None) or str(e).strip() or type(e).__name__


_LOST_TYPES = ("OperationalError", "InterfaceError", "ConnectionDoesNotExistError", "ConnectionFailureError")


def _lost(exc: BaseException) -> bool:
    """A driver error without a SQLSTATE that says the connection is gone."""
    e = _cause(exc)
    return bool(getattr(exc, "connection_invalidated", False)) or isinstance(e, (OSError, EOFError)) or \
        any(t.__name__ in _LOST_TYPES for t in type(e).__mro__)


def mapped(exc: BaseException, context: str) -> Error:
    """A driver's exception as the library's error: the status the library gives its SQLSTATE."""
    state = sqlstate_of(exc)
    status = _native.STATUS["CONNECTION"] if state is None and _lost(exc) else _native.status_for_sqlstate(state)
    where = f" (SQLSTATE {state})" if state else ""
    return error_class(status)(f"{context}: {_text(exc)}{where}", sqlstate=state)


def closed(drv: "Driver", conn: Any) -> bool:
    try:
        return bool(drv.lost(conn))
    except Exception:
        return True


# --------------------------------------------------------------------------- the protocol


class Driver:
    """One driver family: ``state`` (a TX_* state; ConnectionLost when closed), ``autocommit``,
    ``lost``, the steps ``run(conn, sql, params)`` (the first row, or None), ``begin``, ``commit``,
    ``rollback(conn, sql)``, and ``write``/``dedupe``, which return their result (asyncio: an
    awaitable of it)."""

    placeholders = "format"

    def __init__(self, asyncio: bool = False) -> None:
        self.asyncio = asyncio
        self.pump = drive_async if asyncio else drive

    def autocommit(self, conn: Any) -> bool:
        return bool(conn.autocommit)

    def write(self, conn: Any, fields: Tuple[Any, ...], config: ConfigLike) -> Any:
        return self.pump(self._write(conn, fields, config))

    def dedupe(self, conn: Any, key: DedupeKey, config: ConfigLike) -> Any:
        return self.pump(self._dedupe(conn, key, config))

    def _write(self, conn: Any, fields: Tuple[Any, ...], config: ConfigLike) -> Steps:
        state = self.state(conn)  # outside autocommit the driver begins at the first statement
        tx = INERROR if state == INERROR else INTRANS if state == INTRANS or not self.autocommit(conn) else IDLE
        plan = _native.WritePlan(native_config(config), fields, tx, self.placeholders)
        sqlstate = None  # of the driver's last error: the error raised carries it
        while (st := plan.next()) is not None:
            try:  # statements without parameters (the savepoint's) run as they are
                row = yield from self.run(conn, st[1], st[2] or None)
            except Exception as exc:
                sqlstate = sqlstate_of(exc)
                plan.failed(sqlstate, _constraint(exc), _text(exc), closed(self, conn) or (sqlstate is None and _lost(exc)))
                continue
            plan.done(row)
        try:
            return Written(*plan.result())
        except Error as e:
            e.sqlstate = e.sqlstate or sqlstate
            raise

    def _dedupe(self, conn: Any, key: DedupeKey, config: ConfigLike) -> Steps:
        native = native_config(config, self.placeholders)
        sql, params = _native.render_dedupe(native, *key)
        try:
            row = yield from self.run(conn, sql, params)
        except Exception as exc:
            raise mapped(exc, "outbox dedupe") from exc
        if row is None:
            raise InternalError("outbox dedupe: the inbox statement returned no row")
        return result(_native.dedupe_interpret(native, key[2], key[3], key[4], row[0] is True,
                                               None if row[1] is None else int(row[1])))


def _constraint(exc: BaseException) -> Optional[str]:
    e = _cause(exc)
    diag = getattr(e, "diag", None)
    name = getattr(diag, "constraint_name", None) if diag is not None else getattr(e, "constraint_name", None)
    return name if isinstance(name, str) else None


def result(t: Tuple[bool, int, int]) -> DedupeResult:
    return DedupeResult(bool(t[0]), Order(t[1]), int(t[2]))


class Library(Driver):
    """The library's own connection (a native Db): the library's calls, not the plan."""

    placeholders = "dollar"

    def state(self, conn: Any) -> int:
        return int(conn.tx_state())

    def autocommit(self, conn: Any) -> bool:
        return True

    def lost(self, conn: Any) -> bool:
        return self.state(conn) == UNKNOWN

    def begin(self, conn: Any, sql: str) -> Steps:  # a lost owned connection is reopened here
        if self.state(conn) in (IDLE, UNKNOWN):
            yield (conn.exec, sql)

    def commit(self, conn: Any, sql: str) -> Steps:
        yield (conn.exec, sql)

    def rollback(self, conn: Any, sql: str) -> Steps:  # never reopens a lost connection
        if self.state(conn) not in (IDLE, UNKNOWN):
            yield (conn.exec, sql)

    def write(self, conn: Any, fields: Tuple[Any, ...], config: ConfigLike) -> Any:
        return Written(*conn.write(fields))

    def dedupe(self, conn: Any, key: DedupeKey, config: ConfigLike) -> Any:
        return result(conn.dedupe(*key))


class Psycopg(Driver):
    """psycopg 3: ``Connection`` and ``AsyncConnection``."""

    def state(self, conn: Any) -> int:
        if conn.closed:
            raise ConnectionLost("the psycopg connection is closed")
        return int(conn.info.transaction_status)

    def lost(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken) or int(conn.info.transaction_status) == UNKNOWN

    def run(self, conn: Any, sql: str, params: Any) -> Steps:
        cur = yield (conn.execute, sql, params)
        res = cur.pgresult  # rows came back (cur.description would build a Column per field)
        return (yield (cur.fetchone,)) if res is not None and res.status == _TUPLES_OK else None

    def begin(self, conn: Any, sql: str) -> Steps:  # outside autocommit psycopg begins by itself
        if conn.autocommit and self.state(conn) == IDLE:
            yield (conn.execute, sql)

    def commit(self, conn: Any, sql: str) -> Steps:
        yield (conn.commit,)

    def rollback(self, conn: Any, sql: str) -> Steps:
        yield (conn.rollback,)


class Psycopg2(Driver):
    """psycopg2's connection: outside autocommit it begins at the first statement, as here."""

    def state(self, conn: Any) -> int:
        if conn.closed:
            raise ConnectionLost("the psycopg2 connection is closed")
        return int(conn.info.transaction_status)

    def lost(self, conn: Any) -> bool:
        return bool(conn.closed) or int(conn.info.transaction_status) == UNKNOWN

    def run(self, conn: Any, sql: str, params: Any) -> Steps:
        with conn.cursor() as cur:
            yield (cur.execute, sql, params)
            return (yield (cur.fetchone,)) if cur.description is not None else None

    def begin(self, conn: Any, sql: str) -> Steps:
        if conn.autocommit and self.state(conn) == IDLE:
            yield from self.run(conn, sql, None)

    def commit(self, conn: Any, sql: str) -> Steps:
        if conn.autocommit:
            yield from self.run(conn, sql, None)
        else:
            yield (conn.commit,)

    def rollback(self, conn: Any, sql: str) -> Steps:
        if not conn.autocommit:
            yield (conn.rollback,)
        elif self.state(conn) not in (IDLE, UNKNOWN):
            yield from self.run(conn, sql, None)


class SqlAlchemy(Driver):
    """SQLAlchemy's ``Session``/``Connection`` and their asyncio forms: ``text()`` statements in
    the session's transaction, which SQLAlchemy begins at the first statement."""

    placeholders = "named"

    def state(self, conn: Any) -> int:
        return INTRANS if conn.in_transaction() else IDLE

    def autocommit(self, conn: Any) -> bool:
        return False

    def lost(self, conn: Any) -> bool:
        c = conn.connection() if not self.asyncio and callable(getattr(conn, "connection", None)) else conn
        return bool(getattr(c, "invalidated", False) or getattr(c, "closed", False))

    def run(self, conn: Any, sql: str, params: Any) -> Steps:
        from sqlalchemy import text

        res = yield (conn.execute, text(sql), params or {})
        return tuple(res.one()) if res.returns_rows else None

    def begin(self, conn: Any, sql: str) -> Steps:
        yield from ()

    def commit(self, conn: Any, sql: str) -> Steps:
        yield (conn.commit,)

    def rollback(self, conn: Any, sql: str) -> Steps:
        yield (conn.rollback,)


class Asyncpg(Driver):
    """asyncpg's connection: autocommit outside a transaction."""

    placeholders = "dollar"

    def state(self, conn: Any) -> int:
        if conn.is_closed():
            raise ConnectionLost("the asyncpg connection is closed")
        return INTRANS if conn.is_in_transaction() else IDLE

    def autocommit(self, conn: Any) -> bool:
        return True

    def lost(self, conn: Any) -> bool:
        return bool(conn.is_closed())

    def run(self, conn: Any, sql: str, params: Any) -> Steps:
        if params is None:
            yield (conn.execute, sql)
            return None
        row = yield (conn.fetchrow, sql, *params)
        return tuple(row) if row is not None else None

    def begin(self, conn: Any, sql: str) -> Steps:
        if not conn.is_in_transaction():
            yield (conn.execute, sql)

    def commit(self, conn: Any, sql: str) -> Steps:
        yield (conn.execute, sql)

    def rollback(self, conn: Any, sql: str) -> Steps:
        if not conn.is_closed() and conn.is_in_transaction():
            yield (conn.execute, sql)


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
    drv = _BY_TYPE[t] if t in _BY_TYPE else _BY_TYPE.setdefault(t, _match(conn))
    if drv is not None and drv.asyncio == asyncio:
        return drv
    name = f"{t.__module__}.{t.__name__}"
    if drv is None:
        raise ArgumentTypeError(f"cannot use a {name} with outbox: pass an outbox.Db, a psycopg 3 or psycopg2 "
                                "connection, a SQLAlchemy Session or Connection (awaited: asyncpg, psycopg's "
                                "AsyncConnection, SQLAlchemy's AsyncSession), or run outbox.render_write()'s "
                                "statement with your driver")
    if drv.asyncio:
        raise ArgumentTypeError(f"an asyncio connection ({name}) cannot run outbox's blocking calls: use await "
                                "outbox.write_async(conn, ...) / outbox.dedupe_async, or Consumer.run_async")
    raise ArgumentTypeError(f"cannot await outbox calls on a {name}: pass an asyncpg connection, a psycopg "
                            "AsyncConnection or a SQLAlchemy AsyncSession (for this one, call outbox.write)")
