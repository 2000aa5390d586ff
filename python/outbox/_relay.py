"""The relay: committed events -> RabbitMQ, with publisher confirms."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Optional, Union

from . import _native
from ._config import Config, ConfigLike, with_urls
from ._errors import InvalidArgument

_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)
LoggerLike = Union[logging.Logger, Callable[[int, str], Any], None, bool]


def log_sink(logger: LoggerLike, default: str) -> Optional[Callable[[int, str], None]]:
    """The native log callback for a logging.Logger (None: ``default``'s), a callable(level,
    message) taking a logging level, or False to silence the library."""
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


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class Relay:
    """Moves committed events from the outbox to the RabbitMQ exchange (``outbox_relay_*``).

    One relay per outbox table is active (a session advisory lock); others stand by and take over.
    It publishes in position order with publisher confirms and records an event as published only
    after the broker confirmed it; per aggregate, an event goes out after the previous one's confirm::

        with outbox.Relay({"outbox.schema": "shop"}) as relay:
            relay.run()        # until relay.stop() from another thread, or Ctrl-C

    Args:
        config: options (``relay.batch_size``, ``amqp.exchange``, ``outbox.schema``...).
        pg_url, amqp_url: default ``pg.url``/``amqp.url``, else OUTBOX_PG_URL / OUTBOX_AMQP_URL.
        logger: a ``logging.Logger`` (default ``outbox.relay``), a callable(level, message), or False.
    """

    def __init__(self, config: ConfigLike = None, *, pg_url: Optional[str] = None, amqp_url: Optional[str] = None,
                 logger: LoggerLike = None) -> None:
        self._config: Config = with_urls(config, pg_url, amqp_url)
        self._native: Optional[_native.Relay] = _native.Relay(self._config.native, log_sink(logger, "outbox.relay"))

    @property
    def config(self) -> Config:
        return self._config

    def _handle(self) -> "_native.Relay":
        if self._native is None:
            raise InvalidArgument("the relay is closed")
        return self._native

    def step(self) -> RelayStats:
        """One round: read up to ``relay.batch_size`` events, publish them with confirms, record the
        outcomes before returning (a relay standing by returns zeroes). ConnectionLost, BrokerError,
        Timeout, DatabaseError: the next step reconnects; nothing unconfirmed was recorded published."""
        return RelayStats(*self._handle().step(_on_main_thread()))

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
        """Relays until :meth:`stop` or Ctrl-C: LISTEN/NOTIFY wake-ups (or polling), reconnects with
        backoff, heartbeats; the GIL released. On Ctrl-C it finishes what is in flight, then
        KeyboardInterrupt propagates. After ``stop()``, :meth:`reset` before running again."""
        self._handle().run(_on_main_thread())

    def stop(self) -> None:
        """Asks a running ``step``/``run`` to finish what is in flight and return. Thread-safe."""
        if self._native is not None:
            self._native.stop()

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
