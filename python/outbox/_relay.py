"""The relay: committed events -> RabbitMQ, with publisher confirms."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Optional, Union

from . import _native
from ._config import Config, ConfigLike, with_urls

__all__ = ["Relay", "RelayStats"]

_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)

LoggerLike = Union[logging.Logger, Callable[[int, str], Any], None, bool]


def log_sink(logger: LoggerLike, default: str) -> Optional[Callable[[int, str], None]]:
    """The native log callback for a logger: a logging.Logger (default: `default`), a
    callable(level, message) with a logging level, or False to silence the library."""
    if logger is False:
        return None
    if logger is None or logger is True:
        logger = logging.getLogger(default)
    if isinstance(logger, logging.Logger):
        log = logger

        def sink(level: int, message: str) -> None:
            lvl = _LEVELS[level] if 0 <= level < len(_LEVELS) else logging.INFO
            if log.isEnabledFor(lvl):
                log.log(lvl, "%s", message)

        return sink
    fn = logger

    def call(level: int, message: str) -> None:
        fn(_LEVELS[level] if 0 <= level < len(_LEVELS) else logging.INFO, message)

    return call


@dataclasses.dataclass(frozen=True)
class RelayStats:
    """What one relay step did (``outbox_relay_stats``). ``claimed``, ``claim_us`` and ``mark_us``
    keep version 1's names: the events read, the time reading, the time recording outcomes."""

    claimed: int = 0  #: events read for the step (new ones, and ones due for a retry)
    published: int = 0  #: confirmed by the broker and recorded as published (a receipt)
    failed: int = 0  #: nacked or returned: parked, retried later with backoff (or now FAILED)
    dead: int = 0  #: of ``failed``, those that reached relay.max_attempts and are FAILED
    held_back: int = 0  #: not published: an earlier event of their aggregate was not confirmed or is parked
    unroutable: int = 0  #: returned by the broker: no queue bound to the exchange
    nacked: int = 0  #: negatively confirmed by the broker
    unconfirmed: int = 0  #: no confirm within relay.confirm_timeout_ms: left PENDING
    claim_us: int = 0  #: time spent reading events
    publish_us: int = 0  #: time spent publishing and waiting for confirms
    mark_us: int = 0  #: time spent recording outcomes (one autocommit statement)
    total_us: int = 0
    blocked: bool = False  #: the broker blocked publishing (resource alarm) during the step

    def __add__(self, other: "RelayStats") -> "RelayStats":
        return RelayStats(
            *(
                (getattr(self, f.name) or getattr(other, f.name))
                if f.name == "blocked"
                else getattr(self, f.name) + getattr(other, f.name)
                for f in dataclasses.fields(self)
            )
        )


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class Relay:
    """Moves committed events from the outbox to the RabbitMQ exchange (``outbox_relay_*``).

    One relay per outbox table is active (it holds a session advisory lock); other relays stand
    by and take over when it stops or loses its connection, so more relays give availability,
    not throughput. The active relay reads events in position order, publishes them with
    publisher confirms, and records an event as published (a receipt; it never updates the
    event) only after the broker confirmed it. Per aggregate, an event goes out only after the
    previous one was confirmed.

    Example::

        with outbox.Relay({"outbox.schema": "shop"}) as relay:
            relay.run()        # until relay.stop() from another thread, or Ctrl-C

    Args:
        config: options (``relay.batch_size``, ``amqp.exchange``, ``outbox.schema``...).
        pg_url, amqp_url: the servers; default ``pg.url``/``amqp.url`` of the configuration,
            else OUTBOX_PG_URL / OUTBOX_AMQP_URL.
        logger: a ``logging.Logger`` (default ``logging.getLogger("outbox.relay")``), a
            callable(level, message), or False. Messages never contain passwords.

    Connections open on the first step and reopen after a failure. The relay may be stopped from
    any thread; other calls are serialised.
    """

    def __init__(
        self,
        config: ConfigLike = None,
        *,
        pg_url: Optional[str] = None,
        amqp_url: Optional[str] = None,
        logger: LoggerLike = None,
    ) -> None:
        self._config: Config = with_urls(config, pg_url, amqp_url, need_pg=True, need_amqp=True)
        self._native: Optional[_native.Relay] = _native.Relay(self._config.native, log_sink(logger, "outbox.relay"))

    @property
    def config(self) -> Config:
        return self._config

    def _handle(self) -> "_native.Relay":
        n = self._native
        if n is None:
            from ._errors import InvalidArgument

            raise InvalidArgument("the relay is closed")
        return n

    def step(self) -> RelayStats:
        """One round: read up to ``relay.batch_size`` events, publish them with confirms, and
        record the confirmed ones as published, the failed ones parked for a retry, and the
        relay's cursor, in one statement before returning. A relay standing by (another is
        active on the table) does nothing and returns zeroes.

        Raises:
            ConnectionLost, BrokerError, Timeout, DatabaseError: a server failed; the next step
                reconnects, and no unconfirmed event was recorded as published.
            KeyboardInterrupt: on Ctrl-C, after the step finished what was in flight.
        """
        return RelayStats(*self._handle().step(_on_main_thread()))

    def drain(self, *, max_steps: Optional[int] = None) -> RelayStats:
        """Steps until a step reads nothing (or ``max_steps``); returns the summed stats. A relay
        standing by reads nothing, so it returns after one step."""
        total = RelayStats()
        n = 0
        while max_steps is None or n < max_steps:
            st = self.step()
            total = total + st
            n += 1
            if st.claimed == 0:
                break
        return total

    def run(self) -> None:
        """Relays until :meth:`stop` (from another thread or a signal handler) or Ctrl-C.

        Wakes on LISTEN/NOTIFY (``relay.listen``) or every ``relay.poll_interval_ms``,
        reconnects with backoff, keeps AMQP heartbeats while idle. The GIL is released
        throughout. On Ctrl-C the relay finishes what is in flight (every event is either
        confirmed-and-recorded or still pending), then KeyboardInterrupt propagates; ``run()`` may
        be called again. After ``stop()``, call :meth:`reset` before running again.
        """
        self._handle().run(_on_main_thread())

    def stop(self) -> None:
        """Asks a running ``step``/``run`` to finish what is in flight and return. Thread-safe."""
        n = self._native
        if n is not None:
            n.stop()

    def reset(self) -> None:
        """Clears a stop request so :meth:`run` can be called again."""
        self._handle().reset()

    def close(self) -> None:
        """Stops the relay and closes its connections. Idempotent."""
        n, self._native = self._native, None
        if n is not None:
            n.stop()
            n.close()

    def __enter__(self) -> "Relay":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<outbox.Relay {'closed' if self._native is None else 'open'}>"
