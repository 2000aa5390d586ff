"""A delivered event, as consumers hand it over: the documents' envelope, decoded."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
from typing import TYPE_CHECKING, Any, Dict, Optional

from . import _native
from ._errors import InvalidArgument

if TYPE_CHECKING:
    from ._consumer import Consumer


class Order(enum.IntEnum):
    """Order of an event within its aggregate, as a consumer saw it (``outbox_order``)."""

    UNCHECKED = _native.ORDER_UNCHECKED  #: a duplicate, no sequence, or inbox.order_check=false
    IN_ORDER = _native.ORDER_IN_ORDER  #: the next sequence number of its aggregate
    STALE = _native.ORDER_STALE  #: a later (or equal) sequence of its aggregate was already processed
    GAP = _native.ORDER_GAP  #: earlier sequence numbers of its aggregate were never processed


@dataclasses.dataclass(frozen=True)
class DedupeResult:
    """What ``dedupe`` found: ``first_time`` True means process the event (it is now recorded in
    the inbox, in your transaction); False means it was already processed: skip it."""

    first_time: bool
    order: Order = Order.UNCHECKED
    previous_seq: int = 0


def _parsed(text: str) -> Any:
    """A cached property: the JSON text attribute ``text``, parsed (None when absent)."""
    return functools.cached_property(lambda self: None if getattr(self, text) is None else json.loads(getattr(self, text)))


_BY_FIELD = {field: attr for attr, field in _native.ENVELOPE.items()}


class Message:
    """One delivered event: the envelope's fields (``id`` is OUTBOX_ID, ``payload`` and the other
    objects parsed, their exact text in ``payload_json``...), ``body`` (bytes) and the delivery.

    A message from :meth:`Consumer.next` or iteration must be acknowledged (:meth:`ack`, after your
    transaction committed), rejected (:meth:`nack`) or dead-lettered; :meth:`Consumer.run` does that.
    """

    id: str
    event_type: str
    aggregate_type: str
    aggregate_id: str
    operation: Optional[str]
    user: Optional[str]
    created_at: Optional[str]  #: ``YYYYMMDDHHMMSS`` in UTC
    payload_json: str
    previous_payload_json: Optional[str]
    metadata_json: Optional[str]
    body: bytes  #: the envelope as published, byte for byte
    seq: int  #: the per-aggregate sequence number (header outbox-seq), 0 when absent
    redelivered: bool
    delivery_count: int  #: earlier deliveries (quorum queues), -1 when the queue does not say
    routing_key: Optional[str]
    order: Order  #: order within its aggregate, once deduplicated
    previous_seq: int
    payload = _parsed("payload_json")
    previous_payload = _parsed("previous_payload_json")
    metadata = _parsed("metadata_json")

    def __init__(self, native: "_native.Message", consumer: Optional["Consumer"]) -> None:
        self.__dict__.update(native.snapshot())
        self.order = Order(self.order)
        self._native: Optional[_native.Message] = native
        self._consumer = consumer
        self._settled: Optional[str] = None

    def _handle(self) -> "_native.Message":
        n = self._native
        if n is None or n.closed:
            raise InvalidArgument("the message is closed")
        return n

    def envelope(self) -> Dict[str, Any]:
        """The whole body parsed as JSON."""
        return dict(json.loads(self.body))

    def field(self, name: str) -> Optional[str]:
        """An envelope field by name (objects as their JSON text), None when absent or null."""
        attr = _BY_FIELD.get(name)
        return getattr(self, attr) if attr is not None else self._handle().field(name)

    def property(self, name: str) -> Optional[str]:
        """An AMQP property (``message_id``, ``type``, ``routing_key``, ``timestamp``...) or a header
        (``outbox-seq``, ``traceparent``) by name, as text; None when absent."""
        return self.routing_key if name == "routing_key" else self._handle().property(name)

    header = property

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
        """Frees the native message (a context manager does it too)."""
        n, self._native = self._native, None
        if n is not None:
            n.close()

    def __enter__(self) -> "Message":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<outbox.Message {self.event_type} {self.aggregate_type}:{self.aggregate_id} seq={self.seq} id={self.id}>"
