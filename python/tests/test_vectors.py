"""The shared test vectors (tests/vectors/envelopes.json): outbox rows written with exactly those
values, relayed through the library, arrive byte for byte as the C++ suite expects."""

from __future__ import annotations

import json

from conftest import REPO

import outbox

VECTORS = json.loads((REPO / "tests" / "vectors" / "envelopes.json").read_text(encoding="utf-8"))["vectors"]


def test_vectors_relay_to_identical_bodies_routing_keys_and_headers(admin, schema, cfg, consumer_name):
    assert len(VECTORS) >= 3
    for v in VECTORS:
        r = v["row"]
        admin.execute(
            f'INSERT INTO "{schema}".outbox_events (position, outbox_id, event_type, aggregate_type, aggregate_id,'
            " seq, operation, payload, previous_payload, metadata, actor, created_at)"
            f" VALUES (nextval('\"{schema}\".outbox_position_seq'), %s, %s, %s, %s, %s, %s, %s::json, %s::json,"
            " %s::json, %s, to_timestamp(%s))",
            (r["outbox_id"], r["event_type"], r["aggregate_type"], r["aggregate_id"], r["seq"], r["operation"],
             r["payload"], r["previous_payload"], r["metadata"], r["user"], r["created_epoch_s"]),
        )
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        with outbox.Relay(cfg) as relay:
            stats = relay.drain()
        assert stats.published == len(VECTORS) and stats.failed == 0
        received = {}
        for _ in VECTORS:
            msg = consumer.next(timeout=10)
            assert msg is not None, f"only {len(received)} of {len(VECTORS)} arrived"
            received[msg.id] = msg
        for v in VECTORS:
            msg = received[v["row"]["outbox_id"]]
            name = v["name"]
            assert msg.body == v["body"].encode("utf-8"), name
            assert msg.routing_key == v["routing_key"], name
            for key, value in v["headers"].items():
                assert msg.property(key) == str(value), f"{name}: header {key}"
            assert msg.property("message_id") == v["row"]["outbox_id"]
            assert msg.property("type") == v["row"]["event_type"]
            assert msg.property("content_type") == "application/json"
            assert msg.property("delivery_mode") == "2"
            assert msg.property("timestamp") == str(v["row"]["created_epoch_s"])
            # the decoded view agrees with the bytes
            assert msg.aggregate_id == v["row"]["aggregate_id"] and msg.created_at == v["row"]["created_at"]
            assert msg.payload_json == v["row"]["payload"]
            assert msg.user == v["row"]["user"]
            msg.ack()
            msg.close()
