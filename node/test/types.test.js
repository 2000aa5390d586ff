'use strict';
// The type declarations against the package as installed from the tarball (OUTBOX_NODE_PROJECT):
// tsc --strict (typescript, installed in that project as a TypeScript user would) compiles, in a
// folder of that project,
//   - test/types/check.ts (CommonJS TypeScript) and check.mts (an ES module): every part of the
//     package with the real node-postgres types, through the exports map's require and import
//     conditions (index.d.ts, index.d.mts);
//   - every `js` code block of node/README.md and README.md, as written (checkJs; a block with
//     `import` statements is an ES module), so the README's examples type-check;
//   - test/types/negative/*: each must fail, with only the error codes its first line expects.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { outbox, dir, project } = require('./outbox');

const pkgDir = path.join(__dirname, '..');
const typesDir = path.join(__dirname, 'types');
const READMES = [path.join(pkgDir, 'README.md'), path.join(pkgDir, '..', 'README.md')];

/** The ```js blocks of a Markdown file: { name, text, line }. */
function jsBlocks(file) {
  const blocks = [];
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(js|javascript|mjs|ts)\s*$/.test(lines[i])) continue;
    const start = i + 1;
    let j = start;
    while (j < lines.length && !/^```\s*$/.test(lines[j])) j++;
    blocks.push({ text: lines.slice(start, j).join('\n') + '\n', line: start + 1, lang: lines[i].slice(3).trim() });
    i = j;
  }
  return blocks;
}

function compile(t) {
  assert.ok(project, 'OUTBOX_NODE_PROJECT is not set: run the suite through scripts/test_node.sh, which installs the tarball');
  const work = path.join(project, `typecheck-${process.pid}`);
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work);
  t.after(() => fs.rmSync(work, { recursive: true, force: true }));
  const origin = {};
  for (const f of ['check.ts', 'check.mts']) {
    fs.copyFileSync(path.join(typesDir, f), path.join(work, f));
    origin[f] = `test/types/${f}`;
  }
  const negatives = {};
  for (const f of fs.readdirSync(path.join(typesDir, 'negative'))) {
    const text = fs.readFileSync(path.join(typesDir, 'negative', f), 'utf8');
    const m = /^\/\/ expect: ((?:TS\d+ ?)+)/.exec(text);
    assert.ok(m, `test/types/negative/${f}: first line must be "// expect: TSnnnn ..."`);
    const name = `neg-${f}`;
    fs.writeFileSync(path.join(work, name), text);
    negatives[name] = new Set(m[1].trim().split(/\s+/));
    origin[name] = `test/types/negative/${f}`;
  }
  let readmeBlocks = 0;
  for (const readme of READMES) {
    jsBlocks(readme).forEach((b, i) => {
      const esm = /^import\s/m.test(b.text);
      const name = `readme-${path.basename(path.dirname(readme))}-${i + 1}.${b.lang === 'ts' ? (esm ? 'mts' : 'ts') : esm ? 'mjs' : 'js'}`;
      fs.writeFileSync(path.join(work, name), b.text);
      origin[name] = `${path.relative(path.join(pkgDir, '..'), readme)}:${b.line}`;
      readmeBlocks++;
    });
  }
  fs.writeFileSync(path.join(work, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      strict: true,
      noEmit: true,
      target: 'ES2022',
      module: 'node16',
      moduleResolution: 'node16',
      allowJs: true,
      checkJs: true,
      skipLibCheck: false,
      types: ['node'],
    },
    include: ['*.ts', '*.mts', '*.js', '*.mjs'],
  }, null, 2));
  const tsc = require.resolve('typescript/bin/tsc', { paths: [project] });
  const r = spawnSync(process.execPath, [tsc, '-p', work, '--pretty', 'false'], { encoding: 'utf8' });
  const errors = {};
  for (const line of (r.stdout + r.stderr).split('\n')) {
    const m = /^([^(\s]+)\((\d+),\d+\): error (TS\d+): (.*)$/.exec(line);
    if (m) (errors[path.basename(m[1])] ||= []).push({ line: Number(m[2]), code: m[3], text: m[4] });
    else if (/error TS\d+/.test(line)) (errors['(global)'] ||= []).push({ line: 0, code: 'global', text: line });
  }
  return { origin, negatives, errors, readmeBlocks, status: r.status, output: r.stdout + r.stderr };
}

test('tsc --strict: CJS and ESM TypeScript programs, the READMEs\' examples; the negative cases fail as expected', (t) => {
  const { origin, negatives, errors, readmeBlocks, status, output } = compile(t);
  assert.ok(readmeBlocks >= 2, `the READMEs have their js examples (found ${readmeBlocks})`);
  assert.ok(Object.keys(negatives).length >= 5, 'the negative cases are there');
  const problems = [];
  for (const [file, errs] of Object.entries(errors)) {
    if (negatives[file]) continue;
    for (const e of errs) problems.push(`${origin[file] || file} (line ${e.line}): ${e.code} ${e.text}`);
  }
  for (const [file, expected] of Object.entries(negatives)) {
    const got = errors[file] || [];
    if (got.length === 0) problems.push(`${origin[file]} compiled, but must fail with ${[...expected].join(' or ')}`);
    for (const e of got) {
      if (!expected.has(e.code)) problems.push(`${origin[file]} (line ${e.line}): unexpected ${e.code} ${e.text}`);
    }
  }
  assert.deepEqual(problems, [], `tsc (exit ${status}):\n${output}`);
});

test('every export of the package is declared', () => {
  const dts = fs.readFileSync(path.join(dir, 'index.d.ts'), 'utf8');
  for (const name of Object.keys(outbox)) {
    assert.match(dts, new RegExp(`export (declare )?(const|function|class) ${name}\\b`), `${name} is declared`);
  }
});
