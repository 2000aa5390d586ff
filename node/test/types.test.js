'use strict';
// index.d.ts matches the API: tsc (devDependency) compiles test/types/check.ts, which uses
// every part of the package with the real node-postgres types.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const { spawnSync } = require('child_process');

test('index.d.ts type-checks against a program using the package (tsc --noEmit)', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'types')], { encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});

test('every export of the package is declared', () => {
  const fs = require('fs');
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
  for (const name of Object.keys(require('./outbox').outbox)) {
    assert.match(dts, new RegExp(`export (declare )?(const|function|class) ${name}\\b`), `${name} is declared`);
  }
});
