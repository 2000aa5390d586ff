'use strict';
// Every bad input the C suite covers (tests/integration/capi/errors_test.cpp) gets its precise
// code, through node-postgres (rendered statement) and through a connection the library owns,
// and leaves the caller's transaction usable.
const test = require('node:test');
const assert = require('node:assert/strict');
const { env, event, pgClient, rejectsWithCode, PG_URL, outbox } = require('./helpers');

const circular = { name: 'loop' };
circular.self = circular;

const BAD = [
  // [name, event overrides, code, message part]
  ['missing aggregate_type', { aggregateType: '' }, 'INVALID_EVENT', 'aggregate_type is required'],
  ['missing aggregate_id', { aggregateId: '' }, 'INVALID_EVENT', 'aggregate_id is required'],
  ['missing payload', { payload: '' }, 'INVALID_EVENT', 'payload is required'],
  ['payload absent', { payload: undefined }, 'INVALID_EVENT', 'payload is required'],
  ['missing operation', { operation: undefined }, 'INVALID_EVENT', 'operation'],
  ['invalid JSON payload', { payload: '{"a":' }, 'INVALID_EVENT', 'payload is not valid JSON'],
  ['invalid JSON metadata', { metadata: "{'a':1}" }, 'INVALID_EVENT', 'metadata is not valid JSON'],
  ['payload not an object', { payload: '[1,2]' }, 'INVALID_EVENT', 'payload'],
  ['unknown operation', { operation: 'UPSERT' }, 'INVALID_EVENT', 'POST, PUT, PATCH, DELETE'],
  ['unknown field', { colour: 'red' }, 'UNKNOWN_KEY', 'colour'],
  ['a name of Object.prototype', { toString: 'x' }, 'UNKNOWN_KEY', 'toString'],
  ['circular payload', { payload: circular }, 'INVALID_EVENT', 'payload is not JSON-serialisable'],
  ['BigInt in the metadata', { metadata: { n: 1n } }, 'INVALID_EVENT', 'metadata is not JSON-serialisable'],
  ['payload over the limit', { payload: { x: 'a'.repeat(5000) } }, 'TOO_LARGE', 'over the limit'],
  ['NUL in the payload', { payload: '{"a":"x\u0000y"}' }, 'INVALID_EVENT', 'NUL'],
  ['NUL in the aggregate id', { aggregateId: 'a\u0000b' }, 'INVALID_EVENT', 'NUL'],
  ['invalid UTF-8 bytes', { user: Buffer.from([0xc3, 0x28]) }, 'INVALID_EVENT', 'UTF-8'],
  ['bad aggregate type characters', { aggregateType: 'PRD; DROP' }, 'INVALID_EVENT', 'aggregate_type'],
  ['bad explicit event id', { eventId: 'not-a-uuid' }, 'INVALID_EVENT', 'event_id'],
];

test('pg: each bad input has its code, nothing is written, the transaction stays usable', async (t) => {
  const e = await env(t, { 'event.max_payload_bytes': 4096 });
  const client = await pgClient();
  t.after(() => client.end());
  await client.query('BEGIN');
  await e.outbox.write(client, event({ aggregateId: 'keep', idempotencyKey: 'once' }));
  for (const [name, overrides, code, part] of BAD) {
    await t.test(name, async () => {
      const err = await rejectsWithCode(e.outbox.write(client, event(overrides)), code, part);
      assert.ok(err instanceof outbox.OutboxError, `${name}: an OutboxError`);
      assert.equal(err.status, outbox.status[code]);
      assert.equal(client.getTransactionStatus(), 'T', `${name} broke the caller's transaction`);
    });
  }
  await t.test('duplicate idempotency key (in a transaction: a savepoint keeps it usable)', async () => {
    const err = await rejectsWithCode(e.outbox.write(client, event({ aggregateId: 'dup', idempotencyKey: 'once' })),
      'DUPLICATE', 'already used by event');
    assert.equal(err.cause.code, '23505');
    assert.equal(client.getTransactionStatus(), 'T');
    assert.equal((await client.query('SELECT 1 AS one')).rows[0].one, 1);
  });
  // SQL-looking text and quotes are data, stored verbatim.
  const sqlish = "Robert'); DROP TABLE outbox;--";
  const payload = '{"name":"Robert\'); DROP TABLE outbox;--","q":"\\"x\\""}';
  await e.outbox.write(client, event({ aggregateId: sqlish, operation: 'PUT', payload, user: 'o\'neil "the" user' }));
  await client.query('COMMIT');
  const rows = await e.admin.query(`SELECT aggregate_id, payload::text AS payload, actor FROM "${e.schema}".outbox ORDER BY seq, aggregate_id`);
  assert.equal(rows.rows.length, 2, 'only the good and the odd event were written');
  const odd = rows.rows.find((r) => r.aggregate_id === sqlish);
  assert.equal(odd.payload, payload);
  assert.equal(odd.actor, 'o\'neil "the" user');
});

test('pg: duplicate key outside a transaction, aborted transaction, missing tables, closed and broken clients', async (t) => {
  const e = await env(t);
  const client = await pgClient();
  t.after(() => client.end().catch(() => {}));
  const a = await e.outbox.write(client, event({ aggregateId: 'a', idempotencyKey: 'k' }));
  const err = await rejectsWithCode(e.outbox.write(client, event({ aggregateId: 'b', idempotencyKey: 'k' })), 'DUPLICATE');
  assert.ok(err.message.includes(a.eventId), `names the event holding the key: ${err.message}`);
  // No gap in b's sequence from the rejected write.
  assert.equal((await e.outbox.write(client, event({ aggregateId: 'b' }))).seq, 1);

  await client.query('BEGIN');
  await assert.rejects(client.query('SELECT 1/0'));
  await rejectsWithCode(e.outbox.write(client, event()), 'TRANSACTION', 'roll it back');
  await client.query('ROLLBACK');

  const unmigrated = new outbox.Outbox({ 'outbox.schema': e.schema, 'outbox.table': 'never_migrated' });
  await rejectsWithCode(unmigrated.write(client, event()), 'SCHEMA', 'never_migrated');

  // Broken: the server ended the backend.
  const victim = await pgClient();
  const pid = (await victim.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  await e.admin.query('SELECT pg_terminate_backend($1, 5000)', [pid]);
  await new Promise((r) => setTimeout(r, 100));
  await rejectsWithCode(e.outbox.write(victim, event()), 'CONNECTION');
  await rejectsWithCode(e.outbox.write(victim, event()), 'CONNECTION');
  // Closed by its owner.
  const closed = await pgClient();
  await closed.end();
  await rejectsWithCode(e.outbox.write(closed, event()), 'CONNECTION');
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 2);
});

test('writeMany: an event JSON.stringify refuses is INVALID_EVENT with its index, as the addon\'s errors', async (t) => {
  const e = await env(t);
  const db = await e.outbox.connect(PG_URL);
  t.after(() => db.close());
  await db.exec('BEGIN');
  const err = await rejectsWithCode(db.writeMany([event(), event({ payload: circular }), event()]), 'INVALID_EVENT',
    'payload is not JSON-serialisable');
  assert.ok(err instanceof outbox.OutboxError);
  assert.equal(err.index, 1);
  assert.ok(err.cause instanceof TypeError, 'the cause is JSON.stringify\'s error');
  assert.equal(await db.txState(), 'INTRANS', 'the transaction is usable');
  // The addon's own refusals (a value of the wrong type, an unknown field) carry `index` the same way.
  assert.equal((await rejectsWithCode(db.writeMany([event(), event(), event({ user: {} })]), 'INVALID_ARGUMENT')).index, 2);
  assert.equal((await rejectsWithCode(db.writeMany([event(), event({ colour: 'red' })]), 'UNKNOWN_KEY')).index, 1);
  assert.equal((await db.writeMany([event({ aggregateId: 'a' }), event({ aggregateId: 'b' })])).length, 2);
  await db.exec('COMMIT');
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 2, 'none of the refused batches was written');
});

test('owned connection: bad input, duplicate, aborted transaction, broken and closed connection, unreachable server', async (t) => {
  const e = await env(t, { 'event.max_payload_bytes': 4096 });
  const db = await e.outbox.connect(PG_URL);
  await db.exec('BEGIN');
  await db.write(event({ aggregateId: 'keep', idempotencyKey: 'once' }));
  for (const [name, overrides, code, part] of BAD) {
    await rejectsWithCode(db.write(event(overrides)), code, part).catch((x) => assert.fail(`${name}: ${x.message}`));
    assert.equal(await db.txState(), 'INTRANS', `${name} broke the transaction`);
  }
  await rejectsWithCode(db.write(event({ aggregateId: 'dup', idempotencyKey: 'once' })), 'DUPLICATE', 'already used');
  assert.equal(await db.txState(), 'INTRANS');
  await db.exec('COMMIT');
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 1);

  await db.exec('BEGIN');
  await rejectsWithCode(db.exec('SELECT 1/0'), 'DATABASE', 'division by zero');
  await rejectsWithCode(db.write(event()), 'TRANSACTION', 'roll it back');
  await db.exec('ROLLBACK');

  await db.exec(`SET application_name = '${e.schema}'`); // to find its backend
  const pid = await e.admin.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [e.schema]);
  assert.equal(pid.rows.length, 1);
  await e.admin.query('SELECT pg_terminate_backend($1, 5000)', [pid.rows[0].pid]);
  await new Promise((r) => setTimeout(r, 100));
  await rejectsWithCode(db.write(event()), 'CONNECTION');
  await db.close();
  await rejectsWithCode(db.write(event()), 'CONNECTION', 'closed');
  await rejectsWithCode(db.exec('BEGIN'), 'CONNECTION', 'closed');

  const err = await rejectsWithCode(outbox.connect('postgresql://outbox:topsecret@127.0.0.1:1/outbox?connect_timeout=2'),
    'CONNECTION', 'cannot connect');
  assert.ok(!err.message.includes('topsecret'), `no password in: ${err.message}`);
});

test('configuration: hostile table names, unknown keys, bad values, refused purge', async (t) => {
  assert.throws(() => new outbox.Outbox({ 'outbox.table': 'outbox; DROP TABLE users; --' }),
    (x) => x.code === 'INVALID_ARGUMENT' && /SQL identifier/.test(x.message));
  assert.throws(() => new outbox.Outbox({ 'outbox.schema': 'public"; --' }), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => new outbox.Outbox({ 'no.such': 1 }), { code: 'UNKNOWN_KEY' });
  assert.throws(() => new outbox.Outbox({ 'relay.batch_size': -5 }), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => new outbox.Outbox({ 'relay.batch_size': {} }), { code: 'INVALID_ARGUMENT', name: 'TypeError' });
  const envPg = process.env.OUTBOX_PG_URL;
  delete process.env.OUTBOX_PG_URL; // else the library's fallback supplies pg.url
  try {
    assert.throws(() => new outbox.Relay({ 'amqp.url': 'amqp://x' }), { code: 'INVALID_ARGUMENT' }); // no pg.url
  } finally {
    process.env.OUTBOX_PG_URL = envPg;
  }
  const ob = new outbox.Outbox({ 'amqp.url': 'amqp://u:secret@h/%2f' });
  assert.equal(ob.get('amqp.url'), '***');
  assert.equal(ob.get('outbox.table'), 'outbox');
  assert.ok(outbox.configKeys().some((k) => k.key === 'consumer.delivery_limit'));

  const e = await env(t);
  const db = await e.outbox.connect(PG_URL);
  t.after(() => db.close());
  await rejectsWithCode(db.purgeInbox(60), 'INVALID_ARGUMENT', 'retention');
  assert.equal(await db.purgeInbox(30 * 86400), 0);
});
