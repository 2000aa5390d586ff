'use strict';
// The addon (bindings/node), through node-gyp-build: build/Release (a build from source), else the
// prebuild for this platform in prebuilds/ (the tarball carries linux-x64 glibc).
const path = require('path');

const root = path.join(__dirname, '..');
try {
  module.exports = require('node-gyp-build')(root);
} catch (e) {
  if (!/No native build was found/.test(e.message)) throw e;
  const err = new Error(`outbox: no native addon for this platform in ${root}: no prebuild matches and none was ` +
    'built from source. Let the package\'s install script run (npm rebuild outbox; pnpm: allow it with ' +
    '`pnpm approve-builds`), which builds it from the sources it carries (needs a C++ toolchain and the ' +
    `libpq, librabbitmq-c and cJSON development files). ${e.message.trim()}`);
  err.code = 'INTERNAL';
  throw err;
}
