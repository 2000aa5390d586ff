'use strict';
// A partitioned subscriber (consumer.partitions) as two instances in one process: the partitions
// are divided between them, every effect happens exactly once and in per-aggregate order; the
// documents' amqplib subscriber of the same exchange is unaffected; another partition count is
// refused with an Error whose code is INVALID_ARGUMENT.
const test = require('node:test');
const assert = require('node:assert/strict');
const { env, event, pgClient } = require('./helpers');

async function until(what, fn, ms = 30000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function partitionTopology(e, name, partitions) {
  for (let i = 0; i < partitions; i++) e.addQueue(`${name}.p${i}`);
  e.addExchange(`${name}.partitions`);
}

test('two instances of a partitioned subscriber divide it, in order and exactly once', async (t) => {
  // A lease long enough for a busy machine: a's first heartbeat (a quarter of the lease after it
  // connected) must still find b's from b.connect() alive, or a takes every partition for a while.
  const e = await env(t, { 'consumer.partitions': 4, 'consumer.lease_ms': 3000 });
  const name = e.consumerName('part');
  partitionTopology(e, name, 4);
  await e.admin.query(`CREATE TABLE "${e.schema}".effects (applied bigserial PRIMARY KEY, event_id text NOT NULL,
    aggregate text NOT NULL, seq bigint NOT NULL, instance text NOT NULL)`);
  const a = e.outbox.consumer(name, { 'consumer.instance': 'a' });
  const b = e.outbox.consumer(name, { 'consumer.instance': 'b' });
  t.after(() => a.close());
  t.after(() => b.close());
  await a.connect(); // a alone: every partition, until its next heartbeat sees b
  await b.connect();

  const writer = await pgClient();
  t.after(() => writer.end());
  await writer.query('BEGIN');
  for (let i = 0; i < 80; i++) await e.outbox.write(writer, event({ aggregateId: `g${i % 20}`, payload: { i } }));
  await writer.query('COMMIT');
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  assert.equal((await e.drain(relay)).published, 80);
  await new Promise((r) => setTimeout(r, 800)); // past a's heartbeat: its first next() takes up its half only

  const handler = (instance) => async (m, tx) => {
    await new Promise((r) => setTimeout(r, 5));
    await tx.query(`INSERT INTO "${e.schema}".effects (event_id, aggregate, seq, instance) VALUES ($1, $2, $3, $4)`,
      [m.id, m.aggregateId, m.seq, instance]);
  };
  const runs = [a.consume(handler('a')), b.consume(handler('b'))];
  await until('80 effects', async () => (await e.count(`SELECT count(*) FROM "${e.schema}".effects`)) >= 80);
  await new Promise((r) => setTimeout(r, 300));
  a.stop();
  b.stop();
  await Promise.all(runs);

  const { rows } = await e.admin.query(
    `SELECT event_id, aggregate, seq::int AS seq, instance FROM "${e.schema}".effects ORDER BY applied`);
  assert.equal(rows.length, 80);
  assert.equal(new Set(rows.map((r) => r.event_id)).size, 80, 'every effect exactly once');
  const byAgg = new Map();
  for (const r of rows) {
    if (!byAgg.has(r.aggregate)) byAgg.set(r.aggregate, []);
    byAgg.get(r.aggregate).push(r);
  }
  for (const [agg, list] of byAgg) {
    assert.deepEqual(list.map((r) => r.seq), list.map((_, i) => i + 1), `${agg}: applied out of order`);
    assert.equal(new Set(list.map((r) => r.instance)).size, 1, `${agg}: handled by both instances`);
  }
  assert.deepEqual(new Set(rows.map((r) => r.instance)), new Set(['a', 'b']), 'both instances took a share');
});

test('another partition count is refused with INVALID_ARGUMENT', async (t) => {
  const e = await env(t, { 'consumer.partitions': 4 });
  const name = e.consumerName('count');
  partitionTopology(e, name, 4);
  const four = e.outbox.consumer(name);
  t.after(() => four.close());
  await four.connect();
  const two = e.outbox.consumer(name, { 'consumer.partitions': 2 });
  t.after(() => two.close());
  await assert.rejects(two.connect(), (err) => {
    assert.equal(err.code, 'INVALID_ARGUMENT');
    assert.match(err.message, /partitioned into 4 partitions/);
    return true;
  });
});

// The documents' subscriber, written as they write it with amqplib (examples/node/amqplib-*.js): its
// own durable queue bound to the fanout exchange with an empty routing key, JSON.parse, ack. While
// two instances of a partitioned subscriber consume the same events, it receives every event exactly
// once, each aggregate's in seq order, and sees nothing new but the header outbox-partition-key.
test('a plain amqplib subscriber gets every event once and in order while a partitioned one consumes', async (t) => {
  const events = 120;
  const e = await env(t, { 'consumer.partitions': 4, 'consumer.lease_ms': 1000 });
  const name = e.consumerName('part');
  partitionTopology(e, name, 4);
  const plainQueue = e.consumerName('amqplib');
  await e.admin.query(`CREATE TABLE "${e.schema}".effects (applied bigserial PRIMARY KEY, event_id text NOT NULL,
    aggregate text NOT NULL, seq bigint NOT NULL, instance text NOT NULL)`);

  // The documents' subscriber.
  const channel = await e.amqp.createChannel();
  t.after(() => channel.close().catch(() => {}));
  await channel.prefetch(1);
  await channel.assertExchange(e.exchange, 'fanout', { durable: true });
  const queue = await channel.assertQueue(plainQueue, { durable: true, autoDelete: false });
  await channel.bindQueue(queue.queue, e.exchange, '');
  const received = [];
  await channel.consume(queue.queue, (msg) => {
    if (msg) {
      const event = JSON.parse(msg.content.toString());
      received.push({ event, headers: msg.properties.headers, redelivered: msg.fields.redelivered });
      channel.ack(msg);
    }
  });

  const a = e.outbox.consumer(name, { 'consumer.instance': 'a' });
  const b = e.outbox.consumer(name, { 'consumer.instance': 'b' });
  t.after(() => a.close());
  t.after(() => b.close());
  await a.connect();
  await b.connect();
  const handler = (instance) => async (m, tx) => {
    await tx.query(`INSERT INTO "${e.schema}".effects (event_id, aggregate, seq, instance) VALUES ($1, $2, $3, $4)`,
      [m.id, m.aggregateId, m.seq, instance]);
  };
  const runs = [a.consume(handler('a')), b.consume(handler('b'))];
  await new Promise((r) => setTimeout(r, 600)); // past a's heartbeat: it has given b its half

  const writer = await pgClient();
  t.after(() => writer.end());
  const seqOf = new Map(); // event id -> [aggregate, seq], as written
  for (let i = 0; i < events; i++) {
    const aggregateId = `p${i % 12}`;
    const ev = event({ aggregateId, operation: i < 12 ? 'POST' : 'PUT', payload: { PRD_ID: aggregateId, i } });
    const { eventId, seq } = await e.outbox.write(writer, ev);
    assert.equal(seq, Math.floor(i / 12) + 1);
    seqOf.set(eventId, [aggregateId, seq]);
  }
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  assert.equal((await e.drain(relay)).published, events);

  await until(`${events} messages at the amqplib subscriber`, () => received.length >= events);
  await until(`${events} effects of the partitioned subscriber`,
    async () => (await e.count(`SELECT count(*) FROM "${e.schema}".effects`)) >= events);
  await new Promise((r) => setTimeout(r, 500)); // a duplicate would arrive now
  a.stop();
  b.stop();
  await Promise.all(runs);

  assert.equal(received.length, events, 'every event, and no more');
  assert.equal(new Set(received.map((r) => r.event.OUTBOX_ID)).size, events, 'each exactly once');
  assert.deepEqual(new Set(received.map((r) => r.event.OUTBOX_ID)), new Set(seqOf.keys()));
  assert.ok(received.every((r) => !r.redelivered));
  const last = new Map();
  for (const { event: ev, headers } of received) {
    const [aggregate, seq] = seqOf.get(ev.OUTBOX_ID);
    assert.equal(ev.AGGREGATE_ID, aggregate);
    assert.equal(Number(headers['outbox-seq']), seq);
    assert.equal(headers['outbox-partition-key'], `3:PRD:${aggregate}`);
    assert.equal(seq, (last.get(aggregate) || 0) + 1, `${aggregate}: seq ${seq} received out of order`);
    last.set(aggregate, seq);
    assert.equal(ev.EVENT_TYPE, seq === 1 ? 'ProductCreated' : 'ProductUpdated');
    assert.equal(ev.PAYLOAD.PRD_ID, aggregate);
  }

  // The partitioned subscriber consumed the same events meanwhile: once each, in order, both instances.
  const { rows } = await e.admin.query(
    `SELECT event_id, aggregate, seq::int AS seq, instance FROM "${e.schema}".effects ORDER BY applied`);
  assert.equal(rows.length, events);
  assert.equal(new Set(rows.map((r) => r.event_id)).size, events);
  const lastEffect = new Map();
  for (const r of rows) {
    assert.equal(r.seq, (lastEffect.get(r.aggregate) || 0) + 1, `${r.aggregate}: applied out of order`);
    lastEffect.set(r.aggregate, r.seq);
  }
  assert.deepEqual(new Set(rows.map((r) => r.instance)), new Set(['a', 'b']), 'both instances took a share');
});
