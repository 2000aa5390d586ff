"""Type-checks under mypy --strict: the README's calls, typed."""
from __future__ import annotations

import psycopg

import outbox


def place(conn: psycopg.Connection[tuple[object, ...]], order_id: str) -> int:
    w: outbox.Written = outbox.write(conn, aggregate_type="Order", aggregate_id=order_id, operation="POST",
                                     payload={"order_id": order_id}, idempotency_key=f"order-{order_id}")
    outbox.write(conn, outbox.Event("Order", order_id, outbox.Operation.DELETE, {}))
    op: outbox.OperationName = "FORCE_DELETE"
    outbox.write(conn, aggregate_type="Order", aggregate_id=order_id, operation=op, payload="{}")
    return w.seq


async def place_async(conn: object) -> str:
    w = await outbox.write_async(conn, aggregate_type="Order", aggregate_id=1, operation="PATCH", payload={})
    return w.id


def handle(msg: outbox.Message, conn: object) -> None:
    if msg.payload is None:
        raise outbox.PermanentFailure(f"event {msg.id} has no payload")  # parked at once, no retries


def operate(db: outbox.Db) -> int:
    rows: list[dict[str, object]] = outbox.parked(db, "billing", include_relay=False, limit=10)
    skipped: str = outbox.skip(db, "billing", "Order", "42", by="ops@example", reason="bad data")
    return len(rows) + len(skipped) + outbox.redrive(db, "billing", "Order", 42) + outbox.redrive_all(db, "billing")
