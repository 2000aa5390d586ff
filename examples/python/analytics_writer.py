#!/usr/bin/env python3
"""A subscriber in the documents' analytics-writer style, on the consumer runtime: its own
durable queue on the fanout exchange, and each event's effect (a row in analytics_events)
committed in the same transaction as its inbox row, so a redelivered event never counts twice.

    analytics_writer.py [--name analytics-writer] [--count N] [--idle-timeout S] [--fail-first]

Reads OUTBOX_PG_URL, OUTBOX_AMQP_URL, OUTBOX_SCHEMA (default public) and OUTBOX_EXCHANGE
(default corewrite.fanout). Exits after N events (--count), after S idle seconds, or on Ctrl-C /
SIGTERM. --fail-first makes the handler fail once per event (rolled back, redelivered) to show
that the effect still happens exactly once.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

import psycopg

import outbox


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="analytics-writer", help="consumer (and queue) name")
    ap.add_argument("--count", type=int, default=None, help="exit after this many events")
    ap.add_argument("--idle-timeout", type=float, default=None, help="exit after this many idle seconds")
    ap.add_argument("--fail-first", action="store_true", help="fail each event's first attempt")
    args = ap.parse_args()

    url = os.environ.get("OUTBOX_PG_URL")
    if not url or not os.environ.get("OUTBOX_AMQP_URL"):
        print("analytics-writer: set OUTBOX_PG_URL and OUTBOX_AMQP_URL", file=sys.stderr)
        return 2
    schema = os.environ.get("OUTBOX_SCHEMA") or "public"
    config = outbox.Config({"outbox.schema": schema})
    if os.environ.get("OUTBOX_EXCHANGE"):
        config["amqp.exchange"] = os.environ["OUTBOX_EXCHANGE"]
    table = f'"{schema}".analytics_events'

    with psycopg.connect(url) as conn:
        outbox.migrate(url, config=config, target="inbox")
        with conn.transaction():
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (event_id uuid PRIMARY KEY, event_type text NOT NULL,"
                " aggregate_type text NOT NULL, aggregate_id text NOT NULL, seq bigint, payload jsonb NOT NULL,"
                " received_at timestamptz NOT NULL DEFAULT now())"
            )
        failed_once: set = set()

        def record(event: outbox.Message, tx: psycopg.Connection) -> None:
            """Runs inside the transaction that also holds the event's inbox row."""
            tx.execute(
                f"INSERT INTO {table} (event_id, event_type, aggregate_type, aggregate_id, seq, payload)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (event.id, event.event_type, event.aggregate_type, event.aggregate_id, event.seq, event.payload_json),
            )
            if args.fail_first and event.id not in failed_once:
                failed_once.add(event.id)
                raise RuntimeError("simulated failure on the first attempt")
            print(f"[{args.name}] {event.event_type} {event.aggregate_type}:{event.aggregate_id} recorded "
                  f"(event {event.id}, seq {event.seq}, {event.order.name.lower().replace('_', ' ')})", flush=True)

        with outbox.Consumer(args.name, config) as consumer:
            signal.signal(signal.SIGTERM, lambda *_: consumer.stop())
            consumer.connect()
            print(f"[{args.name}] waiting for events on {config['amqp.exchange']} (queue {args.name})", flush=True)
            # From here on the library's own lines too (logger outbox.consumer), e.g. a redelivered
            # event that its inbox recognised and acknowledged without running the handler.
            logging.basicConfig(level=logging.INFO, stream=sys.stdout, format=f"[{args.name}] %(message)s")
            try:
                n = consumer.run(record, conn, limit=args.count, idle_timeout=args.idle_timeout)
            except KeyboardInterrupt:
                print(f"[{args.name}] interrupted", flush=True)
                return 130
    print(f"[{args.name}] {n} event(s) recorded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
