'use strict';
// A consumer on a killed RabbitMQ cluster node goes on from the next address of amqp.url, whatever
// connection consume() was given (a pg.Client, a pg.Pool, the library's own): three consumers at once
// on the 3-node cluster scripts/test.sh starts for these tests (OUTBOX_TEST_CLUSTER_AMQP_URL; quorum
// queues). tests/support/cluster_node.sh kills the node they are on and starts it again afterwards.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');
const pg = require('pg');
const { env, event, pgClient, PG_URL } = require('./helpers');

const script = path.join(__dirname, '..', '..', 'tests', 'support', 'cluster_node.sh');
const clusterNode = async (...args) => (await promisify(execFile)(script, args, { timeout: 180000 })).stdout.trim();

test('consumers on a killed cluster node go on from the next address, on every kind of connection', async (t) => {
  const list = process.env.OUTBOX_TEST_CLUSTER_AMQP_URL;
  assert.ok(list, 'OUTBOX_TEST_CLUSTER_AMQP_URL is not set: run through scripts/test.sh (it starts the test cluster)');
  const urls = list.split(',');
  await clusterNode('ensure');
  t.after(() => clusterNode('ensure'));
  const e = await env(t, { 'amqp.url': list });
  await e.admin.query(`CREATE TABLE "${e.schema}".effects (consumer text, id text, PRIMARY KEY (consumer, id))`);
  const prefix = e.consumerName('kill');
  const modes = ['client', 'pool', 'own'];
  const consumers = Object.fromEntries(modes.map((m) => [m, e.outbox.consumer(`${prefix}-${m}`)]));
  for (const c of Object.values(consumers)) {
    t.after(() => c.close());
    await c.connect(); // the queues exist before the relay publishes
  }
  const writer = await pgClient();
  t.after(() => writer.end());
  // Two events, published through `through` (the relay tries again while the cluster elects the
  // queues' leaders).
  const publish = async (from, through) => {
    for (let i = from; i < from + 2; i++) await e.outbox.write(writer, event({ aggregateId: `k${i}`, payload: { i } }));
    const relay = e.outbox.relay({ 'amqp.url': through.join(',') });
    let published = 0;
    for (const until = Date.now() + 60000; published < 2 && Date.now() < until;) {
      published += await e.drain(relay).then((s) => s.published, () => 0);
      if (published < 2) await new Promise((r) => setTimeout(r, 200));
    }
    await relay.close();
    assert.equal(published, 2, `published through ${through.length} nodes`);
  };
  await publish(0, urls);
  const seen = Object.fromEntries(modes.map((m) => [m, []]));
  let second;
  const allAtTwo = new Promise((resolve) => { second = resolve; });
  const handler = (mode) => async (m, tx) => {
    await tx.query(`INSERT INTO "${e.schema}".effects VALUES ($1, $2)`, [mode, m.id]);
    seen[mode].push(m.id);
    if (modes.every((x) => seen[x].length >= 2)) second();
    if (seen[mode].length === 4) consumers[mode].stop();
  };
  const options = { own: {} };
  options.client = { client: await pgClient() };
  t.after(() => options.client.client.end());
  options.pool = { pool: new pg.Pool({ connectionString: PG_URL, max: 2 }) };
  t.after(() => options.pool.pool.end());
  const runs = modes.map((m) => consumers[m].consume(handler(m), options[m]));
  await Promise.race([allAtTwo, Promise.all(runs)]);
  const killed = Number(await clusterNode('kill-node-of', `outbox-consumer ${prefix}-`));
  await publish(2, urls.filter((_, i) => i !== killed - 1));
  const watchdog = setTimeout(() => modes.forEach((m) => consumers[m].stop()), 120000);
  await Promise.all(runs);
  clearTimeout(watchdog);
  for (const m of modes) assert.equal(new Set(seen[m]).size, 4, `${m}: ${seen[m].length} events`);
  const { rows } = await e.admin.query(`SELECT consumer, count(*)::int AS n FROM "${e.schema}".effects GROUP BY 1`);
  assert.deepEqual(Object.fromEntries(rows.map((r) => [r.consumer, r.n])), { client: 4, pool: 4, own: 4 });
});
