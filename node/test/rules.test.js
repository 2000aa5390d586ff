'use strict';
// The rules the JS layer reads from the C API instead of keeping copies (issue 15): each test
// fails when JS and the library disagree.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { env, event, pgClient, PG_URL, AMQP_URL } = require('./helpers');
const { dir } = require('./outbox');
const native = require(path.join(dir, 'lib', 'native'));
const FIELDS = native.fields; // camelCase name -> C name, as the addon maps event objects
const codeForSqlstate = native.status_for_sqlstate;

test('event fields: the library enumerates them; the typed OutboxEvent names the same ones', () => {
  const names = [];
  for (let i = 0; native.event_field(i) !== null; i++) names.push(native.event_field(i).name);
  assert.deepEqual(Object.values(FIELDS), names);
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
  const body = dts.slice(dts.indexOf('export interface OutboxEvent {'));
  const declared = [...body.slice(0, body.indexOf('\n}')).matchAll(/^ {2}(\w+)\??:/gm)].map((m) => m[1]);
  assert.deepEqual(declared, Object.keys(FIELDS));
  assert.equal(native.event_field(-1), null);
  assert.equal(native.event_field(names.length), null);
});

test('status codes: the names and numbers errors.js gives every Error are the library\'s (outbox_status_name)', () => {
  // errors.js keeps a table because native.js loads it before the addon; it must equal the C enum.
  const { STATUS } = require(path.join(dir, 'lib', 'errors'));
  assert.deepEqual({ ...STATUS }, { ...native.status });
  for (const [name, code] of Object.entries(STATUS)) assert.equal(native.status_name(code), name);
});

test('SQLSTATE classification is the library\'s', () => {
  assert.equal(codeForSqlstate('23505'), 'DUPLICATE');
  assert.equal(codeForSqlstate('08006'), 'CONNECTION');
  assert.equal(codeForSqlstate('42P01'), 'SCHEMA');
  assert.equal(codeForSqlstate('25P02'), 'TRANSACTION');
  assert.equal(codeForSqlstate('57014'), 'TIMEOUT');
  assert.equal(codeForSqlstate('22P02'), 'DATABASE');
  assert.equal(codeForSqlstate(undefined), 'DATABASE');
  assert.equal(codeForSqlstate('2350'), 'DATABASE');
});

test('the idempotency index the library names is the one the server reports on a reused key', async (t) => {
  const e = await env(t, { 'outbox.table': 'rules_outbox' });
  const client = await pgClient();
  t.after(() => client.end());
  await e.outbox.write(client, event({ aggregateId: 'r1', idempotencyKey: 'rk' }));
  const st = e.outbox.renderWrite(event({ aggregateId: 'r2', idempotencyKey: 'rk' }));
  const err = await client.query(st.text, st.values).then(() => null, (x) => x);
  assert.ok(err, 'the second insert must fail');
  assert.equal(err.constraint, native.idempotency_index(e.outbox._cfg));
  assert.equal(native.idempotency_index(null), 'outbox_idempotency_key_idx');
  assert.equal(codeForSqlstate(err.code), 'DUPLICATE');
  await assert.rejects(e.outbox.write(client, event({ aggregateId: 'r3', idempotencyKey: 'rk' })),
    (x) => x.code === 'DUPLICATE' && /already used by event/.test(x.message));
});

test('a Relay takes pg.url and amqp.url from the environment when the options have none', async () => {
  const { Relay } = require('./outbox').outbox;
  const saved = { pg: process.env.OUTBOX_PG_URL, amqp: process.env.OUTBOX_AMQP_URL };
  try {
    delete process.env.OUTBOX_PG_URL;
    delete process.env.OUTBOX_AMQP_URL;
    assert.throws(() => new Relay({}), (x) => x.code === 'INVALID_ARGUMENT' && /pg\.url/.test(x.message));
    process.env.OUTBOX_PG_URL = PG_URL;
    process.env.OUTBOX_AMQP_URL = AMQP_URL;
    const relay = new Relay({ 'relay.batch_size': 1 });
    relay.close();
  } finally {
    process.env.OUTBOX_PG_URL = saved.pg;
    process.env.OUTBOX_AMQP_URL = saved.amqp;
  }
});
