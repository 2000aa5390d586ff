"""The broker side: the relay (committed events -> RabbitMQ, publisher confirms) and consumers (a queue of their own,
and the library's exactly-once loop driven on your connection)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from typing import Any, Awaitable, Callable, Iterator, Optional, Tuple, Union

from . import _native
from ._config import Config, ConfigLike, with_urls
from ._db import Db, dedupe
from ._drivers import IDLE, LIBRARY, Driver, Steps, block, closed, driver_for, failure, sleep
from ._errors import ArgumentTypeError, InvalidArgument, PermanentFailure, Stopped
from ._events import Closing, DedupeResult, Message

_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)
LoggerLike = Union[logging.Logger, Callable[[int, str], Any], None, bool]

def log_sink(logger: LoggerLike, default: str) -> Optional[Callable[[int, str], None]]:
    """The native log callback for a logging.Logger (None: ``default``'s), a callable(level, message) or False."""
    if logger is False:
        return None
    log = logging.getLogger(default) if logger is None or logger is True else logger

    def sink(level: int, message: str) -> None:
        lvl = _LEVELS[level] if 0 <= level < len(_LEVELS) else logging.INFO
        if not isinstance(log, logging.Logger):
            log(lvl, message)
        elif log.isEnabledFor(lvl):
            log.log(lvl, "%s", message)

    return sink

@dataclasses.dataclass(frozen=True)
class RelayStats:
    """What one relay step did (``outbox_relay_stats``); ``claimed``, ``claim_us`` and ``mark_us``
    keep version 1's names: the events read, the time reading them, the time recording outcomes."""
    claimed: int = 0  #: events read (new ones, and ones due for a retry)
    published: int = 0  #: confirmed by the broker and recorded as published
    failed: int = 0  #: nacked or returned: parked, retried later (or now FAILED)
    dead: int = 0  #: of ``failed``, those that reached relay.max_attempts: FAILED
    held_back: int = 0  #: an earlier event of their aggregate was not confirmed or is parked
    unroutable: int = 0  #: returned by the broker: no queue bound to the exchange
    nacked: int = 0  #: negatively confirmed by the broker
    unconfirmed: int = 0  #: no confirm within relay.confirm_timeout_ms: left PENDING
    claim_us: int = 0
    publish_us: int = 0
    mark_us: int = 0
    total_us: int = 0
    blocked: bool = False  #: the broker blocked publishing (resource alarm) during the step

    def __add__(self, other: "RelayStats") -> "RelayStats":
        return RelayStats(*(getattr(self, f.name) + getattr(other, f.name) if f.name != "blocked" else
                            getattr(self, f.name) or getattr(other, f.name) for f in dataclasses.fields(self)))

class Handle(Closing):
    """A relay's or consumer's native handle: ``stop``, ``reset``, ``close`` (also by a ``with`` block)."""
    _native: Any
    _config: Config
    _stop_requested: threading.Event

    @property
    def config(self) -> Config:
        return self._config

    def _handle(self) -> Any:
        if self._native is None:
            raise InvalidArgument(f"the {type(self).__name__.lower()} is closed")
        return self._native

    def stop(self) -> None:
        """Asks ``run``/``next``/iteration to finish what is in flight and return. Safe from any thread and signal handlers."""
        self._stop_requested.set()
        if self._native is not None:
            self._native.stop()

    def reset(self) -> None:
        """Clears a stop request so the handle can be used again."""
        self._stop_requested.clear()
        self._handle().reset()

    def close(self) -> None:
        """Stops and closes the connections (unacknowledged messages return to the queue). Idempotent."""
        n, self._native = self._native, None
        if n is not None:
            n.stop()
            n.close()

    def __repr__(self) -> str:
        name = f" {self._name!r}" if hasattr(self, "_name") else ""  # a consumer's
        return f"<outbox.{type(self).__name__}{name} {'closed' if self._native is None else 'open'}>"

class Relay(Handle):
    """Moves committed events to the exchange with publisher confirms (``outbox_relay_*``); one relay per table is
    active, others stand by. ``pg_url``/``amqp_url`` default to ``pg.url``/``amqp.url``, else OUTBOX_PG_URL /
    OUTBOX_AMQP_URL; ``logger``: a ``logging.Logger`` (default ``outbox.relay``), a callable(level, message), or False."""

    def __init__(self, config: ConfigLike = None, *, pg_url: Optional[str] = None, amqp_url: Optional[str] = None,
                 logger: LoggerLike = None) -> None:
        self._config: Config = with_urls(config, pg_url, amqp_url)
        self._native: Optional[_native.Relay] = _native.Relay(self._config.native, log_sink(logger, "outbox.relay"))
        self._stop_requested = threading.Event()

    def step(self) -> RelayStats:
        """One round: up to ``relay.batch_size`` events published with confirms, their outcomes
        recorded before it returns (a relay standing by returns zeroes)."""
        return RelayStats(*self._handle().step(threading.current_thread() is threading.main_thread()))

    def drain(self, *, max_steps: Optional[int] = None) -> RelayStats:
        """Steps until a step reads nothing (or ``max_steps``); returns the summed stats."""
        total, n = RelayStats(), 0
        while max_steps is None or n < max_steps:
            st = self.step()
            total, n = total + st, n + 1
            if st.claimed == 0:
                break
        return total

    def run(self) -> None:
        """Relays until :meth:`stop` or Ctrl-C (what is in flight is finished first); :meth:`reset`
        after a stop to run again."""
        self._handle().run(threading.current_thread() is threading.main_thread())

#: A handler for :meth:`Consumer.run`: ``handler(message, conn)``; raise to roll back (PermanentFailure: no retry).
Handler = Callable[[Message, Any], Any]
#: A handler for :meth:`Consumer.run_async`: ``await handler(message, conn)`` (a plain function works too).
AsyncHandler = Callable[[Message, Any], Union[Awaitable[Any], Any]]
_TX = {_native.LOOP_SQL_BEGIN: "begin", _native.LOOP_SQL_COMMIT: "commit", _native.LOOP_SQL_ROLLBACK: "rollback"}

def _reason(exc: BaseException) -> str:  # the reason text the library logs and dead-letters with
    return f"{type(exc).__name__}: {exc}"

def _exec(loop: Any, drv: Driver, conn: Any) -> Steps:
    kind, sql, params = loop.statement()
    step = getattr(drv, _TX[kind])(conn, sql) if kind in _TX else drv.run(conn, sql, params)  # dedupe, parking
    try:
        row = yield from step
    except Exception as exc:
        state, _, _, lost = failure(exc, drv, conn)
        loop.exec_failed(state, _reason(exc), lost)
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
        permanent = isinstance(exc, PermanentFailure)
        loop.handler_done(_native.HANDLER_PERMANENT if permanent else _native.HANDLER_FAILED, _reason(exc))
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

class Consumer(Handle):
    """A subscriber: its own durable queue (``name`` by default) and ``<queue>.dead`` (``outbox_consumer_*``).
    ``run(handler, conn)`` handles each event exactly once in your transaction; or iterate and ack yourself.
    ``amqp_url``/``pg_url``/``logger`` as for :class:`Relay` (default logger ``outbox.consumer``)."""

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
    def delivery_limit(self) -> int:
        """Deliveries of a failing message before it is dead-lettered (``consumer.on_failure=requeue``)."""
        return int(self._config["consumer.delivery_limit"])

    def connect(self) -> None:
        """Declares the topology and starts consuming now (otherwise the first next/run does)."""
        self._handle().connect()

    def next(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next event within ``timeout`` seconds (None: until one comes), else None; Stopped after :meth:`stop`."""
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
        """Handles events exactly once until :meth:`stop`, Ctrl-C, ``limit`` events or ``idle_timeout`` idle
        seconds: the library's loop (``outbox_loop_*``). Per event, on ``conn`` (a driver's connection, an
        :class:`outbox.Db`, or None: the loop's own, the handler getting a Db view): BEGIN, the inbox row,
        ``handler(message, conn)``, COMMIT, ack. A raising handler rolls back; its aggregate is held, retried with backoff
        and parked after ``consumer.max_attempts`` (:class:`outbox.PermanentFailure`: at once) until :func:`outbox.redrive`
        or :func:`outbox.skip` (``consumer.on_failure=requeue``: redelivered, then dead-lettered). Returns the count."""
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

consume_async = Consumer.run_async  #: ``await outbox.consume_async(consumer, handler, conn)``: the same call
