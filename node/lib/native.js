'use strict';
// Loads the addon (build/Release/outbox.node, made by tools/build.js at npm install) and
// registers the error class it throws.
const path = require('path');
const { OutboxError } = require('./errors');

function load() {
  const root = path.join(__dirname, '..');
  const tried = [];
  for (const p of [path.join(root, 'build', 'Release', 'outbox.node'), path.join(root, 'build', 'Debug', 'outbox.node')]) {
    try {
      return require(p);
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND') throw e;
      tried.push(p);
    }
  }
  const e = new Error(`outbox: the native addon is not built (looked for ${tried.join(', ')}); run \`npm install\` ` +
    'or `npm run build` in the package directory');
  e.code = 'INTERNAL';
  throw e;
}

const native = load();
native.set_error_class(OutboxError);

module.exports = native;
