'use strict';
// tests/vectors/envelopes.json: the same rows, relayed, give byte-identical bodies, the same
// routing keys, properties and headers as the C++ suite pins (there is no envelope function in
// the C API, so the rows go into a fresh outbox table by SQL and the relay publishes them).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { env } = require('./helpers');

const vectors = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'tests', 'vectors', 'envelopes.json'), 'utf8')).vectors;

test('shared envelope vectors: bodies, routing keys, properties and headers byte for byte', async (t) => {
  assert.ok(vectors.length >= 3);
  const e = await env(t);
  const name = e.consumerName('vectors');
  const consumer = e.outbox.consumer(name);
  t.after(() => consumer.close());
  await consumer.connect();
  const collector = await e.collector();
  for (const v of vectors) {
    const r = v.row;
    await e.admin.query(
      `INSERT INTO "${e.schema}".outbox_events (position, outbox_id, event_type, aggregate_type, aggregate_id, seq,
         operation, payload, previous_payload, metadata, actor, created_at)
       VALUES (nextval('"${e.schema}".outbox_position_seq'), $1, $2, $3, $4, $5, $6, $7::json, $8::json, $9::json, $10,
         to_timestamp($11))`,
      [r.outbox_id, r.event_type, r.aggregate_type, r.aggregate_id, r.seq, r.operation, r.payload, r.previous_payload,
        r.metadata, r.user, r.created_epoch_s]);
  }
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  assert.equal((await e.drain(relay)).published, vectors.length);

  // As any AMQP client sees them (amqplib).
  const messages = await collector.waitFor(vectors.length);
  for (const v of vectors) {
    const m = messages.find((x) => x.properties.messageId === v.row.outbox_id);
    assert.ok(m, `${v.name}: published`);
    assert.ok(m.content.equals(Buffer.from(v.body, 'utf8')), `${v.name}: body\n${m.content}\n${v.body}`);
    assert.equal(m.fields.routingKey, v.routing_key, v.name);
    assert.equal(m.fields.exchange, e.exchange);
    assert.equal(m.properties.type, v.row.event_type);
    assert.equal(m.properties.contentType, 'application/json');
    assert.equal(m.properties.deliveryMode, 2);
    assert.equal(m.properties.timestamp, v.row.created_epoch_s);
    const headers = { ...m.properties.headers };
    for (const [k, val] of Object.entries(headers)) if (Buffer.isBuffer(val)) headers[k] = val.toString('utf8');
    assert.deepEqual(headers, v.headers, `${v.name}: headers`);
  }

  // As this package's consumer sees them.
  for (let i = 0; i < vectors.length; i++) {
    const m = await consumer.next(5000);
    assert.ok(m, 'delivered to the consumer');
    const v = vectors.find((x) => x.row.outbox_id === m.id);
    assert.ok(m.body.equals(Buffer.from(v.body, 'utf8')), `${v.name}: body through the consumer`);
    assert.equal(m.payloadText, v.row.payload, `${v.name}: PAYLOAD as its exact JSON text`);
    assert.equal(m.aggregateId, v.row.aggregate_id);
    assert.equal(m.user, v.row.user);
    assert.equal(m.seq, v.row.seq);
    assert.equal(m.routingKey, v.routing_key);
    for (const [k, val] of Object.entries(v.headers)) assert.equal(m.property(k), String(val), `${v.name}: header ${k}`);
    await m.ack();
  }
});
