"""A delivered event, as consumers hand it over: the documents' envelope, decoded."""

from __future__ import annotations

import json
import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Dict, Optional

from . import _native
from ._errors import InvalidArgument

if TYPE_CHECKING:
    from ._consumer import Consumer

__all__ = ["Message", "Order", "DedupeResult"]


class Order(enum.IntEnum):
    """Order of an event within its aggregate, as a consumer saw it (``outbox_order``)."""

    UNCHECKED = _native.ORDER_UNCHECKED  #: not checked: a duplicate, no sequence, or inbox.order_check=false
    IN_ORDER = _native.ORDER_IN_ORDER  #: the next sequence number of its aggregate
    STALE = _native.ORDER_STALE  #: a later (or equal) sequence of its aggregate was already processed
    GAP = _native.ORDER_GAP  #: earlier sequence numbers of its aggregate were never processed


@dataclasses.dataclass(frozen=True)
class DedupeResult:
    """What ``dedupe`` found: ``first_time`` True means process the event (it is now recorded
    in the inbox, in your transaction); False means it was already processed: skip it."""

    first_time: bool
    order: Order = Order.UNCHECKED
    previous_seq: int = 0


class Message:
    """One delivered event: the documents' envelope, decoded.

    ``payload``, ``previous_payload`` and ``metadata`` are parsed JSON (dicts); their exact text
    is in ``payload_json`` etc.; ``body`` is the raw message body (bytes). A message from
    :meth:`Consumer.next` or iteration must be acknowledged (:meth:`ack`, after your
    transaction committed), rejected (:meth:`nack`) or dead-lettered; :meth:`Consumer.run` does
    that for you. Use it as a context manager (or :meth:`close`) to free it promptly.
    """

    __slots__ = ("_native", "_consumer", "_s", "_parsed", "_settled", "dedupe", "__weakref__")

    def __init__(self, native: "_native.Message", consumer: Optional["Consumer"]) -> None:
        self._native: Optional[_native.Message] = native
        self._consumer = consumer
        self._s: Dict[str, Any] = native.snapshot()
        self._parsed: Dict[str, Any] = {}
        self._settled: Optional[str] = None
        #: What the run loop's (or your) dedupe found, once it ran.
        self.dedupe: Optional[DedupeResult] = None

    def _handle(self) -> "_native.Message":
        n = self._native
        if n is None or n.closed:
            raise InvalidArgument("the message is closed")
        return n

    # -- envelope fields
    @property
    def id(self) -> str:
        """OUTBOX_ID: the event's id (also the AMQP message_id)."""
        return self._s["OUTBOX_ID"]

    @property
    def event_type(self) -> str:
        return self._s["EVENT_TYPE"]

    @property
    def aggregate_type(self) -> str:
        return self._s["AGGREGATE_TYPE"]

    @property
    def aggregate_id(self) -> str:
        return self._s["AGGREGATE_ID"]

    @property
    def operation(self) -> Optional[str]:
        return self._s["OPERATION"]

    @property
    def user(self) -> Optional[str]:
        return self._s["USER"]

    @property
    def created_at(self) -> Optional[str]:
        """CREATED_AT as sent: ``YYYYMMDDHHMMSS`` in UTC."""
        return self._s["CREATED_AT"]

    def _json(self, key: str) -> Any:
        if key not in self._parsed:
            text = self._s[key]
            self._parsed[key] = json.loads(text) if text is not None else None
        return self._parsed[key]

    @property
    def payload(self) -> Any:
        return self._json("PAYLOAD")

    @property
    def payload_json(self) -> str:
        return self._s["PAYLOAD"]

    @property
    def previous_payload(self) -> Any:
        return self._json("PREVIOUS_PAYLOAD")

    @property
    def previous_payload_json(self) -> Optional[str]:
        return self._s["PREVIOUS_PAYLOAD"]

    @property
    def metadata(self) -> Any:
        return self._json("METADATA")

    @property
    def metadata_json(self) -> Optional[str]:
        return self._s["METADATA"]

    @property
    def body(self) -> bytes:
        """The raw message body (the envelope as published, byte for byte)."""
        return self._s["body"]

    def envelope(self) -> Dict[str, Any]:
        """The whole body parsed as JSON."""
        return json.loads(self._s["body"])

    # -- delivery
    @property
    def seq(self) -> int:
        """The per-aggregate sequence number (header outbox-seq), 0 when absent."""
        return self._s["seq"]

    @property
    def redelivered(self) -> bool:
        return self._s["redelivered"]

    @property
    def delivery_count(self) -> int:
        """Earlier deliveries of this message (quorum queues), or -1 when the queue does not say."""
        return self._s["delivery_count"]

    @property
    def routing_key(self) -> Optional[str]:
        return self._s["routing_key"]

    @property
    def order(self) -> Order:
        """Order within its aggregate, once deduplicated."""
        if self.dedupe is not None:
            return self.dedupe.order
        return Order(self._s["order"])

    @property
    def previous_seq(self) -> int:
        if self.dedupe is not None:
            return self.dedupe.previous_seq
        return self._s["previous_seq"]

    def field(self, name: str) -> Optional[str]:
        """An envelope field by name (objects as their JSON text), None when absent or null."""
        if name in self._s and name.isupper():
            return self._s[name]
        return self._handle().field(name)

    def property(self, name: str) -> Optional[str]:
        """An AMQP property (``message_id``, ``type``, ``content_type``, ``routing_key``,
        ``exchange``, ``timestamp``...) or a header by name (``outbox-seq``, ``traceparent``),
        as text; None when absent."""
        if name == "routing_key":
            return self._s["routing_key"]
        return self._handle().property(name)

    header = property

    # -- settlement
    def _owner(self) -> "Consumer":
        if self._consumer is None:
            raise InvalidArgument("this message has no consumer to acknowledge to")
        return self._consumer

    def ack(self) -> None:
        """Acknowledges: the broker forgets the message. Call after your transaction committed."""
        self._owner().ack(self)

    def nack(self, requeue: bool = True) -> None:
        """Rejects; ``requeue`` redelivers it (counting a delivery)."""
        self._owner().nack(self, requeue=requeue)

    def dead_letter(self, reason: str) -> None:
        """Sends it to the dead-letter queue with ``reason`` (header x-outbox-dead-reason), then acks."""
        self._owner().dead_letter(self, reason)

    def close(self) -> None:
        n, self._native = self._native, None
        if n is not None:
            n.close()

    def __enter__(self) -> "Message":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<outbox.Message {self.event_type} {self.aggregate_type}:{self.aggregate_id} "
            f"seq={self.seq} id={self.id}>"
        )
