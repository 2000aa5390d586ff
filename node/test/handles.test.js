'use strict';
// The native layer: type-tagged handles (a wrong one throws, never crashes), closed and busy
// handles, and finalizers that release native resources when objects are collected.
const test = require('node:test');
const assert = require('node:assert/strict');
const v8 = require('v8');
const vm = require('vm');
const { env, PG_URL, AMQP_URL, unique, outbox } = require('./helpers');

const native = outbox.native;
v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

// Functions whose first argument is not a handle.
const NO_HANDLE = new Set(['version', 'version_number', 'status_name', 'set_error_class', 'config_new', 'config_key',
  'event_new', 'db_open', 'render_write', 'render_dedupe', 'event_field', 'status_for_sqlstate', 'idempotency_index']);

test('every native function refuses values that are not its handle type, with a TypeError', async () => {
  const cfg = native.config_new();
  const ev = native.event_new();
  const wrong = [undefined, null, 0, 'x', {}, [], () => {}, Buffer.alloc(8), cfg, ev];
  let checked = 0;
  for (const [name, fn] of Object.entries(native)) {
    if (typeof fn !== 'function' || NO_HANDLE.has(name)) continue;
    for (const bad of wrong) {
      // a config is right for config_*, an event for event_*: skip the matching pairs
      if ((bad === cfg && name.startsWith('config_')) || (bad === ev && name.startsWith('event_'))) continue;
      let err;
      try {
        const r = fn(bad, bad, bad, bad, bad, bad);
        if (r && typeof r.then === 'function') await r.catch((x) => { err = x; });
      } catch (x) {
        err = x;
      }
      assert.ok(err, `${name}(${typeof bad}) did not fail`);
      assert.equal(err.code, 'INVALID_ARGUMENT', `${name}: ${err.message}`);
      checked++;
    }
  }
  assert.ok(checked > 300, `checked ${checked} calls`);
  // The handle-less ones check their arguments too.
  assert.throws(() => native.render_write(ev, cfg), { name: 'TypeError', code: 'INVALID_ARGUMENT' });
  assert.throws(() => native.render_write(cfg, cfg), { name: 'TypeError', code: 'INVALID_ARGUMENT' });
  assert.throws(() => native.db_open(1, cfg), { name: 'TypeError' });
  assert.throws(() => native.db_open(PG_URL, ev), { name: 'TypeError' });
  assert.throws(() => native.event_set(ev, 'payload', 42), { name: 'TypeError' });
  native.event_free(ev);
  native.event_free(ev); // freeing twice is a no-op, as in C
  assert.throws(() => native.event_set(ev, 'payload', '{}'), { code: 'INVALID_ARGUMENT', message: /closed/ });
  native.config_free(cfg);
});

test('the JS layer checks what it is given', async () => {
  await assert.rejects(outbox.write({}, { aggregateType: 'PRD' }), { name: 'TypeError', code: 'INVALID_ARGUMENT' });
  await assert.rejects(outbox.write(null, {}), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(outbox.dedupe('client', {}), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => outbox.renderWrite('event'), { name: 'TypeError', code: 'INVALID_ARGUMENT' });
  assert.throws(() => outbox.renderWrite({ aggregateType: 'PRD', aggregateId: '1', operation: 'POST', payload: 5n ** 2n, user: {} }),
    { code: 'INVALID_ARGUMENT' });
  assert.throws(() => new outbox.Consumer(42, {}), { code: 'INVALID_ARGUMENT' });
  const c = new outbox.Consumer(unique('c'), { 'amqp.url': AMQP_URL });
  const other = new outbox.Consumer(unique('c'), { 'amqp.url': AMQP_URL });
  await assert.rejects(c._settle({}, () => {}), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(c.consume('nope'), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(c.consume(() => {}), { code: 'INVALID_ARGUMENT', message: /pg\.url/ });
  await c.close();
  await other.close();
  await assert.rejects(c.next(), { code: 'INVALID_ARGUMENT', message: /closed/ });
});

test('a handle in use by a pending operation refuses other calls; the JS layer queues them', async (t) => {
  await env(t); // the services must be up
  const db = await native.db_open(PG_URL, null);
  const slow = native.db_exec(db, 'SELECT pg_sleep(0.2)');
  assert.throws(() => native.db_exec(db, 'SELECT 1'), { code: 'INVALID_ARGUMENT', message: /in use/ });
  assert.throws(() => native.db_close(db), { code: 'INVALID_ARGUMENT', message: /in use/ });
  await slow;
  await native.db_exec(db, 'SELECT 1');
  native.db_close(db);

  const database = await outbox.connect(PG_URL);
  const results = await Promise.all([database.exec('SELECT pg_sleep(0.1)'), database.txState(), database.exec('SELECT 1')]);
  assert.equal(results[1], 'IDLE');
  await database.close();
});

test('collected objects release their native resources (finalizers close connections)', async (t) => {
  const e = await env(t);
  const app = unique('gc');
  const url = `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}application_name=${app}`;
  const countOpen = async () => Number((await e.admin.query(
    'SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1', [app])).rows[0].n);
  await (async () => {
    for (let i = 0; i < 3; i++) await outbox.connect(url); // never closed
    await native.db_open(url, null); // a bare handle, never closed
  })();
  assert.equal(await countOpen(), 4);
  for (let i = 0; i < 50 && (await countOpen()) > 0; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(await countOpen(), 0, 'the connections were closed by the finalizers');

  // An explicitly closed one closes at once.
  const db = await outbox.connect(url);
  assert.equal(await countOpen(), 1);
  await db.close();
  for (let i = 0; i < 40 && (await countOpen()) > 0; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(await countOpen(), 0);
});

test('a process (or worker thread) ends cleanly with objects never closed, loggers and connections open', async (t) => {
  const e = await env(t);
  const { spawnSync } = require('child_process');
  const script = `
    const o = require(${JSON.stringify(require('./outbox').dir)});
    const opts = ${JSON.stringify({ ...e.options, 'amqp.exchange': e.exchangeName('exit') })};
    const log = () => {};
    const r1 = new o.Relay({ ...opts, logger: log });
    const r2 = new o.Relay({ ...opts, logger: log });
    const c = new o.Consumer(${JSON.stringify(e.consumerName('exit'))}, { ...opts, logger: log });
    (async () => {
      await r1.step();
      if (process.argv[2] === 'inner') r2.run(); // running on its own thread when the worker is terminated
      await c.connect();
      const db = await o.connect(opts['pg.url']);
      await db.exec('BEGIN');
      if (process.argv[2] === 'worker') {
        const { Worker } = require('worker_threads');
        const w = new Worker(__filename, { argv: ['inner'] }); // the same objects in a worker, then terminated
        w.on('message', () => w.terminate());
        w.on('exit', () => console.log('worker ended'));
      }
      console.log('ready');
      if (require('worker_threads').parentPort) require('worker_threads').parentPort.postMessage('ready');
    })();
  `;
  const file = require('path').join(require('os').tmpdir(), `outbox-exit-${process.pid}.js`);
  require('fs').writeFileSync(file, script);
  t.after(() => require('fs').rmSync(file, { force: true }));
  for (const mode of ['main', 'worker']) {
    const r = spawnSync(process.execPath, [file, mode], { encoding: 'utf8', timeout: 30000 });
    assert.equal(r.status, 0, `${mode}: exit ${r.status} ${r.signal || ''}\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /ready/);
    if (mode === 'worker') assert.match(r.stdout, /worker ended/);
  }
});
