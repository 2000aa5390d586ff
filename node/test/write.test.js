'use strict';
// Transactional writes: with node-postgres in the caller's transaction, and on a connection
// the library owns. Commit publishes; rollback never does.
const test = require('node:test');
const assert = require('node:assert/strict');
const { env, event, pgClient, PG_URL, outbox } = require('./helpers');

test('pg: commit persists business row and event, the relay publishes it; rollback leaves neither', async (t) => {
  const e = await env(t);
  const client = await pgClient();
  t.after(() => client.end());
  await e.admin.query(`CREATE TABLE "${e.schema}".products (id text PRIMARY KEY, name text)`);
  const collector = await e.collector();
  const relay = e.outbox.relay();
  t.after(() => relay.close());

  // Rolled back: neither the product nor the event.
  await client.query('BEGIN');
  await client.query(`INSERT INTO "${e.schema}".products VALUES ('999', 'never')`);
  const gone = await e.outbox.write(client, event({ aggregateId: '999' }));
  assert.equal(gone.eventType, 'ProductCreated');
  await client.query('ROLLBACK');

  // Committed: both.
  await client.query('BEGIN');
  await client.query(`INSERT INTO "${e.schema}".products VALUES ('123', 'Widget Pro')`);
  const w = await outbox.write(client, event(), e.options); // the module-level helper
  assert.match(w.eventId, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  assert.equal(w.eventType, 'ProductCreated');
  assert.equal(w.seq, 1);
  await client.query('COMMIT');

  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".products`), 1);
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 1);
  const total = await e.drain(relay);
  assert.equal(total.published, 1);
  const [m] = await collector.waitFor(1);
  const body = JSON.parse(m.content.toString());
  assert.equal(body.OUTBOX_ID, w.eventId);
  assert.equal(body.AGGREGATE_ID, '123');
  assert.deepEqual(body.PAYLOAD, event().payload);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(collector.messages.length, 1, 'the rolled-back event was never published');
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox WHERE aggregate_id = '999'`), 0);
});

test('pg: sequence numbers per aggregate, naming, explicit type, rendered statement', async (t) => {
  const e = await env(t);
  const client = await pgClient();
  t.after(() => client.end());
  await client.query('BEGIN');
  const a = await e.outbox.write(client, event({ operation: 'POST' }));
  const b = await e.outbox.write(client, event({ operation: 'PATCH', previousPayload: '{"XPRD02":99.99}' }));
  const c = await e.outbox.write(client, event({ operation: 'FORCE_DELETE' }));
  const d = await e.outbox.write(client, event({ aggregateType: 'ORD', aggregateId: 7, operation: 'PUT', eventType: 'OrderShipped' }));
  await client.query('COMMIT');
  assert.deepEqual([a.seq, b.seq, c.seq, d.seq], [1, 2, 3, 1]);
  assert.deepEqual([a.eventType, b.eventType, c.eventType, d.eventType],
    ['ProductCreated', 'ProductUpdated', 'ProductForceDeleted', 'OrderShipped']);
  const r = e.outbox.renderWrite(event());
  assert.match(r.text, /\$11/);
  assert.equal(r.values.length, 11);
  assert.equal(r.values[3], 'ProductCreated');
  const rows = await e.admin.query(`SELECT operation, previous_payload::text AS pp FROM "${e.schema}".outbox ORDER BY aggregate_type, seq`);
  assert.deepEqual(rows.rows.map((x) => x.operation), ['PUT', 'POST', 'PATCH', 'DELETE']);
  assert.equal(rows.rows.find((x) => x.operation === 'PATCH').pp, '{"XPRD02":99.99}');
});

test('owned connection: BEGIN/write/COMMIT and ROLLBACK, transaction(), txState, migrate idempotent', async (t) => {
  const e = await env(t);
  const db = await e.outbox.connect(PG_URL);
  t.after(() => db.close());
  assert.equal(await db.migrate(), 2, 'migrating again is a no-op at the same version');
  await db.exec('BEGIN');
  assert.equal(await db.txState(), 'INTRANS');
  const w = await db.write(event());
  assert.equal(w.seq, 1);
  await db.exec('ROLLBACK');
  assert.equal(await db.txState(), 'IDLE');
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 0);
  const res = await db.transaction(async (tx) => {
    await tx.write(event());
    return tx.write(event({ operation: 'PUT' }));
  });
  assert.equal(res.seq, 2);
  await assert.rejects(db.transaction(async (tx) => {
    await tx.write(event());
    throw new Error('business rule');
  }), /business rule/);
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 2);
  // Concurrent calls on one handle are queued, never run at once.
  const many = await Promise.all(Array.from({ length: 20 }, (_, i) => db.write(event({ aggregateId: `c${i}` }))));
  assert.equal(new Set(many.map((x) => x.eventId)).size, 20);
});

// Independent testing found that a pg.Pool was accepted: the INSERT ran in autocommit on another
// pooled connection, survived the caller's ROLLBACK and was published for a transaction that never
// committed. A pool (or anything that is not one connection) is refused, naming what to pass.
test('pg: a Pool, or anything that is not one connection, is refused and nothing is written', async (t) => {
  const pg = require('pg');
  const e = await env(t);
  const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
  t.after(() => pool.end());
  const refused = async (what, queryable) => {
    await assert.rejects(e.outbox.write(queryable, event()), (err) => {
      assert.equal(err.code, 'INVALID_ARGUMENT', what);
      assert.match(err.message, /pool\.connect\(\)/, what);
      return true;
    });
    await assert.rejects(outbox.write(queryable, event(), e.options), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(e.outbox.dedupe(queryable, { consumer: 'c', eventId: '0190a5a0-0000-7000-8000-000000000001' }),
      { code: 'INVALID_ARGUMENT' });
  };
  await refused('pg.Pool', pool);
  await refused('a duck with query()', { query: async () => ({ rows: [['1']] }) });
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 0, 'nothing was written');

  // The client a pool lends is one connection: it works, in its transaction.
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await e.outbox.write(client, event());
    await client.query('ROLLBACK');
  } finally {
    client.release();
  }
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 0, 'the rollback took the event');
});
