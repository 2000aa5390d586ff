'use strict';
// Issue 29: a deployment starts the N replicas of a partitioned subscriber at once. Eight instances
// of a new partitioned subscriber (a fresh name each round) connect at the same moment; each records
// the partition count or reads the one recorded an instant before, and all of them connect. Twenty
// rounds in a row.
//
// connect() runs on libuv's thread pool (4 threads by default): this file runs in a process of its
// own (node --test), so a pool as large as the instances is set before anything uses it, and the
// eight calls, started in one tick, run side by side.
const INSTANCES = 8;
if (!process.env.UV_THREADPOOL_SIZE || Number(process.env.UV_THREADPOOL_SIZE) < INSTANCES + 2) {
  process.env.UV_THREADPOOL_SIZE = String(INSTANCES + 2);
}
const test = require('node:test');
const assert = require('node:assert/strict');
const { env } = require('./helpers');

test('instances of a new partitioned subscriber started together all connect', async (t) => {
  const rounds = 20;
  const partitions = 2;
  const e = await env(t, { 'consumer.partitions': partitions });
  const failures = [];
  for (let r = 0; r < rounds; r++) {
    const name = e.consumerName(`start${r}`);
    for (let i = 0; i < partitions; i++) e.addQueue(`${name}.p${i}`);
    e.addExchange(`${name}.partitions`);
    const consumers = [];
    for (let i = 0; i < INSTANCES; i++) consumers.push(e.outbox.consumer(name, { 'consumer.instance': `i${i}` }));
    // All started in this tick: the pool's threads take them at once.
    const results = await Promise.allSettled(consumers.map((c) => c.connect()));
    await Promise.all(consumers.map((c) => c.close()));
    results.forEach((res, i) => {
      if (res.status === 'rejected') {
        failures.push(`round ${r} instance ${i}: ${res.reason.code}: ${res.reason.message}`);
      }
    });
    const { rows } = await e.admin.query(
      `SELECT partitions FROM "${e.schema}".outbox_inbox_partitionings WHERE consumer = $1`, [name]);
    assert.deepEqual(rows.map((x) => x.partitions), [partitions]);
  }
  assert.deepEqual(failures, []);
});
