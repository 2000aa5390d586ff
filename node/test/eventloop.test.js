'use strict';
// Blocking calls run off the main thread: a 10 ms timer keeps ticking on time while a relay
// step, a consumer wait and writes (owned connection and node-postgres) run.
const test = require('node:test');
const assert = require('node:assert/strict');
const { performance } = require('perf_hooks');
const { env, event, pgClient, PG_URL, tickMonitor } = require('./helpers');

test('the event loop never stalls during a relay step, a consumer wait and writes', async (t) => {
  const e = await env(t);
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  // A consumer on an exchange nobody publishes to: its wait lasts the whole timeout.
  const idle = e.outbox.consumer(e.consumerName('idle'), { 'amqp.exchange': e.exchangeName('idle') });
  t.after(() => idle.close());
  await idle.connect();
  const collector = await e.collector(); // the relay's messages need a queue to go to
  const db = await e.outbox.connect(PG_URL);
  t.after(() => db.close());
  const client = await pgClient();
  t.after(() => client.end());
  await db.transaction(async () => {
    for (let i = 0; i < 300; i++) await db.write(event({ aggregateId: `a${i % 50}` }));
  });

  const monitor = tickMonitor();
  let ticks = 0;
  let maxLate = 0;
  const started = performance.now();
  try {
    const [step, waited] = await Promise.all([
      relay.step(),
      idle.next(400),
      db.transaction(async () => {
        await db.exec('SELECT pg_sleep(0.15)');
        await db.write(event({ aggregateId: 'slow' }));
      }),
      (async () => {
        await client.query('BEGIN');
        await e.outbox.write(client, event({ aggregateId: 'pg' }));
        await client.query('SELECT pg_sleep(0.1)');
        await client.query('COMMIT');
      })(),
    ]);
    assert.equal(step.published, 300);
    assert.equal(waited, null, 'the consumer waited the whole timeout');
  } finally {
    ({ ticks, maxLate } = monitor.stop());
  }
  const elapsed = performance.now() - started;
  assert.ok(elapsed >= 390, `the operations took ${elapsed.toFixed(0)} ms`);
  assert.ok(ticks >= elapsed / 10 / 2, `${ticks} ticks in ${elapsed.toFixed(0)} ms`);
  assert.ok(maxLate < 50, `a tick was late by ${maxLate.toFixed(1)} ms`);
  await collector.waitFor(300);
});
