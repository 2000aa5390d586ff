"""asyncio: awaitable writes and dedupes on asyncpg and psycopg ``AsyncConnection`` (the library's
write plan and statements, awaited through the driver), and ``consume_async``, the library's
consumer loop driven in asyncio (:meth:`Consumer.run_async`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional, Union

from . import _drivers as d
from ._config import ConfigLike
from . import _native
from ._consumer import Consumer, Message
from ._db import DedupeResult, Order, _dedupe_key
from ._errors import TransactionError
from ._events import EventFields, Written, event_fields

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["write_async", "dedupe_async", "consume_async", "AsyncHandler"]

#: A handler for :func:`consume_async`: ``await handler(message, conn)`` (a plain function works too).
AsyncHandler = Callable[[Message, Any], Union[Awaitable[Any], Any]]


async def write_async(conn: Any, event: Any = None, /, *, config: ConfigLike = None,
                      **fields: Unpack[EventFields]) -> Written:
    """``await outbox.write_async(conn, ...)``: :func:`outbox.write` for asyncpg connections and
    psycopg's ``AsyncConnection``, in the connection's current transaction.

    Same event, same :class:`outbox.Written` result and the same errors as ``write``; a reused
    idempotency key raises :class:`outbox.DuplicateEvent` and, inside a transaction, leaves it
    usable (a savepoint, as ``outbox_write`` does).
    """
    drv = d.async_driver(conn)
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
    drv = d.async_driver(conn)
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
    connection or a psycopg ``AsyncConnection`` (see :meth:`Consumer.run_async`)."""
    return await consumer.run_async(handler, conn, limit=limit, idle_timeout=idle_timeout)
