#!/usr/bin/env node
'use strict';
// npm's "install" script. With a prebuild for this platform in prebuilds/ (the tarball of
// tools/pack.js carries linux-x64 glibc) that loads, there is nothing to do: lib/native.js loads it
// through node-gyp-build, so the package works the same when install scripts are skipped
// (--ignore-scripts, pnpm 10's default, npm's allow-scripts settings). Otherwise the addon is built
// from the sources in src/ (tools/build.js: node-gyp with the running Node's own headers).
// In a checkout (node/ installed as a folder, e.g. by examples/node), the prebuild that
// tools/pack.js made and cached for exactly these sources, when there is one, is copied to
// build/Release (with the libraries grafted beside it) instead of compiling the same sources again.
const path = require('path');
const { spawnSync } = require('child_process');

const pkgDir = path.join(__dirname, '..');

function prebuildLoads() {
  let file;
  try {
    file = require('node-gyp-build').path(pkgDir);
  } catch (_) {
    return false; // no build/ and no matching prebuild
  }
  if (!file.includes(`${path.sep}prebuilds${path.sep}`)) return false; // an earlier source build: refresh it
  try {
    require(file);
    console.error(`outbox: using the prebuilt addon ${path.relative(pkgDir, file)}`);
    return true;
  } catch (e) {
    console.error(`outbox: the prebuilt addon ${path.relative(pkgDir, file)} does not load (${e.message}); building from source`);
    return false;
  }
}

function fromPackCache() {
  const fs = require('fs');
  if (fs.existsSync(path.join(pkgDir, 'src')) || !fs.existsSync(path.join(__dirname, 'pack.js'))) return false;
  let cached = null;
  try {
    cached = require('./pack').cachedPrebuild();
  } catch (_) {
    return false; // no node-addon-api here yet: build.js installs it and compiles
  }
  if (!cached) return false;
  // The addon and the libraries grafted beside it (its RUNPATH is $ORIGIN).
  const dest = path.join(pkgDir, 'build', 'Release', 'outbox.node');
  fs.mkdirSync(path.dirname(dest), { recursive: true });
  for (const f of fs.readdirSync(path.dirname(cached))) {
    fs.copyFileSync(path.join(path.dirname(cached), f), f === path.basename(cached) ? dest : path.join(path.dirname(dest), f));
  }
  try {
    require(dest);
  } catch (e) {
    fs.rmSync(dest, { force: true });
    return false;
  }
  console.error(`outbox: using ${cached}, the prebuild tools/pack.js made from these sources`);
  return true;
}

if (process.env.OUTBOX_BUILD_FROM_SOURCE === '1' || !(prebuildLoads() || fromPackCache())) {
  const r = spawnSync(process.execPath, [path.join(__dirname, 'build.js'), ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(r.status === null ? 1 : r.status);
}
