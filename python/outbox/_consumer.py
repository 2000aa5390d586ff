"""Consumers: each subscriber's own durable queue, messages, and the exactly-once run loop."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterator, Optional, Tuple

from . import _native
from ._config import Config, ConfigLike, with_urls
from . import _drivers, _loop
from ._db import Db, DedupeResult, _dedupe_on, _DriverDb, _Owned, _Psycopg3
from ._message import Message
from ._errors import InvalidArgument, Stopped, TransactionError
from ._relay import LoggerLike, log_sink

__all__ = ["Consumer", "Message", "Handler"]

_log = logging.getLogger("outbox.consumer")

#: A handler for :meth:`Consumer.run`: ``handler(message, conn)``; raise to roll back and redeliver.
Handler = Callable[["Message", Any], Any]



class Consumer:
    """A subscriber: its own durable queue bound to the exchange (``outbox_consumer_*``).

    The queue (``consumer.queue``, default the name; a quorum queue by default) gets a
    dead-letter queue ``<queue>.dead``. Messages that are not events are dead-lettered at once.

    Exactly-once effect, in your own transaction and with your own psycopg connection::

        def handle(event: outbox.Message, conn: psycopg.Connection) -> None:
            conn.execute("INSERT INTO analytics (id, kind) VALUES (%s, %s)", (event.id, event.event_type))

        with outbox.Consumer("analytics-writer") as consumer, psycopg.connect(url) as conn:
            consumer.run(handle, conn)          # until stop() or Ctrl-C

    Or iterate (and acknowledge yourself, after committing)::

        for msg in consumer:
            with msg:
                ...
                msg.ack()

    Args:
        name: the consumer's name (its queue's default name, and its inbox key).
        config: options (``amqp.exchange``, ``consumer.delivery_limit``, ``consumer.prefetch``...).
        amqp_url, pg_url: default ``amqp.url``/``pg.url``, else OUTBOX_AMQP_URL / OUTBOX_PG_URL.
        logger: a ``logging.Logger`` (default ``outbox.consumer``), a callable(level, message), or False.
    """

    def __init__(
        self,
        name: str,
        config: ConfigLike = None,
        *,
        amqp_url: Optional[str] = None,
        pg_url: Optional[str] = None,
        logger: LoggerLike = None,
    ) -> None:
        self._name = str(name)
        self._config: Config = with_urls(config, pg_url, amqp_url, need_pg=True, need_amqp=True)
        self._native: Optional[_native.Consumer] = _native.Consumer(
            self._config.native, self._name, log_sink(logger, "outbox.consumer")
        )
        self._stop_requested = threading.Event()

    # -- properties
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
        n = self._native
        if n is None:
            raise InvalidArgument("the consumer is closed")
        return n

    # -- plumbing
    def connect(self) -> None:
        """Declares the topology and starts consuming now (otherwise the first next/run does)."""
        self._handle().connect()

    def next(self, timeout: Optional[float] = None) -> Optional[Message]:
        """Waits for the next event, at most ``timeout`` seconds (None: until one comes).

        Waits in 200 ms slices with the GIL released; Ctrl-C raises KeyboardInterrupt (a
        message received but not returned stays unacknowledged and is redelivered).

        Returns:
            the :class:`Message`, or None when the timeout ran out.
        Raises:
            Stopped: after :meth:`stop`.
        """
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        n = self._handle().next(ms)
        return Message(n, self) if n is not None else None

    def __iter__(self) -> Iterator[Message]:
        """Yields messages until :meth:`stop`; acknowledge each one yourself."""
        while True:
            try:
                msg = self.next()
            except Stopped:
                return
            if msg is not None:
                yield msg

    @staticmethod
    def _settle(message: Message, how: str) -> None:
        if message._settled is not None:
            raise InvalidArgument(f"the message was already settled ({message._settled})")
        message._settled = how

    def ack(self, message: Message) -> None:
        """Acknowledges a message (after your transaction committed)."""
        h, m = self._handle(), message._handle()
        self._settle(message, "acked")
        h.ack(m)

    def nack(self, message: Message, requeue: bool = True) -> None:
        """Rejects a message; ``requeue`` redelivers it."""
        h, m = self._handle(), message._handle()
        self._settle(message, "nacked")
        h.nack(m, bool(requeue))

    def dead_letter(self, message: Message, reason: str) -> None:
        """Sends a message to ``<queue>.dead`` with ``reason`` in header x-outbox-dead-reason, then acks it."""
        h, m = self._handle(), message._handle()
        self._settle(message, "dead-lettered")
        try:
            h.dead_letter(m, str(reason))
        except BaseException:
            message._settled = None  # not settled: it stays queued (the library says so)
            raise

    def dedupe(self, conn: Any, message: Message) -> DedupeResult:
        """Records the message in the inbox in ``conn``'s current transaction (one is begun the
        driver's way when none is open); see :func:`outbox.dedupe`."""
        if isinstance(conn, Db):
            return _dedupe_on(conn, self, message)
        with Db.wrap(conn, config=self._config) as db:
            return _dedupe_on(db, self, message)

    def stop(self) -> None:
        """Asks ``next``/``run``/iteration to return. Safe from any thread and from signal handlers."""
        self._stop_requested.set()
        n = self._native
        if n is not None:
            n.stop()

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

    # -- the run loop: the library's (outbox_loop_*, python/outbox/_loop.py)
    def _loop_for(self, conn: Any, limit: Optional[int], idle_timeout: Optional[float]) -> Tuple[Any, Any, Any]:
        """(native loop, driver or None, connection for the driver) for ``conn``."""
        if conn is None:
            return _loop.new_loop(self._handle(), None, None, limit, idle_timeout), None, None
        db = conn if isinstance(conn, Db) else Db.wrap(conn, config=self._config)
        if isinstance(db, _DriverDb) or not isinstance(db._driver, (_Psycopg3, _Owned)):
            # A driver that keeps its own transaction state (psycopg2, SQLAlchemy, a binary psycopg
            # wheel): the loop's statements go through it.
            drv = db._drv if isinstance(db, _DriverDb) else _drivers.sync_driver(conn)
            target = db._conn if isinstance(db, _DriverDb) else conn
            if db.tx_state.name != "IDLE":
                raise InvalidArgument("Consumer.run() needs a connection that is not inside a transaction")
            return _loop.new_loop(self._handle(), None, drv, limit, idle_timeout), drv, target
        if db.tx_state.name != "IDLE":
            raise InvalidArgument("Consumer.run() needs a connection that is not inside a transaction")
        return _loop.new_loop(self._handle(), db._handle(), None, limit, idle_timeout), None, None

    def _wrap_for(self, conn: Any) -> Callable[[Any, Any], Tuple[Any, Any]]:
        """The handler's arguments: the Message, and ``conn`` (or, on the loop's own connection, an
        :class:`outbox.Db` view of its transaction, valid during the call)."""

        def wrap(nmsg: "_native.Message", ndb: Optional["_native.Db"]) -> Tuple[Any, Any]:
            if conn is not None or ndb is None:
                return Message(nmsg, self), conn
            tx = Db.__new__(Db)
            tx._native, tx._config, tx._ptr = ndb, self._config, 0
            tx._driver = _Owned(tx)
            return Message(nmsg, self), tx

        return wrap

    def run(
        self,
        handler: Handler,
        conn: Any = None,
        *,
        limit: Optional[int] = None,
        idle_timeout: Optional[float] = None,
    ) -> int:
        """Handles events with an exactly-once effect until :meth:`stop`, Ctrl-C, ``limit`` or
        ``idle_timeout``: the library's consumer loop (``outbox_loop_*``), the same in every language.

        For each event, on ``conn``: BEGIN, record it in the inbox (a redelivered, already
        processed event is acknowledged without calling the handler), ``handler(message, conn)``
        with your own statements on ``conn``, COMMIT, then ack. When the handler raises, the
        transaction is rolled back and the message redelivered; after ``consumer.delivery_limit``
        attempts it goes to the dead-letter queue with the exception in x-outbox-dead-reason. A lost
        broker connection is reopened (the next address of ``amqp.url`` first), with backoff.

        Args:
            handler: ``handler(message, conn)``; its return value is ignored.
            conn: a psycopg 3 or psycopg2 connection or SQLAlchemy ``Session``/``Connection`` (not
                inside a transaction), or an :class:`outbox.Db`; None: the loop opens (and after a
                loss reopens) its own connection from ``pg.url``/OUTBOX_PG_URL, and the handler gets
                an :class:`outbox.Db` view of the transaction.
            limit: return after this many events were handled (committed).
            idle_timeout: return after this many seconds without a message.
        Returns:
            the number of events handled.
        Raises:
            KeyboardInterrupt: on Ctrl-C, after rolling back the event in progress (it is redelivered).
            ConnectionLost: the lent connection broke (the message is redelivered).
        """
        loop, drv, target = self._loop_for(conn, limit, idle_timeout)
        return _loop.drive(loop, handler, self._wrap_for(conn), drv, target, self._stop_requested)

    async def run_async(self, handler: Callable[["Message", Any], Any], conn: Any, *, limit: Optional[int] = None,
                        idle_timeout: Optional[float] = None) -> int:
        """:meth:`run` for asyncio, on an asyncpg connection or a psycopg ``AsyncConnection``: the
        library's loop, its statements awaited on ``conn``, ``await handler(message, conn)`` per
        event. Waiting for a message and settling it (blocking C calls) run on worker threads, so
        the event loop keeps running; cancelling the task rolls back the event in progress and gives
        it back (redelivered, no attempt counted). Returns the number of events handled."""
        drv = _drivers.async_driver(conn)
        if drv.state(conn) != _drivers.IDLE:
            raise TransactionError("run_async() needs a connection that is not inside a transaction")
        loop = _loop.new_loop(self._handle(), None, drv, limit, idle_timeout)

        def wrap(nmsg: "_native.Message", _ndb: Any) -> Tuple[Message, Any]:
            return Message(nmsg, self), conn

        return await _loop.drive_async(loop, handler, wrap, drv, conn, self._stop_requested.is_set)

    def run_native(self, handler: Callable[[Message, Db], Any], db: Optional[Db] = None) -> None:
        """:meth:`run` on the library's connection: ``db`` (an :class:`outbox.Db`), or None for the
        loop's own from ``pg.url``; the handler is called as ``handler(message, tx)`` with ``tx`` an
        :class:`outbox.Db` view of the transaction, valid only during the call."""
        loop = _loop.new_loop(self._handle(), db._handle() if db is not None else None, None, None, None)
        _loop.drive(loop, handler, self._wrap_for(None), None, None, self._stop_requested)
