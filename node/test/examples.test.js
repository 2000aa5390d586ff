'use strict';
// examples/node: the documents' subscribers on this package's consumer, and the documents' own
// amqplib subscriber, fed by this package's relay. Run as child processes with --count.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const { env, event, pgClient, PG_URL, AMQP_URL } = require('./helpers');

const pkgDir = path.join(__dirname, '..');
const examples = path.join(pkgDir, '..', 'examples', 'node');

// The examples `require('outbox')`, `require('pg')` and `require('amqplib')` as an installed
// project would (examples/node/package.json): here from the project the tarball was installed into
// (scripts/test_node.sh), else this folder and its modules.
function modulePath(t) {
  const { project } = require('./outbox');
  if (project) return path.join(project, 'node_modules');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-examples-'));
  fs.symlinkSync(pkgDir, path.join(dir, 'outbox'), 'dir');
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return [dir, path.join(pkgDir, 'node_modules')].join(path.delimiter);
}

function start(t, script, args, extraEnv) {
  const child = spawn(process.execPath, [path.join(examples, script), ...args], {
    env: { ...process.env, OUTBOX_PG_URL: PG_URL, OUTBOX_AMQP_URL: AMQP_URL, ...extraEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out = { stdout: '', stderr: '' };
  child.stdout.on('data', (d) => { out.stdout += d; });
  child.stderr.on('data', (d) => { out.stderr += d; });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  t.after(() => child.kill());
  return {
    out,
    async ready(text, ms = 15000) {
      const deadline = Date.now() + ms;
      while (!out.stdout.includes(text)) {
        if (Date.now() > deadline || child.exitCode !== null) {
          throw new Error(`${script} did not print '${text}':\n${out.stdout}\n${out.stderr}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async exit(ms = 20000) {
      const timer = setTimeout(() => child.kill(), ms);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

async function writeDocumentsEvents(e) {
  const client = await pgClient();
  try {
    await client.query('BEGIN');
    await e.outbox.write(client, event({ aggregateId: '123', operation: 'POST',
      payload: { PRD_ID: '123', XPRD01: 'Widget Pro', XPRD02: 99.99, XPRD05: 'cat_electronics', TREC: 'N' } }));
    await e.outbox.write(client, event({ aggregateId: '123', operation: 'PATCH',
      payload: { PRD_ID: '123', XPRD02: 89.99, TREC: 'M' }, previousPayload: { XPRD02: 99.99 } }));
    await e.outbox.write(client, event({ aggregateId: '456', operation: 'DELETE', payload: { PRD_ID: '456' } }));
    await client.query('COMMIT');
  } finally {
    await client.end();
  }
}

test('the documents\' amqplib subscriber receives the relay\'s events unchanged', async (t) => {
  const e = await env(t);
  const queue = e.consumerName('amqplib');
  const sub = start(t, 'amqplib-subscriber.js', ['--count', '3', '--queue', queue, '--exchange', e.exchange],
    { NODE_PATH: modulePath(t) });
  await sub.ready('Search indexer started');
  await writeDocumentsEvents(e);
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  assert.equal((await e.drain(relay)).published, 3);
  assert.equal(await sub.exit(), 0, sub.out.stderr);
  const calls = sub.out.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
  // In order per aggregate; across aggregates no order is promised.
  assert.deepEqual(calls.filter((c) => c.id === '123'), [
    { es: 'index', index: 'products', id: '123',
      body: { PRD_ID: '123', XPRD01: 'Widget Pro', XPRD02: 99.99, XPRD05: 'cat_electronics', TREC: 'N' } },
    { es: 'update', index: 'products', id: '123', body: { doc: { PRD_ID: '123', XPRD02: 89.99, TREC: 'M' } } },
  ]);
  assert.deepEqual(calls.filter((c) => c.id === '456'), [{ es: 'delete', index: 'products', id: '456' }]);
  assert.match(sub.out.stdout, /Indexed product: 123\n[\s\S]*Updated product index: 123/);
  assert.match(sub.out.stdout, /Removed product from index: 456/);
});

test('search-indexer and cache-invalidator on the outbox consumer: each event applied once', async (t) => {
  const e = await env(t);
  const nodePath = modulePath(t);
  const envVars = { NODE_PATH: nodePath, OUTBOX_SCHEMA: e.schema, OUTBOX_EXCHANGE: e.exchange };
  const indexer = start(t, 'search-indexer.js', ['--count', '3', '--name', e.consumerName('search-indexer')], envVars);
  const invalidator = start(t, 'cache-invalidator.js', ['--count', '3', '--name', e.consumerName('cache-invalidator')], envVars);
  await indexer.ready('waiting for events');
  await invalidator.ready('waiting for events');
  await writeDocumentsEvents(e);
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  assert.equal((await e.drain(relay)).published, 3);
  assert.equal(await indexer.exit(), 0, indexer.out.stderr);
  assert.equal(await invalidator.exit(), 0, invalidator.out.stderr);

  const docs = await e.admin.query(`SELECT id, doc FROM "${e.schema}".search_index ORDER BY id`);
  assert.deepEqual(docs.rows, [{ id: '123',
    doc: { PRD_ID: '123', XPRD01: 'Widget Pro', XPRD02: 89.99, XPRD05: 'cat_electronics', TREC: 'M' } }]);
  const keys = await e.admin.query(`SELECT cache_key FROM "${e.schema}".cache_invalidations ORDER BY at, cache_key`);
  assert.deepEqual(keys.rows.map((r) => r.cache_key).sort(), [
    'CAT:cat_electronics:products', 'PRD:123', 'PRD:123', 'PRD:456', 'PRD:list:*', 'PRD:list:*', 'PRD:list:*'].sort());
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox_inbox`), 6, 'three events, two subscribers');
  assert.match(indexer.out.stdout, /ProductCreated 123: indexed \(seq 1, IN_ORDER\)/);
  assert.match(invalidator.out.stdout, /ProductDeleted: invalidated cache: PRD:456/);
});
