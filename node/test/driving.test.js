'use strict';
// The JS side of the library's step machines: what an error of the addon's own (not the driver's)
// does to consume() and to outbox.write(client, event). The addon's functions are replaced for a
// moment (the package calls them through the same exports object), so the failures are planted.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { env, event, pgClient, outbox } = require('./helpers');

const native = outbox.native;

/** Runs fn with native[name] replaced by replacement; restores it, whatever happens. */
async function withNative(name, replacement, fn) {
  const original = native[name];
  native[name] = replacement(original);
  try {
    return await fn();
  } finally {
    native[name] = original;
  }
}

test('consume(): after a loop that failed to start, consume() runs (no "already consuming")', async (t) => {
  const e = await env(t);
  const name = e.consumerName();
  const consumer = e.outbox.consumer(name);
  t.after(() => consumer.close());
  await consumer.connect(); // the queue exists before anything is published
  const planted = Object.assign(new Error('planted: loop_new failed'), { code: 'INTERNAL' });
  await withNative('loop_new', () => () => Promise.reject(planted), () =>
    assert.rejects(consumer.consume(() => {}), (err) => err === planted));

  const writer = await pgClient();
  t.after(() => writer.end());
  await e.outbox.write(writer, event({ aggregateId: 'after' }));
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  assert.equal((await e.drain(relay)).published, 1);
  const seen = [];
  await consumer.consume((m) => {
    seen.push(m.aggregateId);
    consumer.stop();
  });
  assert.deepEqual(seen, ['after']);

  // Closed: each consume() says so, never "already consuming".
  await consumer.close();
  for (let i = 0; i < 2; i++) {
    await assert.rejects(consumer.consume(() => {}), (err) => err.code === 'INVALID_ARGUMENT' && /closed/.test(err.message));
  }
});

test('outbox.write(client): an error of the addon\'s is not reported to the plan as the driver\'s', async (t) => {
  const client = await pgClient();
  t.after(() => client.end()); // first: its transaction would hold the schema env() drops
  const e = await env(t);
  const planted = Object.assign(new Error('planted: write_plan_done failed'), { code: 'INTERNAL' });
  const failed = [];
  await client.query('BEGIN');
  await withNative('write_plan_failed', (original) => (plan, err) => {
    failed.push(err);
    return original(plan, err);
  }, () => withNative('write_plan_done', (original) => {
    let calls = 0;
    return (...args) => { // fails once
      if (calls++ === 0) throw planted;
      return original(...args);
    };
  }, () => assert.rejects(e.outbox.write(client, event()), (err) => err === planted)));
  assert.deepEqual(failed, [], 'write_plan_failed was not called: no driver failure');
  await client.query('ROLLBACK');
  // A failure of the driver's own is still the plan's to judge: a closed client is CONNECTION.
  const closed = await pgClient();
  await closed.end();
  await withNative('write_plan_failed', (original) => (plan, err) => {
    failed.push(err);
    return original(plan, err);
  }, () => assert.rejects(e.outbox.write(closed, event()), { code: 'CONNECTION' }));
  assert.equal(failed.length, 1);
  assert.equal((await e.outbox.write(client, event())).seq, 1, 'the client writes as before');
});

test('a driver error without SQLSTATE is a lost connection only for the phrases that say so', async (t) => {
  const e = await env(t);
  // A pooled client whose query() throws at once (node-postgres rejects; a throw is the driver's failure too).
  const failing = (message) => ({ query: () => { throw new Error(message); }, release() {} });
  await assert.rejects(e.outbox.write(failing('This socket has been ended by the other party'), event()),
    { code: 'CONNECTION' });
  await assert.rejects(e.outbox.write(failing('Client was closed and is not queryable'), event()), { code: 'CONNECTION' });
  for (const message of ['the text appended is too long', 'an extended statistics object failed']) {
    await assert.rejects(e.outbox.write(failing(message), event()), (err) => err.code !== 'CONNECTION' &&
      err.cause?.message === message, message);
  }
});

test('consume() on its own client: connecting gives up after pg.connect_timeout_s, so stop() returns', async (t) => {
  // A server that accepts connections and never answers: without a timeout, connect() (and so
  // consume() after stop()) would wait forever.
  const sockets = [];
  const server = net.createServer((s) => sockets.push(s)).listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  t.after(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  const e = await env(t, { 'pg.connect_timeout_s': 1 });
  const logs = [];
  const consumer = e.outbox.consumer(e.consumerName(), {
    'pg.url': `postgresql://outbox:outbox@127.0.0.1:${server.address().port}/outbox`,
    logger: (level, msg) => logs.push(`${level} ${msg}`),
  });
  t.after(() => consumer.close());
  const started = Date.now();
  const done = consumer.consume(() => {});
  const failed = () => logs.some((l) => l.includes('cannot connect to PostgreSQL'));
  while (!failed() && Date.now() - started < 10000) await new Promise((r) => setTimeout(r, 50));
  consumer.stop();
  await done;
  assert.ok(failed(), `the connect failure was logged:\n${logs.join('\n')}`);
  assert.ok(sockets.length >= 1, 'the consumer connected to the silent server');
  assert.ok(Date.now() - started < 8000, `consume() returned ${Date.now() - started} ms after it started`);
});
