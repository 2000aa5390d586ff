'use strict';
// The npm package as users get it: the tarball of tools/pack.js, installed into empty projects from
// the tarball alone (pg and the rest from the npm registry or its cache), as node/README.md says:
//   npm install <tarball> pg                     (the install script sees the prebuild load)
//   npm install <tarball> pg --ignore-scripts    (pnpm 10's default; npm with scripts blocked)
// Each time: the prebuild is what loads (nothing compiled), require('outbox') and
// `import { write, connect } from 'outbox'` work, a write + relay + consume round trip runs from the
// installed copy against the real services, and the source tree's git status is unchanged. Also:
// the ES module entry re-exports every name of the CommonJS one, and a tarball without the
// prebuild builds from the sources it carries (the install script's fallback).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { pathToFileURL } = require('url');
const { env } = require('./helpers');
const { outbox, dir } = require('./outbox');

const pkgDir = path.join(__dirname, '..');
const repo = path.join(pkgDir, '..');
const runDir = process.env.OUTBOX_RUN_DIR || path.join(repo, '.run');

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 240000, ...opts });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')} (exit ${r.status}${r.error ? `, ${r.error.message}` : ''}):\n${r.stdout}\n${r.stderr}`);
  return r;
}

function gitStatus() {
  return run('git', ['-C', repo, 'status', '--porcelain', '--ignored', '--', 'node', 'core', 'capi', 'bindings', 'LICENSE']).stdout;
}

function pack(t, ...args) {
  const out = fs.mkdtempSync(path.join(runDir, 'node-dist-'));
  t.after(() => fs.rmSync(out, { recursive: true, force: true }));
  return JSON.parse(run(process.execPath, [path.join(pkgDir, 'tools', 'pack.js'), '--out', out, '--json', ...args]).stdout);
}

/** An empty project with the tarball installed: npm install <tarball> pg [flags]. */
function install(t, tarball, flags, extraEnv = {}, timeout = 240000) {
  const project = fs.mkdtempSync(path.join(runDir, 'node-user-'));
  t.after(() => fs.rmSync(project, { recursive: true, force: true }));
  fs.writeFileSync(path.join(project, 'package.json'), '{ "name": "user", "version": "1.0.0", "private": true }\n');
  const r = run('npm', ['install', tarball, 'pg', ...flags, '--prefer-offline', '--no-audit', '--no-fund', '--foreground-scripts'],
    { cwd: project, env: { ...process.env, ...extraEnv }, timeout });
  return { project, log: r.stdout + r.stderr, installed: path.join(project, 'node_modules', 'outbox') };
}

// Run in the user's project: the ESM entry by name, the CJS entry, which addon file is mapped, and
// a write (pg client, the user's transaction) + relay step + consumer round trip.
const ROUND_TRIP = `
import pg from 'pg';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { write, connect, Outbox } from 'outbox';
import outboxDefault from 'outbox';
const cjs = createRequire(import.meta.url)('outbox');
const o = JSON.parse(process.env.OUTBOX_TEST_OPTIONS);
const ob = new Outbox(o.options);
const consumer = ob.consumer(o.consumer);
await consumer.connect();
const client = new pg.Client({ connectionString: o.options['pg.url'] });
await client.connect();
await client.query('BEGIN');
const w = await write(client, { aggregateType: 'PRD', aggregateId: '42', operation: 'POST', payload: { PRD_ID: '42' } }, o.options);
await client.query('COMMIT');
await client.end();
const relay = ob.relay();
const stats = await relay.step();
await relay.close();
const m = await consumer.next(15000);
const db = await connect(o.options['pg.url'], o.options);
const d = m ? await m.dedupe(db) : null;
if (m) await m.ack();
await db.close();
await consumer.close();
const addons = readFileSync('/proc/self/maps', 'utf8').split('\\n').map((l) => l.split(/\\s+/).pop()).filter((f) => f.endsWith('.node'));
console.log(JSON.stringify({ written: w, published: stats.published, received: m && { id: m.id, eventType: m.eventType, aggregateId: m.aggregateId },
  firstTime: d && d.firstTime, sameModule: cjs === outboxDefault && cjs.write === write, addons: [...new Set(addons)] }));
`;

async function roundTrip(t, project) {
  const e = await env(t);
  const script = path.join(project, 'round-trip.mjs');
  fs.writeFileSync(script, ROUND_TRIP);
  const r = run(process.execPath, [script], {
    cwd: project,
    env: { ...process.env, NODE_PATH: '', OUTBOX_TEST_OPTIONS: JSON.stringify({ options: e.options, consumer: e.consumerName('pkg') }) },
  });
  const res = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.equal(res.written.eventType, 'ProductCreated');
  assert.equal(res.published, 1);
  assert.deepEqual(res.received, { id: res.written.eventId, eventType: 'ProductCreated', aggregateId: '42' });
  assert.equal(res.firstTime, true);
  assert.equal(res.sameModule, true, 'import and require give the same module');
  return res;
}

test('the ES module entry re-exports every named export of the CommonJS entry', async () => {
  const esm = await import(pathToFileURL(path.join(dir, 'lib', 'index.mjs')).href);
  const names = Object.keys(esm).filter((k) => k !== 'default').sort();
  assert.deepEqual(names, Object.keys(outbox).sort());
  for (const k of names) assert.equal(esm[k], outbox[k], k);
  assert.equal(esm.default, outbox);
});

test('the tarball: licence, sources for a build from source, the linux-x64 prebuild; pg a peer', () => {
  const tarball = process.env.OUTBOX_NODE_TARBALL;
  assert.ok(tarball && fs.existsSync(tarball), 'OUTBOX_NODE_TARBALL (scripts/test_node.sh) names the tarball');
  const files = run('tar', ['tzf', tarball]).stdout.trim().split('\n');
  for (const f of ['LICENSE', 'README.md', 'package.json', 'index.d.ts', 'index.d.mts', 'lib/index.js', 'lib/index.mjs',
    'binding.gyp', 'tools/install.js', 'tools/build.js', 'src/capi/include/outbox.h', 'src/capi/CMakeLists.txt',
    'src/core/CMakeLists.txt', 'src/core/relay.cpp', 'src/bindings/node/src/addon.cc', 'prebuilds/linux-x64/outbox.glibc.node']) {
    assert.ok(files.includes(`package/${f}`), `the tarball has ${f}`);
  }
  assert.deepEqual(files.filter((f) => /^package\/(build|test|bench|node_modules)\//.test(f)), []);
  const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  assert.equal(pkg.private, undefined);
  assert.equal(pkg.license, 'Apache-2.0');
  assert.equal(fs.readFileSync(path.join(dir, 'LICENSE'), 'utf8'), fs.readFileSync(path.join(repo, 'LICENSE'), 'utf8'));
  assert.ok(pkg.peerDependencies.pg && !(pkg.dependencies || {}).pg, 'pg is a peer dependency');
  assert.deepEqual(Object.keys(pkg.exports['.']), ['import', 'require']);
});

test('npm install <tarball> pg --ignore-scripts: the prebuild loads, nothing compiles; ESM, CJS and a round trip work; the source tree is untouched', async (t) => {
  const before = gitStatus();
  const packed = pack(t);
  assert.equal(packed.compiled, false, 'packing unchanged sources again reuses the prebuild');
  const { installed, project } = install(t, packed.tarball, ['--ignore-scripts']);
  assert.ok(!fs.existsSync(path.join(installed, 'build')), 'no build tree in the installed package');
  const res = await roundTrip(t, project);
  assert.deepEqual(res.addons, [fs.realpathSync(path.join(installed, 'prebuilds', 'linux-x64', 'outbox.glibc.node'))]);
  assert.equal(gitStatus(), before, 'packing and installing wrote nothing into the source tree');
});

test('npm install <tarball> pg (install script on): it finds the prebuild and compiles nothing', async (t) => {
  const { installed, log } = install(t, process.env.OUTBOX_NODE_TARBALL, []);
  assert.match(log, /outbox: using the prebuilt addon prebuilds\/linux-x64\/outbox\.glibc\.node/);
  assert.ok(!fs.existsSync(path.join(installed, 'build')), 'nothing compiled');
  const r = run(process.execPath, ['-e', 'const o = require("outbox"); console.log(o.version, typeof o.write)'], { cwd: path.dirname(path.dirname(installed)) });
  assert.equal(r.stdout.trim(), `${outbox.version} function`);
});

test('pnpm 10 (dependency install scripts blocked by default): pnpm add <tarball> pg gives a working package', async (t) => {
  const project = fs.mkdtempSync(path.join(runDir, 'node-pnpm-'));
  t.after(() => fs.rmSync(project, { recursive: true, force: true }));
  fs.writeFileSync(path.join(project, 'package.json'), '{ "name": "user", "version": "1.0.0", "private": true }\n');
  const pnpm = path.join(pkgDir, 'node_modules', 'pnpm', 'bin', 'pnpm.cjs'); // a devDependency
  const r = run(process.execPath, [pnpm, 'add', process.env.OUTBOX_NODE_TARBALL, 'pg', '--prefer-offline', '--reporter=append-only'],
    { cwd: project, env: { ...process.env, npm_config_store_dir: path.join(runDir, 'pnpm-store') } });
  assert.match(r.stdout + r.stderr, /Ignored build scripts: outbox/, 'pnpm blocked the install script');
  const installed = fs.realpathSync(path.join(project, 'node_modules', 'outbox'));
  assert.ok(!fs.existsSync(path.join(installed, 'build')), 'nothing compiled');
  const res = await roundTrip(t, project);
  assert.deepEqual(res.addons, [path.join(installed, 'prebuilds', 'linux-x64', 'outbox.glibc.node')]);
});

// A compile (about 40 s on two quiet cores): its own, longer time limit.
test('without a prebuild, the install script builds the addon from the sources in the tarball', { timeout: 480000 }, async (t) => {
  const before = gitStatus();
  const packed = pack(t, '--no-prebuild');
  assert.equal(packed.prebuild, null);
  assert.ok(!run('tar', ['tzf', packed.tarball]).stdout.includes('prebuilds/'), 'no prebuild in this tarball');
  const { installed, project, log } = install(t, packed.tarball, [], {}, 450000);
  assert.match(log, /building against the headers of node/);
  const built = path.join(installed, 'build', 'Release', 'outbox.node');
  assert.ok(fs.existsSync(built), `${built} was built at install`);
  const res = await roundTrip(t, project);
  assert.deepEqual(res.addons, [fs.realpathSync(built)]);
  assert.equal(gitStatus(), before, 'the source build wrote nothing into the source tree');
});
