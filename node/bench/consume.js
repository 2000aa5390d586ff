#!/usr/bin/env node
'use strict';
// One Node face of bench/consume_faces.py: a consumer handling N events already waiting in its
// queue with the exactly-once loop of consumer.consume() (BEGIN, dedupe, handler, COMMIT, ack),
// the handler inserting one effect row on the client it is given; stop() once the handler ran N
// times (consume() returns after the event in hand). bench/consume_faces.py prepares the schema,
// the queue and the N events, runs this, and checks the effects, the inbox and the queue.
//
//   node bench/consume.js SPEC_JSON
// SPEC_JSON: { mode: 'client' | 'own', name, events, effects, pgUrl, options } (options: the
// consumer's configuration keys). Prints one JSON line: { handled, seconds, cpu_s, sync_commit }.
// The package measured: OUTBOX_NODE_PACKAGE (an installed one, e.g. PROJECT/node_modules/outbox),
// default this folder; node-postgres is taken from beside that package.
const path = require('path');
const { performance } = require('perf_hooks');

const pkg = process.env.OUTBOX_NODE_PACKAGE || path.join(__dirname, '..');
const outbox = require(pkg);
const pg = require(require.resolve('pg', { paths: [pkg] }));

async function showSyncCommit(client) {
  const r = await client.query('SHOW synchronous_commit');
  return r.rows[0].synchronous_commit;
}

async function main() {
  const spec = JSON.parse(process.argv[2]);
  const insert = `INSERT INTO ${spec.effects} (consumer, outbox_id) VALUES ($1, $2)`;
  let lent = null;
  if (spec.mode === 'client') {
    lent = new pg.Client({ connectionString: spec.pgUrl });
    await lent.connect();
  }
  const consumer = new outbox.Consumer(spec.name, { ...spec.options, 'pg.url': spec.pgUrl });
  await consumer.connect();
  let handled = 0;
  let sync = lent ? await showSyncCommit(lent) : null;
  const handler = async (msg, client) => {
    if (sync === null) sync = await showSyncCommit(client); // the loop's own client: once
    await client.query(insert, [spec.name, msg.id]);
    handled += 1;
    if (handled === spec.events) consumer.stop();
  };
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await consumer.consume(handler, lent ? { client: lent } : {});
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await consumer.close();
  if (lent) await lent.end();
  process.stdout.write(JSON.stringify({ handled, seconds, cpu_s: (cpu.user + cpu.system) / 1e6,
    sync_commit: sync }) + '\n');
}

main().catch((e) => {
  process.stderr.write(`consume.js: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
