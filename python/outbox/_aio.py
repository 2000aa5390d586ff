"""asyncio: awaitable writes and dedupes on asyncpg and psycopg ``AsyncConnection`` (the library's
rendered statements, awaited through the driver), and an asyncio consumer loop over the C
consumer calls (``outbox_consumer_next`` and ``outbox_consumer_settle`` on worker threads, off the
event loop). The exactly-once decision stays the library's (``outbox_consumer_settle``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional, Tuple, Union

from . import _drivers as d
from ._config import ConfigLike
from . import _loop, _native
from ._consumer import Consumer, Message
from ._db import DedupeResult, Order, _dedupe_key
from ._errors import ArgumentTypeError, ConnectionLost, TransactionError
from ._events import EventFields, Written, event_fields

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["write_async", "dedupe_async", "consume_async", "AsyncHandler"]

#: A handler for :func:`consume_async`: ``await handler(message, conn)`` (a plain function works too).
AsyncHandler = Callable[[Message, Any], Union[Awaitable[Any], Any]]


class _AsyncDriver:
    placeholders = "format"

    def state(self, conn: Any) -> int:
        raise NotImplementedError

    async def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        raise NotImplementedError

    async def simple(self, conn: Any, sql: str) -> None:
        await self.run(conn, sql, None)


class _Asyncpg(_AsyncDriver):
    placeholders = "dollar"

    def state(self, conn: Any) -> int:
        if conn.is_closed():
            raise ConnectionLost("the asyncpg connection is closed")
        return d.INTRANS if conn.is_in_transaction() else d.IDLE  # asyncpg: autocommit outside a transaction

    async def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        row = await conn.fetchrow(sql, *(params or ()))
        return tuple(row) if row is not None else None

    async def simple(self, conn: Any, sql: str) -> None:
        await conn.execute(sql)

    async def begin(self, conn: Any) -> None:
        if not conn.is_in_transaction():
            await conn.execute("BEGIN")

    async def commit(self, conn: Any) -> None:
        await conn.execute("COMMIT")

    async def rollback(self, conn: Any) -> None:
        if not conn.is_closed() and conn.is_in_transaction():
            await conn.execute("ROLLBACK")

    def is_lost(self, conn: Any) -> bool:
        return bool(conn.is_closed())

    def autocommit(self, conn: Any) -> bool:
        return True


class _PsycopgAsync(_AsyncDriver):
    def state(self, conn: Any) -> int:
        if conn.closed:
            raise ConnectionLost("the psycopg connection is closed")
        return int(conn.info.transaction_status)

    async def run(self, conn: Any, sql: str, params: Any) -> Optional[Tuple[Any, ...]]:
        cur = await conn.execute(sql, params)
        res = cur.pgresult  # rows came back: as the sync driver checks it (_drivers.Psycopg3.run)
        return await cur.fetchone() if res is not None and res.status == d._TUPLES_OK else None

    async def begin(self, conn: Any) -> None:
        if conn.autocommit and int(conn.info.transaction_status) == d.IDLE:
            await conn.execute("BEGIN")

    async def commit(self, conn: Any) -> None:
        await conn.commit()

    async def rollback(self, conn: Any) -> None:
        await conn.rollback()

    def is_lost(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken) or int(conn.info.transaction_status) == d.UNKNOWN

    def autocommit(self, conn: Any) -> bool:
        return bool(conn.autocommit)


_ASYNCPG, _PSYCOPG = _Asyncpg(), _PsycopgAsync()


def _driver(conn: Any) -> _AsyncDriver:
    mod = type(conn).__module__ or ""
    if mod.startswith("asyncpg"):
        return _ASYNCPG
    if (mod == "psycopg" or mod.startswith("psycopg.")) and hasattr(type(conn), "__aenter__") and hasattr(conn, "pgconn"):
        return _PSYCOPG
    raise ArgumentTypeError(
        f"cannot await outbox calls on a {mod}.{type(conn).__name__}: pass an asyncpg connection or a "
        "psycopg.AsyncConnection (for a synchronous connection, call outbox.write)"
    )


async def write_async(conn: Any, event: Any = None, /, *, config: ConfigLike = None,
                      **fields: Unpack[EventFields]) -> Written:
    """``await outbox.write_async(conn, ...)``: :func:`outbox.write` for asyncpg connections and
    psycopg's ``AsyncConnection``, in the connection's current transaction.

    Same event, same :class:`outbox.Written` result and the same errors as ``write``; a reused
    idempotency key raises :class:`outbox.DuplicateEvent` and, inside a transaction, leaves it
    usable (a savepoint, as ``outbox_write`` does).
    """
    drv = _driver(conn)
    prof = d.profile(config, drv.placeholders)
    plan = _native.WritePlan(prof.native, event_fields(event, fields), d.plan_tx(drv.state(conn), drv.autocommit(conn)),
                             drv.placeholders)
    state = None
    while True:  # the library's write plan (outbox_write_plan_*), each statement awaited on the driver
        st = plan.next()
        if st is None:
            return d.result(plan, state)
        step, sql, params = st
        try:
            row = await (drv.run(conn, sql, params) if step in d._ROWS else drv.simple(conn, sql))
        except Exception as exc:
            why = d.failure(exc, drv.is_lost(conn))  # type: ignore[attr-defined]
            state = why[0]
            plan.failed(*why)
            continue
        plan.done(row)


async def dedupe_async(conn: Any, consumer: Any, event: Any, *, seq: Optional[int] = None,
                       aggregate_type: Optional[str] = None, aggregate_id: Optional[str] = None,
                       config: ConfigLike = None) -> DedupeResult:
    """``await outbox.dedupe_async(conn, consumer, message)``: :func:`outbox.dedupe` on an asyncpg
    connection or a psycopg ``AsyncConnection``, in its current transaction."""
    drv = _driver(conn)
    if config is None and isinstance(consumer, Consumer):
        config = consumer.config
    key = _dedupe_key(consumer, event, seq, aggregate_type, aggregate_id)
    prof = d.profile(config, drv.placeholders)
    sql, params = d.render_dedupe(prof, key)
    if drv.state(conn) == d.INERROR:
        raise TransactionError("the caller's transaction is aborted; roll it back before deduplicating")
    try:
        row = await drv.run(conn, sql, params)
    except Exception as exc:
        raise d.mapped(exc, "outbox dedupe") from exc
    first, order, prev = d.dedupe_row(prof, row, key)
    return DedupeResult(first, Order(order), prev)


# --------------------------------------------------------------------------- the consumer loop


async def consume_async(consumer: Consumer, handler: AsyncHandler, conn: Any, *, limit: Optional[int] = None,
                        idle_timeout: Optional[float] = None) -> int:
    """``await consumer.run_async(handler, conn)``: :meth:`Consumer.run` for asyncio, on an asyncpg
    connection or a psycopg ``AsyncConnection``: the library's consumer loop (``outbox_loop_*``),
    its statements awaited on ``conn``, ``await handler(message, conn)`` per event.

    The blocking C calls (waiting for a message, settling it) run on worker threads; the event
    loop keeps running. Cancelling the task rolls back the event in progress and gives it back
    (redelivered, no attempt counted). Returns the number of events handled.
    """
    drv = _driver(conn)
    if drv.state(conn) != d.IDLE:
        raise TransactionError("consume_async() needs a connection that is not inside a transaction")
    loop = _loop.new_loop(consumer._handle(), None, drv, limit, idle_timeout)

    def wrap(nmsg: Any, _ndb: Any) -> Tuple[Message, Any]:
        return Message(nmsg, consumer), conn

    return await _loop.drive_async(loop, handler, wrap, drv, conn, consumer._stop_requested.is_set)
