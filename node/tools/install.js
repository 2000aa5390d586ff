#!/usr/bin/env node
'use strict';
// npm's "install" script. With a prebuild for this platform in prebuilds/ (the tarball of
// tools/pack.js carries linux-x64 glibc) that loads, there is nothing to do: lib/native.js loads it
// through node-gyp-build, so the package works the same when install scripts are skipped
// (--ignore-scripts, pnpm 10's default, npm's allow-scripts settings). Otherwise the addon is built
// from the sources in src/ (tools/build.js: node-gyp with the running Node's own headers).
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

if (process.env.OUTBOX_BUILD_FROM_SOURCE === '1' || !prebuildLoads()) {
  const r = spawnSync(process.execPath, [path.join(__dirname, 'build.js'), ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(r.status === null ? 1 : r.status);
}
