'use strict';
// consumer.on_failure=park (the default): a handler's failure holds its aggregate in PostgreSQL
// instead of holding the queue. Aggregate a fails transiently (retried, parked after
// consumer.max_attempts), b's first event permanently (parked at once), c flows. Then the
// operator's calls on a Database: parked() lists them, redrive() after the fix applies a's held
// events in seq order, skip() (by, reason) lets b's next event through; nothing is left.
const test = require('node:test');
const assert = require('node:assert/strict');
const { env, event, pgClient, outbox } = require('./helpers');

const FAST = { 'consumer.max_attempts': 2, 'consumer.retry_initial_ms': 20, 'consumer.retry_poll_ms': 20 };

async function until(what, fn, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// How b's first event says it can never succeed: the class, or any error marked permanent.
const PERMANENT = {
  class: () => new outbox.PermanentFailure('the order is malformed'),
  flag: () => Object.assign(new TypeError('the order is malformed'), { permanent: true }),
};

for (const [mode, how] of [['client', 'class'], ['own', 'flag']]) {
  test(`consume() with ${mode === 'client' ? 'a lent client' : 'its own client'}, permanent by ${how}: park, ` +
    'redrive and skip', async (t) => {
    const e = await env(t, FAST);
    const name = e.consumerName('park');
    await e.admin.query(`CREATE TABLE "${e.schema}".applied (n bigserial PRIMARY KEY, agg text NOT NULL, seq int)`);
    const consumer = e.outbox.consumer(name);
    t.after(() => consumer.close());
    await consumer.connect();
    const relay = e.outbox.relay();
    t.after(() => relay.close());
    const writer = await pgClient();
    t.after(() => writer.end());
    const ids = {};
    await writer.query('BEGIN');
    for (const agg of ['a', 'b', 'c']) {
      for (const i of [1, 2]) {
        ids[`${agg}${i}`] = (await e.outbox.write(writer, event({ aggregateType: 'ORD', aggregateId: agg, payload: { i } })))
          .eventId;
      }
    }
    await writer.query('COMMIT');
    assert.equal((await e.drain(relay)).published, 6);
    const db = await e.outbox.connect(e.options['pg.url']);
    t.after(() => db.close());
    const client = mode === 'client' ? await pgClient() : null;
    if (client) t.after(() => client.end());

    let broken = true;
    const calls = { a: 0, b: 0, c: 0 };
    const handler = async (m, tx) => {
      calls[m.aggregateId]++;
      if (m.aggregateId === 'a' && broken) throw new Error('the ledger is down');
      if (m.aggregateId === 'b' && m.seq === 1) throw PERMANENT[how]();
      await tx.query(`INSERT INTO "${e.schema}".applied (agg, seq) VALUES ($1, $2)`, [m.aggregateId, m.seq]);
    };
    const applied = async () =>
      (await e.admin.query(`SELECT agg || seq AS x FROM "${e.schema}".applied ORDER BY n`)).rows.map((r) => r.x);
    const consumeUntil = async (what, fn) => {
      const done = consumer.consume(handler, client ? { client } : {});
      try {
        await until(what, fn);
      } finally {
        consumer.stop();
        await done;
      }
    };

    await consumeUntil('c applied, a and b parked', async () => (await applied()).length === 2 &&
      (await db.parked(name)).filter((r) => r.state === 'parked').length === 2);
    assert.deepEqual(await applied(), ['c1', 'c2'], 'c flows; nothing of a parked aggregate before its head');
    assert.deepEqual(calls, { a: 2, b: 1, c: 2 }, 'a: consumer.max_attempts tries; b: one (permanent)');
    const rows = Object.fromEntries((await db.parked(name)).map((r) => [r.aggregateId, r]));
    assert.deepEqual(Object.keys(rows).sort(), ['a', 'b']);
    const { a, b } = rows;
    assert.deepEqual([a.consumer, a.source, a.aggregateType, a.state, a.attempts, a.waiting, a.headEventId, a.headSeq],
      [name, 'consumer', 'ORD', 'parked', 2, 1, ids.a1, 1]);
    assert.equal(a.lastError, 'Error: the ledger is down');
    assert.deepEqual([b.state, b.attempts, b.waiting, b.headEventId], ['parked', 1, 1, ids.b1]);
    assert.equal(b.lastError, how === 'class' ? 'PermanentFailure: the order is malformed' :
      'TypeError: the order is malformed');
    assert.equal(typeof a.parkedAgeS, 'number');
    assert.deepEqual(await db.parked('nobody', { includeRelay: false, limit: 5 }), []);
    const metrics = await db.metricsText(); // what a consumer process serves on its own /metrics
    assert.ok(metrics.includes(`outbox_parked_aggregates{subscriber="${name}"} 2\n`), metrics);
    assert.ok(metrics.includes('# TYPE outbox_subscriber_lag_seconds gauge'), metrics);

    broken = false; // the cause fixed: a's head, then its held event, in order
    assert.equal(await db.redrive(name, 'ORD', 'a'), 1);
    assert.equal(await db.redrive(name, 'ORD', 'c'), 0, 'not held');
    await consumeUntil('a redriven', async () => (await applied()).length === 4);
    assert.deepEqual(await applied(), ['c1', 'c2', 'a1', 'a2']);

    await assert.rejects(db.skip(name, 'ORD', 'b', { by: 'ops', reason: 'wrong one', eventId: ids.b2 }),
      { code: 'NOT_FOUND' }, 'the head is b1: what the operator saw must be it');
    assert.equal(await db.skip(name, 'ORD', 'b', { by: 'ops@example', reason: 'malformed, fixed by hand', eventId: ids.b1 }),
      ids.b1);
    await consumeUntil('b2 through', async () => (await applied()).length === 5);
    assert.deepEqual(await applied(), ['c1', 'c2', 'a1', 'a2', 'b2'], 'b1 skipped, never applied');
    assert.deepEqual(await db.parked(name), []);
    assert.equal(await db.redriveAll(name), 0);
    await assert.rejects(db.skip(name, 'ORD', 'b', { by: 'ops' }), { code: 'NOT_FOUND' });
    const skipped = await e.admin.query(
      `SELECT outbox_id::text AS id, skipped_by, reason FROM "${e.schema}".outbox_inbox_skipped`);
    assert.deepEqual(skipped.rows, [{ id: ids.b1, skipped_by: 'ops@example', reason: 'malformed, fixed by hand' }]);
  });
}

test('the operator calls check their arguments', async (t) => {
  const e = await env(t);
  const db = await e.outbox.connect(e.options['pg.url']);
  t.after(() => db.close());
  await assert.rejects(db.parked(null, { limit: 0 }), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(db.skip('c', 'ORD', '1', { by: '' }), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(db.skip('c', 'ORD', '1', { by: 'ops', eventId: 'not-a-uuid' }), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(db.skip('c', 'ORD', '1', {}), { code: 'INVALID_ARGUMENT' }, 'by is required');
  assert.ok(outbox.PermanentFailure.prototype instanceof Error);
  assert.equal(new outbox.PermanentFailure('x').name, 'PermanentFailure');
});
