'use strict';
// await db.write(event) on a connection the library owns runs without a thread: the statement is
// sent from the event loop without blocking and the result read when libuv sees the socket
// readable (outbox_write_send / outbox_write_poll). The loop keeps running while a write waits, a
// pending write keeps the process alive and an idle Database does not, calls stay in order, and
// errors are the library's, as from outbox_write.
const test = require('node:test');
const assert = require('node:assert/strict');
const { env, event, PG_URL, tickMonitor } = require('./helpers');
const { OutboxError } = require('./outbox').outbox;

// Holds the counter row of aggregate PRD/<id> (a write of it in an open transaction on `client`).
async function holdAggregate(e, id) {
  await e.admin.query('BEGIN');
  await e.outbox.write(e.admin, event({ aggregateId: id }));
}

test('owned connection: a write waiting on the server leaves the event loop running, and calls stay in order', async (t) => {
  const e = await env(t);
  const db = await e.outbox.connect(PG_URL);
  t.after(() => db.close());
  await db.write(event({ aggregateId: 'warm' })); // the first write also prepares its statement
  await holdAggregate(e, 'held');
  const monitor = tickMonitor();
  let ticks = 0;
  let maxLate = 0;
  const order = [];
  try {
    const waiting = db.write(event({ aggregateId: 'held' })).then((w) => order.push(['write', w.seq]));
    const after = db.txState().then((s) => order.push(['txState', s]));
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(order, [], 'the write waits for the lock, and the call after it for the write');
    await e.admin.query('COMMIT');
    await Promise.all([waiting, after]);
  } finally {
    ({ ticks, maxLate } = monitor.stop());
  }
  assert.deepEqual(order, [['write', 2], ['txState', 'IDLE']]);
  assert.ok(ticks >= 10, `${ticks} ticks while the write waited`);
  assert.ok(maxLate < 50, `a tick was late by ${maxLate.toFixed(1)} ms`);
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox`), 3);
});

test('owned connection: server errors of a write are OutboxErrors as outbox_write gives them; nothing is lost', async (t) => {
  const e = await env(t);
  const db = await e.outbox.connect(PG_URL);
  t.after(() => db.close());
  await holdAggregate(e, 'held');
  await db.exec('BEGIN');
  const first = await db.write(event({ aggregateId: 'mine' }));
  await db.exec("SET LOCAL statement_timeout = '100ms'");
  const err = await db.write(event({ aggregateId: 'held' })).catch((x) => x);
  assert.ok(err instanceof OutboxError, String(err));
  assert.equal(err.code, 'TIMEOUT');
  assert.match(err.message, /statement timeout.*57014/);
  assert.equal(await db.txState(), 'INERROR');
  await assert.rejects(db.write(event()), (x) => x instanceof OutboxError && x.code === 'TRANSACTION');
  await db.exec('ROLLBACK');
  await e.admin.query('COMMIT');
  // Bad input is refused before anything is sent: the transaction goes on.
  await db.transaction(async (tx) => {
    await tx.write(event({ aggregateId: 'mine' }));
    await assert.rejects(tx.write(event({ payload: '{"unterminated":' })), (x) => x.code === 'INVALID_EVENT');
    assert.equal(await tx.txState(), 'INTRANS');
    await tx.write(event({ aggregateId: 'mine' }));
  });
  assert.equal(first.seq, 1);
  const rows = await e.admin.query(`SELECT seq FROM "${e.schema}".outbox WHERE aggregate_id = 'mine' ORDER BY seq`);
  assert.deepEqual(rows.rows.map((r) => Number(r.seq)), [1, 2], 'the rolled-back write left no gap');
  // An idempotency key takes the Database's thread (outbox_write: a savepoint), with the same answers.
  await db.transaction(async (tx) => {
    await tx.write(event({ aggregateId: 'k', idempotencyKey: 'once' }));
    await assert.rejects(tx.write(event({ aggregateId: 'k', idempotencyKey: 'once' })), (x) => x.code === 'DUPLICATE');
    await tx.write(event({ aggregateId: 'k' }));
  });
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox WHERE aggregate_id = 'k'`), 2);
});

test('a pending write keeps the process alive; an idle Database, never closed, does not', async (t) => {
  const e = await env(t);
  const { spawn } = require('child_process');
  const script = `
    const o = require(${JSON.stringify(require('./outbox').dir)});
    const ob = new o.Outbox(${JSON.stringify(e.options)});
    ob.connect(${JSON.stringify(PG_URL)}).then(async (db) => {
      await db.write({ aggregateType: 'PRD', aggregateId: 'warm', operation: 'POST', payload: {} });
      console.log('ready');
      // Nothing but this write is left to keep the process alive while it waits for the lock.
      db.write({ aggregateType: 'PRD', aggregateId: 'held', operation: 'POST', payload: {} })
        .then((w) => console.log('written', w.seq), (err) => console.log('failed', err.message));
    });
  `;
  await holdAggregate(e, 'held');
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let errOut = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (errOut += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const killer = setTimeout(() => child.kill('SIGKILL'), 30000);
  t.after(() => clearTimeout(killer));
  while (!out.includes('ready') && child.exitCode === null) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(child.exitCode, null, `the process waits for its write\n${out}\n${errOut}`);
  await e.admin.query('COMMIT');
  const { code, signal } = await exited;
  assert.equal(code, 0, `exit ${code} ${signal || ''}\n${out}\n${errOut}`);
  assert.match(out, /written 2/);
});
