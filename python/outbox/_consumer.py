"""Consumers: each subscriber's own durable queue, and the library's exactly-once loop
(``outbox_loop_*``) driven on your connection, blocking or in asyncio."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Awaitable, Callable, Iterator, Optional, Tuple, Union

from . import _native
from ._config import Config, ConfigLike, with_urls
from ._db import Db, dedupe
from ._drivers import IDLE, LIBRARY, Driver, Steps, block, closed, driver_for, sleep, sqlstate_of
from ._errors import ArgumentTypeError, InvalidArgument, Stopped
from ._message import DedupeResult, Message
from ._relay import LoggerLike, log_sink

#: A handler for :meth:`Consumer.run`: ``handler(message, conn)``; raise to roll back and redeliver.
Handler = Callable[[Message, Any], Any]
#: A handler for :meth:`Consumer.run_async`: ``await handler(message, conn)`` (a plain function works too).
AsyncHandler = Callable[[Message, Any], Union[Awaitable[Any], Any]]
_TX = {_native.LOOP_SQL_BEGIN: "begin", _native.LOOP_SQL_COMMIT: "commit", _native.LOOP_SQL_ROLLBACK: "rollback"}


def _reason(exc: BaseException) -> str:
    """A Python exception as the reason text the library logs and dead-letters with."""
    return f"{type(exc).__name__}: {exc}"


def _exec(loop: Any, drv: Driver, conn: Any) -> Steps:
    kind, sql, params = loop.statement()
    try:
        if kind == _native.LOOP_SQL_DEDUPE:
            row = yield from drv.run(conn, sql, params)  # type: ignore[attr-defined]
        else:
            row = yield from getattr(drv, _TX[kind])(conn, sql)
    except Exception as exc:
        loop.exec_failed(sqlstate_of(exc), _reason(exc), closed(drv, conn))
        return
    if kind == _native.LOOP_SQL_ROLLBACK and closed(drv, conn):  # a ROLLBACK a driver skipped: the connection is gone
        loop.exec_failed(None, "the connection is closed", True)
    else:
        loop.exec_done(row)


def _handle(loop: Any, handler: Callable[..., Any], wrap: Callable[[Any, Any], Tuple[Any, Any]]) -> Steps:
    args = wrap(loop.message(), loop.db())
    try:
        yield (handler, *args)
    except Exception as exc:
        loop.handler_done(_native.HANDLER_FAILED, _reason(exc))
        return
    loop.handler_done(_native.HANDLER_OK, None)


def _actions(loop: Any, handler: Optional[Callable[..., Any]], wrap: Any, drv: Driver, conn: Any,
             stopped: threading.Event) -> Steps:
    """The loop's actions until it is done (without a handler: giving back what is in hand)."""
    while True:
        action = loop.next()
        if action == _native.LOOP_BLOCK:
            yield (block, loop.block)
        elif action == _native.LOOP_EXEC:
            yield from _exec(loop, drv, conn)
        elif action == _native.LOOP_HANDLE and handler is not None:
            yield from _handle(loop, handler, wrap)
        elif action == _native.LOOP_WAIT:
            if handler is not None:
                yield (sleep, loop.wait_ms() / 1000.0, stopped)
            loop.waited()
        else:
            return int(loop.result()) if handler is not None else 0


def _steps(loop: Any, handler: Callable[..., Any], wrap: Any, drv: Driver, conn: Any, stopped: threading.Event) -> Steps:
    """The whole loop; interrupted (Ctrl-C, a cancelled task), the delivery in hand is rolled back
    and given back uncounted, then the interruption goes on."""
    try:
        return (yield from _actions(loop, handler, wrap, drv, conn, stopped))
    except BaseException as exc:
        if not isinstance(exc, GeneratorExit):
            with contextlib.suppress(Exception):  # the original exception matters more
                loop.abort(_reason(exc))
                yield from _actions(loop, None, wrap, drv, conn, stopped)
        raise


class Consumer:
    """A subscriber: its own durable queue bound to the exchange (``outbox_consumer_*``), with a
    dead-letter queue ``<queue>.dead``. Exactly-once effect, in your transaction::

        def handle(event: outbox.Message, conn: psycopg.Connection) -> None:
            conn.execute("INSERT INTO analytics (id, kind) VALUES (%s, %s)", (event.id, event.event_type))

        with outbox.Consumer("analytics-writer") as consumer, psycopg.connect(url) as conn:
            consumer.run(handle, conn)          # until stop() or Ctrl-C

    Or iterate (``for msg in consumer:``) and acknowledge yourself, after committing.

    Args:
        name: the consumer's name (its queue's default name, and its inbox key).
        config: options (``amqp.exchange``, ``consumer.delivery_limit``, ``consumer.prefetch``...).
        amqp_url, pg_url: default ``amqp.url``/``pg.url``, else OUTBOX_AMQP_URL / OUTBOX_PG_URL.
        logger: a ``logging.Logger`` (default ``outbox.consumer``), a callable(level, message), or False.
    """

    def __init__(self, name: str, config: ConfigLike = None, *, amqp_url: Optional[str] = None,
                 pg_url: Optional[str] = None, logger: LoggerLike = None) -> None:
        self._name = str(name)
        self._config: Config = with_urls(config, pg_url, amqp_url)
        self._native: Optional[_native.Consumer] = _native.Consumer(self._config.native, self._name,
                                                                     log_sink(logger, "outbox.consumer"))
        self._stop_requested = threading.Event()

    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> Config:
        return self._config

    @property
    def delivery_limit(self) -> int:
        """Deliveries of a failing message before it is dead-lettered (``consumer.delivery_limit``)."""
        return int(self._config["consumer.delivery_limit"])

    def _handle(self) -> "_native.Consumer":
        if self._native is None:
            raise InvalidArgument("the consumer is closed")
        return self._native

    def connect(self) -> None:
        """Declares the topology and starts consuming now (otherwise the first next/run does)."""
        self._handle().connect()

    def next(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next event within ``timeout`` seconds (None: until one comes), else None. Waits in
        200 ms slices with the GIL released (Ctrl-C raises KeyboardInterrupt); Stopped after :meth:`stop`."""
        n = self._handle().next(-1 if timeout is None else max(0, int(timeout * 1000)))
        return Message(n, self) if n is not None else None

    def __iter__(self) -> Iterator[Message]:
        """Yields messages until :meth:`stop`; acknowledge each one yourself."""
        with contextlib.suppress(Stopped):
            while True:
                msg = self.next()
                if msg is not None:
                    yield msg

    def _settle(self, message: Message, how: str, *args: Any) -> None:
        h, m = self._handle(), message._handle()
        if message._settled is not None:
            raise InvalidArgument(f"the message was already settled ({message._settled})")
        message._settled = how
        try:
            getattr(h, how)(m, *args)
        except BaseException:
            if how == "dead_letter":
                message._settled = None  # not settled: it stays queued (the library says so)
            raise

    def ack(self, message: Message) -> None:
        """Acknowledges a message (after your transaction committed)."""
        self._settle(message, "ack")

    def nack(self, message: Message, requeue: bool = True) -> None:
        """Rejects a message; ``requeue`` redelivers it."""
        self._settle(message, "nack", bool(requeue))

    def dead_letter(self, message: Message, reason: str) -> None:
        """Sends a message to ``<queue>.dead`` with ``reason`` in header x-outbox-dead-reason, then acks it."""
        self._settle(message, "dead_letter", str(reason))

    def dedupe(self, conn: Any, message: Message) -> DedupeResult:
        """Records the message in the inbox in ``conn``'s current transaction; see :func:`outbox.dedupe`."""
        return dedupe(conn, self, message)

    def stop(self) -> None:
        """Asks ``next``/``run``/iteration to return. Safe from any thread and from signal handlers."""
        self._stop_requested.set()
        if self._native is not None:
            self._native.stop()

    def reset(self) -> None:
        """Clears a stop request so the consumer can be used again."""
        self._stop_requested.clear()
        self._handle().reset()

    def close(self) -> None:
        """Stops and disconnects; unacknowledged messages return to the queue. Idempotent."""
        n, self._native = self._native, None
        if n is not None:
            n.stop()
            n.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<outbox.Consumer {self._name!r} {'closed' if self._native is None else 'open'}>"

    def _drive(self, handler: Callable[..., Any], conn: Any, limit: Optional[int], idle_timeout: Optional[float],
               asyncio: bool = False, view: bool = False) -> Any:
        """The library's loop on ``conn``: the library's connection (None: the loop's own from pg.url;
        an owned Db) or a driver's, the loop's statements run through it. Returns what its pump does."""
        target = conn._c() if isinstance(conn, Db) else conn
        drv = LIBRARY if target is None or (isinstance(conn, Db) and conn.owned) else driver_for(target, asyncio)
        if drv.asyncio != asyncio:
            raise ArgumentTypeError("run_async() needs an asyncio connection (run() takes a blocking one)")
        if target is not None and drv.state(target) != IDLE:
            raise InvalidArgument("Consumer.run() needs a connection that is not inside a transaction")
        lib = drv is LIBRARY
        loop = _native.Loop(self._handle(), target if lib else None, _native.LOOP_LIBRARY if lib else
                            _native.LOOP_DRIVER_LENT, -1 if idle_timeout is None else max(0, int(idle_timeout * 1000)),
                            limit or 0, None if lib else drv.placeholders)

        def wrap(nmsg: "_native.Message", ndb: Optional["_native.Db"]) -> Tuple[Message, Any]:
            own = ndb is not None and (view or conn is None)  # the loop's transaction: a Db view of it
            return Message(nmsg, self), Db._over(ndb, LIBRARY, self._config) if own else conn

        return drv.pump(_steps(loop, handler, wrap, drv, None if lib else target, self._stop_requested))

    def run(self, handler: Handler, conn: Any = None, *, limit: Optional[int] = None,
            idle_timeout: Optional[float] = None) -> int:
        """Handles events with an exactly-once effect until :meth:`stop`, Ctrl-C, ``limit`` or
        ``idle_timeout``: the library's loop (``outbox_loop_*``), the same in every language.

        For each event, on ``conn``: BEGIN, the inbox row (an already processed event is acked without
        calling the handler), ``handler(message, conn)``, COMMIT, then ack. A raising handler rolls back
        and the event is redelivered, dead-lettered after ``consumer.delivery_limit`` attempts.

        Args:
            handler: ``handler(message, conn)``; its return value is ignored.
            conn: a psycopg 3 / psycopg2 connection or SQLAlchemy ``Session``/``Connection`` (not in
                a transaction), or an :class:`outbox.Db`; None: the loop's own connection from
                ``pg.url`` (reopened after a loss), the handler getting an :class:`outbox.Db` view.
            limit: return after this many events were handled; idle_timeout: after this many idle seconds.
        Returns:
            the number of events handled. KeyboardInterrupt on Ctrl-C (the event in progress is
            redelivered); ConnectionLost when your connection broke.
        """
        return int(self._drive(handler, conn, limit, idle_timeout))

    async def run_async(self, handler: AsyncHandler, conn: Any, *, limit: Optional[int] = None,
                        idle_timeout: Optional[float] = None) -> int:
        """:meth:`run` in asyncio, on an asyncpg connection, a psycopg ``AsyncConnection`` or a
        SQLAlchemy ``AsyncSession``: ``await handler(message, conn)`` per event; waiting and settling
        run on worker threads; cancelling the task gives the event in progress back. Returns the count."""
        return int(await self._drive(handler, conn, limit, idle_timeout, asyncio=True))

    def run_native(self, handler: Callable[[Message, Db], Any], db: Optional[Db] = None) -> None:
        """:meth:`run` on the library's connection (``db``, or the loop's own from ``pg.url``), the
        handler called as ``handler(message, tx)``: ``tx`` a Db view of the transaction, valid during the call."""
        if db is not None:
            db._native()  # the library's own connection
        self._drive(handler, db, None, None, view=True)


async def consume_async(consumer: Consumer, handler: AsyncHandler, conn: Any, *, limit: Optional[int] = None,
                        idle_timeout: Optional[float] = None) -> int:
    """``await consumer.run_async(handler, conn)`` (see :meth:`Consumer.run_async`)."""
    return await consumer.run_async(handler, conn, limit=limit, idle_timeout=idle_timeout)
