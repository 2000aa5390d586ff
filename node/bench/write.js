#!/usr/bin/env node
'use strict';
// Per-write cost from Node, in µs/write: N events written in one transaction
//   addon  — a connection the library owns (outbox.connect): BEGIN, N x await db.write(event), COMMIT;
//            each write is built from the JS object, sent from the event loop without blocking and
//            finished when libuv sees the socket readable (outbox_write_send / outbox_write_poll: the
//            INSERT round trip, no thread);
//   addon writeMany — the same, all N with one await db.writeMany(events) (one worker-thread trip);
//   pg     — node-postgres: BEGIN, N x await outbox.write(client, event) (outbox_render_write, then the
//            rendered statement on the client, as a named prepared statement), COMMIT;
//   pg unprepared — the same with preparedStatements: false (parsed and planned per write, as C does);
//   pg plain — the floor: the same event row inserted by node-postgres alone, in the same transaction
//            shape: BEGIN, N x await client.query({ name, text, values }) with the same INSERT
//            statement (rendered once, up front) and its values built in JS per event (UUID,
//            JSON.stringify of payload and metadata, timestamp), COMMIT. pg / pg plain is the
//            library's cost over the driver (target <= 1.2x);
//   render — outbox_render_write alone (no I/O), for reference.
//   C      — with --with-c: the same loop in C (the repository's bench/write_c.c, outbox_write on an
//            owned connection), run as a child process whose rounds interleave with Node's, so both
//            see the same load and server. --c-bin PATH runs an already built one (bench/run passes
//            build/release/bench/write_c); otherwise it is built against the installed library
//            (pkg-config outbox; PKG_CONFIG_PATH defaults to the repository's _install/).
// Figures are medians over rounds (min in brackets); rounds alternate between the paths. The share
// of the machine's CPU the hypervisor took (steal, /proc/stat) is summed over each path's rounds
// (JSON "steal"): bench/run judges a target only when both its sides saw little of it.
//
//   node bench/write.js [--writes N] [--rounds R] [--with-c] [--c-bin PATH] [--json FILE]
// Environment: OUTBOX_PG_URL (default the local throwaway PostgreSQL); OUTBOX_NODE_PACKAGE, the
// installed package to measure (bench/run: the tarball installed by scripts/node_package.sh),
// default this folder (a development build).
const { performance } = require('perf_hooks');
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const readline = require('readline');
const pg = require('pg');
const outbox = require(process.env.OUTBOX_NODE_PACKAGE || '..');
const crypto = require('crypto');

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const PG_URL = process.env.OUTBOX_PG_URL || 'postgresql://outbox:outbox@127.0.0.1:54329/outbox';
const N = Number(arg('--writes', '2000'));
const ROUNDS = Number(arg('--rounds', '5'));
const jsonFile = arg('--json', null);
const cBin = arg('--c-bin', null);
const withC = process.argv.includes('--with-c') || cBin !== null;

// Builds the repository's bench/write_c.c against the installed library.
function buildC() {
  const repo = path.join(__dirname, '..', '..');
  const env = { ...process.env };
  const installed = path.join(repo, '_install', 'lib', 'pkgconfig');
  if (!env.PKG_CONFIG_PATH && fs.existsSync(installed)) env.PKG_CONFIG_PATH = installed;
  const pc = (...a) => execFileSync('pkg-config', a, { env, encoding: 'utf8' }).trim().split(/\s+/).filter(Boolean);
  const outDir = path.join(process.env.OUTBOX_RUN_DIR || require('os').tmpdir(), 'node-bench-c');
  fs.mkdirSync(outDir, { recursive: true });
  const bin = path.join(outDir, 'write_c');
  const libdir = pc('--variable=libdir', 'outbox')[0];
  execFileSync('cc', ['-O2', '-o', bin, path.join(repo, 'bench', 'write_c.c'), ...pc('--cflags', 'outbox'),
    ...pc('--libs', 'outbox'), `-Wl,-rpath,${libdir}`], { env, stdio: 'inherit' });
  return bin;
}

// Starts the C reference; returns a driver with round(n).
async function startC(schema) {
  const bin = cBin || buildC();
  const child = spawn(bin, [schema], { env: { ...process.env, OUTBOX_PG_URL: PG_URL }, stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async () => {
    const r = await lines.next();
    if (r.done) throw new Error('the C reference exited');
    return r.value;
  };
  if ((await next()) !== 'ready') throw new Error('the C reference did not start');
  return {
    async round(n) {
      child.stdin.write(`run ${n}\n`);
      return Number(await next());
    },
    async stop() {
      child.stdin.end('quit\n');
      await new Promise((r) => child.on('exit', r));
    },
  };
}

// The documents' ProductCreated event (the C bench writes a similar one).
function event(i) {
  return {
    aggregateType: 'PRD',
    aggregateId: String(i % 100),
    operation: 'POST',
    payload: { PRD_ID: String(i), XPRD01: 'Widget Pro', XPRD02: 99.99, XPRD03: 'PRD-2025-001', XPRD05: 'cat_electronics', XPRD06: true, TREC: 'N' },
    metadata: { source: 'productManagement', centro_dett: 'admin', microservice: 'adminApp' },
    user: 'user@example.com',
  };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// The machine's CPU time and the part of it stolen, from /proc/stat's first line; null without it.
function cpuTimes() {
  try {
    const v = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/).slice(1, 9).map(Number);
    return v.length === 8 ? { total: v.reduce((a, b) => a + b, 0), steal: v[7] } : null;
  } catch (e) {
    return null;
  }
}

// Per path, the ticks of the machine and of steal summed over its rounds.
const stealTicks = {};
async function around(name, fn) {
  const a = cpuTimes();
  const out = await fn();
  const b = cpuTimes();
  if (a && b) {
    const t = (stealTicks[name] = stealTicks[name] || { total: 0, steal: 0 });
    t.total += b.total - a.total;
    t.steal += b.steal - a.steal;
  }
  return out;
}

async function main() {
  const schema = `bench_node_${process.pid}`;
  const options = { 'outbox.schema': schema, 'event.type_map': 'PRD=Product' };
  const ob = new outbox.Outbox(options);
  await ob.migrate(PG_URL);
  const db = await ob.connect(PG_URL);
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  const events = Array.from({ length: N }, (_, i) => event(i));
  const results = { addon: [], addonMany: [], pg: [], pgPlain: [], pgUnprepared: [], render: [] };
  // The plain INSERT's statement: the library's, rendered once (its text does not depend on the event).
  const plainText = ob.renderWrite(events[0]).text;
  const plainValues = (e) => [e.aggregateType, String(e.aggregateId), crypto.randomUUID(), 'ProductCreated', e.operation,
    JSON.stringify(e.payload), null, JSON.stringify(e.metadata), e.user, new Date().toISOString(), null];
  const unprepared = new outbox.Outbox({ ...options, preparedStatements: false });
  let c = null;
  if (withC) {
    c = await startC(`${schema}_c`);
    results.c = [];
  }
  try {
    const addonRound = async () => {
      const t0 = performance.now();
      await db.exec('BEGIN');
      for (let i = 0; i < N; i++) await db.write(events[i]);
      await db.exec('COMMIT');
      return ((performance.now() - t0) * 1000) / N;
    };
    const manyRound = async () => {
      const t0 = performance.now();
      await db.exec('BEGIN');
      await db.writeMany(events);
      await db.exec('COMMIT');
      return ((performance.now() - t0) * 1000) / N;
    };
    const pgRound = async () => {
      const t0 = performance.now();
      await client.query('BEGIN');
      for (let i = 0; i < N; i++) await ob.write(client, events[i]);
      await client.query('COMMIT');
      return ((performance.now() - t0) * 1000) / N;
    };
    const pgPlainRound = async () => {
      const t0 = performance.now();
      await client.query('BEGIN');
      for (let i = 0; i < N; i++) await client.query({ name: 'bench_plain_insert', text: plainText, values: plainValues(events[i]) });
      await client.query('COMMIT');
      return ((performance.now() - t0) * 1000) / N;
    };
    const pgUnpreparedRound = async () => {
      const t0 = performance.now();
      await client.query('BEGIN');
      for (let i = 0; i < N; i++) await unprepared.write(client, events[i]);
      await client.query('COMMIT');
      return ((performance.now() - t0) * 1000) / N;
    };
    const renderRound = () => {
      const t0 = performance.now();
      for (let i = 0; i < N; i++) ob.renderWrite(events[i]);
      return ((performance.now() - t0) * 1000) / N;
    };
    // Warm-up (JIT, connections, plans), then interleaved rounds against drift.
    if (c) await c.round(N);
    await addonRound();
    await manyRound();
    await pgRound();
    await pgPlainRound();
    await pgUnpreparedRound();
    renderRound();
    for (let r = 0; r < ROUNDS; r++) {
      if (c) results.c.push(await around('c', () => c.round(N)));
      results.addon.push(await around('addon', addonRound));
      results.addonMany.push(await around('addonMany', manyRound));
      // pg and pg plain alternate which goes first, against drift within a round.
      if (r % 2 === 0) {
        results.pg.push(await around('pg', pgRound));
        results.pgPlain.push(await around('pgPlain', pgPlainRound));
      } else {
        results.pgPlain.push(await around('pgPlain', pgPlainRound));
        results.pg.push(await around('pg', pgRound));
      }
      results.pgUnprepared.push(await around('pgUnprepared', pgUnpreparedRound));
      results.render.push(renderRound());
    }
  } finally {
    if (c) await c.stop();
    await db.close();
    await client.query(`DROP SCHEMA "${schema}" CASCADE`).catch(() => {});
    await client.end();
  }
  const fig = (k) => +median(results[k]).toFixed(1);
  const min = (k) => +Math.min(...results[k]).toFixed(1);
  const out = {
    node: process.version,
    writes_per_transaction: N,
    rounds: ROUNDS,
    us_per_write: Object.fromEntries(Object.keys(results).map((k) => [k, fig(k)])),
    us_per_write_min: Object.fromEntries(Object.keys(results).map((k) => [k, min(k)])),
    all_rounds: Object.fromEntries(Object.entries(results).map(([k, v]) => [k, v.map((x) => +x.toFixed(1))])),
    steal: Object.fromEntries(
      Object.entries(stealTicks).map(([k, t]) => [k, t.total > 0 ? +(t.steal / t.total).toFixed(4) : -1]),
    ),
  };
  const vsC = (k) => (c ? ` | ${(median(results[k]) / median(results.c)).toFixed(2)}x` : '');
  console.log(`| path (${N} writes in one transaction; median of ${ROUNDS} rounds [min]) | µs/write${c ? ' | vs C' : ''} |`);
  console.log(`| --- | ---:${c ? ' | ---:' : ''} |`);
  if (c) console.log(`| C: outbox_write on an owned connection (bench/write_c.c) | ${fig('c')} [${min('c')}] | 1.00x |`);
  console.log(`| addon: owned connection, await db.write(event) (outbox_write_send / outbox_write_poll on the event loop) | ${fig('addon')} [${min('addon')}]${vsC('addon')} |`);
  console.log(`| addon: owned connection, await db.writeMany(events) (one worker-thread trip for all N) | ${fig('addonMany')} [${min('addonMany')}]${vsC('addonMany')} |`);
  console.log(`| pg: await outbox.write(client, event) (rendered statement on node-postgres) | ${fig('pg')} [${min('pg')}]${vsC('pg')} |`);
  console.log(`| pg plain: the same row by node-postgres alone (same INSERT, values built in JS) | ${fig('pgPlain')} [${min('pgPlain')}]${vsC('pgPlain')} |`);
  console.log(`| pg, preparedStatements: false (parsed and planned per write, as C does) | ${fig('pgUnprepared')} [${min('pgUnprepared')}]${vsC('pgUnprepared')} |`);
  console.log(`| render only: outbox.renderWrite(event), no I/O | ${fig('render')} [${min('render')}] | |`);
  out.pg_vs_plain = +(median(results.pg) / median(results.pgPlain)).toFixed(3);
  // pg and pg plain run back to back in each round: the median of their per-round ratios cancels
  // the load that moves whole rounds (the figure bench/run judges).
  out.pg_vs_plain_paired = +median(results.pg.map((v, i) => v / results.pgPlain[i])).toFixed(3);
  console.log(`\nawait outbox.write(client, event) / plain node-postgres INSERT: ${out.pg_vs_plain_paired.toFixed(2)}x, ` +
    `median of ${ROUNDS} per-round ratios (${out.pg_vs_plain.toFixed(2)}x of the medians; target <= 1.2x)`);
  if (jsonFile) fs.writeFileSync(jsonFile, JSON.stringify(out, null, 2) + '\n');
}

main().catch((e) => {
  console.error(`bench/write.js: ${e.code || ''} ${e.message}`);
  process.exit(1);
});
