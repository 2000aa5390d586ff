#!/usr/bin/env python3
"""An order service in the documents' style: each order row and its OrderCreated event are
written in ONE transaction (psycopg 3), so both persist or neither does. The relay publishes
the event only after the commit.

    order_service.py [--count N] [--customer ID] [--relay] [--fail-every K]

Reads OUTBOX_PG_URL (and OUTBOX_AMQP_URL with --relay) and OUTBOX_SCHEMA (default public).
--relay publishes what was written with an embedded relay before exiting (otherwise run
`outbox relay`). --fail-every K rolls back every K-th order after its event was written, to
show that neither the order nor its event survives a rollback.
"""
from __future__ import annotations

import argparse
import decimal
import hashlib
import json
import os
import random
import sys
import uuid

import psycopg

import outbox


class OrderService:
    """The documents' OrderService.create_order, with the outbox row written by the library."""

    def __init__(self, conn: psycopg.Connection, config: outbox.Config) -> None:
        self.conn = conn
        self.config = config
        self.orders = f'"{config["outbox.schema"]}".orders'

    def ensure_schema(self, url: str) -> None:
        # The tables, idempotently, on a connection of the library's own (migrate takes a URL).
        outbox.migrate(url, config=self.config)
        with self.conn.transaction():
            self.conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.orders} (id uuid PRIMARY KEY, customer_id text NOT NULL,"
                " total numeric(12,2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
            )

    @staticmethod
    def idempotency_key(aggregate_id: str, event_type: str, payload: dict) -> str:
        """The documents' deterministic key: the same order event is never stored twice."""
        content = f"{aggregate_id}:{event_type}:{json.dumps(payload, sort_keys=True)}"
        return hashlib.sha256(content.encode()).hexdigest()[:32]

    def create_order(self, customer_id: str, total: decimal.Decimal, *, fail: bool = False) -> outbox.Written:
        """Create the order AND its OrderCreated event in a single transaction."""
        order_id = str(uuid.uuid4())
        payload = {"order_id": order_id, "customer_id": customer_id, "total": str(total)}
        with self.conn.transaction():
            self.conn.execute(
                f"INSERT INTO {self.orders} (id, customer_id, total) VALUES (%s, %s, %s)",
                (order_id, customer_id, total),
            )
            written = outbox.write(
                self.conn,
                config=self.config,
                aggregate_type="Order",
                aggregate_id=order_id,
                operation="POST",  # -> OrderCreated
                payload=payload,
                metadata={"source": "order-service", "microservice": "python-example"},
                user=f"{customer_id}@example.com",
                idempotency_key=self.idempotency_key(order_id, "OrderCreated", payload),
            )
            if fail:
                raise RuntimeError(f"simulated failure after writing order {order_id}")
        return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=3, help="orders to create (default 3)")
    ap.add_argument("--customer", default="cust-42")
    ap.add_argument("--relay", action="store_true", help="publish with an embedded relay before exiting")
    ap.add_argument("--fail-every", type=int, default=0, metavar="K", help="roll back every K-th order")
    args = ap.parse_args()

    url = os.environ.get("OUTBOX_PG_URL")
    if not url:
        print("order_service: set OUTBOX_PG_URL", file=sys.stderr)
        return 2
    config = outbox.Config({"outbox.schema": os.environ.get("OUTBOX_SCHEMA") or "public"})
    if os.environ.get("OUTBOX_EXCHANGE"):
        config["amqp.exchange"] = os.environ["OUTBOX_EXCHANGE"]
    print(f"order-service: outbox {outbox.__version__} (liboutbox {outbox.library_version()}), schema {config['outbox.schema']}")

    committed = 0
    with psycopg.connect(url) as conn:
        service = OrderService(conn, config)
        service.ensure_schema(url)
        for i in range(1, args.count + 1):
            total = decimal.Decimal(random.randint(500, 50000)) / 100
            fail = args.fail_every > 0 and i % args.fail_every == 0
            try:
                w = service.create_order(args.customer, total, fail=fail)
            except RuntimeError as exc:
                print(f"order-service: rolled back: {exc} (neither the order nor its event exists)")
                continue
            committed += 1
            print(f"order-service: order committed with {w.event_type} {w.id} (seq {w.seq}), total {total}")

    if args.relay:
        with outbox.Relay(config) as relay:
            stats = relay.drain()
        print(f"order-service: relayed {stats.published} event(s) to {config['amqp.exchange']}")
    print(f"order-service: {committed} order(s) committed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
