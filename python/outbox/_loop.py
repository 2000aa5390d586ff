"""The library's consumer loop (``outbox_loop_*``), driven in blocking code and in asyncio.

Every rule of the exactly-once loop is the library's: the statements and their order, what a
failure means, settling (ack, requeue, dead-letter), reconnecting and the backoff. This module
only runs the statement the loop hands out on the caller's driver, calls the handler, and waits
the way its caller waits (a thread, or the event loop)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Awaitable, Callable, Optional

from . import _native
from ._drivers import sqlstate_of

BLOCK, EXEC, HANDLE, WAIT, OPEN, DONE = (_native.LOOP_BLOCK, _native.LOOP_EXEC, _native.LOOP_HANDLE,
                                         _native.LOOP_WAIT, _native.LOOP_OPEN, _native.LOOP_DONE)
SQL_BEGIN, SQL_DEDUPE, SQL_COMMIT, SQL_ROLLBACK = (_native.LOOP_SQL_BEGIN, _native.LOOP_SQL_DEDUPE,
                                                   _native.LOOP_SQL_COMMIT, _native.LOOP_SQL_ROLLBACK)
LIBRARY, DRIVER_LENT = _native.LOOP_LIBRARY, _native.LOOP_DRIVER_LENT
HANDLER_OK, HANDLER_FAILED = _native.HANDLER_OK, _native.HANDLER_FAILED


def reason(exc: BaseException) -> str:
    """A Python exception as the reason text the library logs and dead-letters with."""
    return f"{type(exc).__name__}: {exc}"


def new_loop(consumer: Any, db: Any, driver: Any, limit: Optional[int], idle_timeout: Optional[float]) -> Any:
    """A native loop: on ``db`` (a native Db, or None for the loop's own) or, with ``driver``, on
    the driver's connection."""
    idle = -1 if idle_timeout is None else max(0, int(idle_timeout * 1000))
    if driver is not None:
        return _native.Loop(consumer, None, DRIVER_LENT, idle, limit or 0, driver.placeholders)
    return _native.Loop(consumer, db, LIBRARY, idle, limit or 0, None)


def _closed(driver: Any, conn: Any) -> bool:
    try:
        return bool(driver.is_lost(conn))
    except Exception:
        return True


def _failed(loop: Any, driver: Any, conn: Any, exc: BaseException) -> None:
    loop.exec_failed(sqlstate_of(exc), reason(exc), _closed(driver, conn))


# --------------------------------------------------------------------------- blocking


def _exec(loop: Any, driver: Any, conn: Any) -> None:
    kind, sql, params = loop.statement()
    try:
        if kind == SQL_DEDUPE:
            row = driver.run(conn, sql, params)
        else:
            {SQL_BEGIN: driver.begin, SQL_COMMIT: driver.commit, SQL_ROLLBACK: driver.rollback}[kind](conn)
            row = None
    except Exception as exc:
        _failed(loop, driver, conn, exc)
        return
    _done(loop, driver, conn, kind, row)


def _done(loop: Any, driver: Any, conn: Any, kind: int, row: Any) -> None:
    """Reports a statement that went through; a ROLLBACK a driver skipped on a closed connection
    (asyncpg's, psycopg's) is reported as what it is: the connection is gone."""
    if kind == SQL_ROLLBACK and _closed(driver, conn):
        loop.exec_failed(None, "the connection is closed", True)
    else:
        loop.exec_done(row)


def _handle(loop: Any, handler: Callable[..., Any], wrap: Callable[[Any, Any], Any]) -> None:
    args = wrap(loop.message(), loop.db())
    try:
        handler(*args)
    except Exception as exc:
        loop.handler_done(HANDLER_FAILED, reason(exc))
        return
    loop.handler_done(HANDLER_OK, None)


def drive(loop: Any, handler: Callable[[Any, Any], Any], wrap: Callable[[Any, Any], Any], driver: Any, conn: Any,
          stopped: threading.Event) -> int:
    """Runs the loop to its end in this thread; returns the events handled. ``wrap(native_message,
    native_db)`` gives the handler's arguments (native_db: the library connection's transaction, or
    None on a driver's connection)."""
    try:
        while True:
            action = loop.next()
            if action == BLOCK:
                loop.block()
            elif action == EXEC:
                _exec(loop, driver, conn)
            elif action == HANDLE:
                _handle(loop, handler, wrap)
            elif action == WAIT:
                stopped.wait(loop.wait_ms() / 1000.0)
                loop.waited()
            else:
                return int(loop.result())
    except BaseException as exc:  # Ctrl-C, SystemExit: the message in hand goes back, uncounted
        _give_back(loop, lambda: _exec(loop, driver, conn), exc)
        raise


def _give_back(loop: Any, exec_one: Callable[[], None], exc: BaseException) -> None:
    try:
        loop.abort(reason(exc))
        while True:
            action = loop.next()
            if action == BLOCK:
                loop.block()
            elif action == EXEC:
                exec_one()
            elif action == WAIT:
                loop.waited()
            else:
                return
    except Exception:  # the original exception matters more
        pass


# --------------------------------------------------------------------------- asyncio


async def _off_loop(fn: Callable[[], Any]) -> Any:
    """A blocking call on a worker thread. When the task is cancelled meanwhile, the call is let
    finish first (the native loop is used by one thread at a time), then the cancellation goes on."""
    fut = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait({fut})
        raise


async def _exec_async(loop: Any, driver: Any, conn: Any) -> None:
    kind, sql, params = loop.statement()
    try:
        if kind == SQL_DEDUPE:
            row = await driver.run(conn, sql, params)
        else:
            await {SQL_BEGIN: driver.begin, SQL_COMMIT: driver.commit, SQL_ROLLBACK: driver.rollback}[kind](conn)
            row = None
    except Exception as exc:
        _failed(loop, driver, conn, exc)
        return
    _done(loop, driver, conn, kind, row)


async def _handle_async(loop: Any, handler: Callable[[Any, Any], Any], wrap: Callable[[Any, Any], Any]) -> None:
    args = wrap(loop.message(), loop.db())
    try:
        r = handler(*args)
        if inspect.isawaitable(r):
            await r
    except Exception as exc:
        loop.handler_done(HANDLER_FAILED, reason(exc))
        return
    loop.handler_done(HANDLER_OK, None)


async def _sleep(ms: int, stopped: Callable[[], bool]) -> None:
    left = ms / 1000.0
    while left > 0 and not stopped():
        await asyncio.sleep(min(left, 0.1))
        left -= 0.1


async def drive_async(loop: Any, handler: Callable[[Any, Any], Awaitable[Any]], wrap: Callable[[Any, Any], Any],
                      driver: Any, conn: Any, stopped: Callable[[], bool]) -> int:
    """:func:`drive` for asyncio: blocking steps on worker threads, statements awaited."""
    try:
        while True:
            action = loop.next()
            if action == BLOCK:
                await _off_loop(loop.block)
            elif action == EXEC:
                await _exec_async(loop, driver, conn)
            elif action == HANDLE:
                await _handle_async(loop, handler, wrap)
            elif action == WAIT:
                await _sleep(loop.wait_ms(), stopped)
                loop.waited()
            else:
                return int(loop.result())
    except BaseException as exc:  # cancelled: roll back, give the message back (shielded)
        await asyncio.shield(_give_back_async(loop, driver, conn, exc))
        raise


async def _give_back_async(loop: Any, driver: Any, conn: Any, exc: BaseException) -> None:
    try:
        loop.abort(reason(exc))
        while True:
            action = loop.next()
            if action == BLOCK:
                await asyncio.to_thread(loop.block)
            elif action == EXEC:
                await _exec_async(loop, driver, conn)
            elif action == WAIT:
                loop.waited()
            else:
                return
    except Exception:
        pass
