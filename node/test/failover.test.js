'use strict';
// A PostgreSQL failover as a connection the library owns sees it (docs/cluster.md, "PostgreSQL
// failover"): a libpq multi-host URL whose first host is down reaches the server that accepts
// writes (target_session_attrs=read-write, as after a promotion). A connection lost inside a
// transaction fails that transaction with CONNECTION and is never reopened inside it; the next
// transaction opens it again by itself, through the same host list. The fault suite shows the same
// with a real promotion; this runs in the ordinary suite.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('net');
const { env, event, rejectsWithCode, unique, PG_URL } = require('./helpers');

function closedPort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port)); // nothing listens there any more
    });
  });
}

async function multiHostUrl(appName) {
  const u = new URL(PG_URL);
  const dead = await closedPort();
  const auth = `${u.username}:${u.password}`;
  return `postgresql://${auth}@127.0.0.1:${dead},${u.host}${u.pathname}` +
    `?target_session_attrs=read-write&connect_timeout=5&application_name=${appName}`;
}

async function backends(e, appName) {
  const r = await e.admin.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [appName]);
  return r.rows.map((row) => row.pid);
}

test('an owned connection follows a host list and reopens only between transactions', async (t) => {
  const e = await env(t);
  const appName = unique('failover');
  const db = await e.outbox.connect(await multiHostUrl(appName));
  t.after(() => db.close());
  const count = async () =>
    Number((await e.admin.query(`SELECT count(*) AS n FROM "${e.schema}".outbox`)).rows[0].n);

  await db.exec('BEGIN');
  await db.write(event({ aggregateId: 'lost' }));
  const [pid] = await backends(e, appName);
  assert.ok(pid, 'the connection came through the host list');
  await e.admin.query('SELECT pg_terminate_backend($1, 5000)', [pid]);

  // The transaction in flight is gone: its writes fail, and COMMIT never succeeds on a new session.
  await rejectsWithCode(db.write(event({ aggregateId: 'lost-2' })), 'CONNECTION');
  await rejectsWithCode(db.exec('COMMIT'), 'CONNECTION');
  assert.equal(await count(), 0, 'nothing of the lost transaction may commit');

  // The next transaction reconnects by itself, through the host list, on a new backend.
  await db.exec('ROLLBACK');
  await db.exec('BEGIN');
  const written = await db.write(event({ aggregateId: 'after' }));
  await db.exec('COMMIT');
  const now = await backends(e, appName);
  assert.equal(now.length, 1);
  assert.notEqual(now[0], pid);
  const rows = await e.admin.query(`SELECT aggregate_id FROM "${e.schema}".outbox WHERE outbox_id = $1`, [written.eventId]);
  assert.deepEqual(rows.rows, [{ aggregate_id: 'after' }]);
});

test('a host list with no server that accepts writes is a clear CONNECTION error, no password shown', async (t) => {
  const e = await env(t);
  const url = `postgresql://outbox:secret-pw@127.0.0.1:${await closedPort()},127.0.0.1:${await closedPort()}/outbox?connect_timeout=2`;
  let err;
  try {
    await e.outbox.connect(url);
  } catch (x) {
    err = x;
  }
  assert.ok(err, 'connecting to no server must fail');
  assert.equal(err.code, 'CONNECTION');
  assert.ok(!err.message.includes('secret-pw'), err.message);
});
