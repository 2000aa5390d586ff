'use strict';
// How the addon was built: with the running Node's own headers (node-gyp --nodedir=<prefix>,
// nothing downloaded), exporting only Node-API's entry points, and glue that sees outbox.h only.
// The build is the prebuild's (tools/pack.js keeps prebuildify's build tree in
// <work>/build), the addon the one the installed package loads.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const pkg = path.join(__dirname, '..');
const { dir: installed, project } = require('./outbox');
const build = project ? path.join(require('../tools/pack').defaultWork(), 'build') : path.join(pkg, 'build');
const prefix = path.resolve(path.dirname(process.execPath), '..');

test('built against <node prefix>/include/node via --nodedir, no downloaded headers', () => {
  assert.ok(fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h')));
  const gypi = fs.readFileSync(path.join(build, 'config.gypi'), 'utf8');
  assert.match(gypi, new RegExp(`"nodedir": "${prefix.replace(/[/\\]/g, '\\$&')}"`), 'config.gypi nodedir');
  const makefile = fs.readFileSync(path.join(build, 'Makefile'), 'utf8');
  assert.ok(makefile.includes(`-Dnode_root_dir=${prefix}`), 'gyp ran with node_root_dir = the prefix');
  for (const mk of ['outbox.target.mk', 'outbox_c.target.mk']) {
    const text = fs.readFileSync(path.join(build, mk), 'utf8');
    assert.ok(text.includes(`-I${path.join(prefix, 'include', 'node')}`), `${mk} uses the prefix's headers`);
    assert.ok(!/node-gyp[/\\]\d|\.cache[/\\]node-gyp/.test(text), `${mk} uses no downloaded headers`);
    assert.match(text, /-fexceptions/);
    assert.match(text, /-std=c\+\+17/);
  }
  // prebuildify hands node-gyp a --devdir of its own (tools/pack.js: <work>/gyp-devdir): with
  // --nodedir nothing may land there.
  if (project) {
    const devdir = path.join(path.dirname(build), 'gyp-devdir');
    const found = fs.existsSync(devdir) ? fs.readdirSync(devdir, { recursive: true }) : [];
    assert.deepEqual(found, [], `nothing downloaded into ${devdir}`);
  }
  // The glue compiles with the public header only.
  const glue = fs.readFileSync(path.join(build, 'outbox.target.mk'), 'utf8');
  assert.ok(!/-I\S*[/\\]core\b/.test(glue), 'bindings/node is compiled without core/ on its include path');
});

// (and Node's own headers: Node-API, and libuv for the socket a write waits on)
test('bindings/node includes the public C header only', () => {
  const src = path.join(pkg, '..', 'bindings', 'node', 'src');
  for (const f of fs.readdirSync(src)) {
    const text = fs.readFileSync(path.join(src, f), 'utf8');
    for (const m of text.matchAll(/#include\s+[<"]([^>"]+)[>"]/g)) {
      assert.ok(['napi.h', 'uv.h', 'outbox.h', 'common.h'].includes(m[1]) || !m[1].includes('.'), `${f} includes ${m[1]}`);
    }
  }
});

test('the addon exports only the Node-API entry points', () => {
  const addon = require(require.resolve('node-gyp-build', { paths: [installed] })).path(installed);
  const r = spawnSync('nm', ['-D', '--defined-only', addon], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const names = r.stdout.trim().split('\n').map((l) => l.trim().split(/\s+/).pop()).sort();
  assert.deepEqual(names, ['napi_register_module_v1', 'node_api_module_get_api_version_v1']);
});
