#!/usr/bin/env node
'use strict';
// Builds the native addon from source into build/ (tools/install.js runs it when no prebuild
// matches; `npm run build` in a checkout). Usage: node tools/build.js [--rebuild] [--debug]
//
// - Node's headers come from the running Node's own prefix (<prefix>/include/node, where
//   process.execPath is <prefix>/bin/node), passed to node-gyp as --nodedir: node-gyp then never
//   downloads headers. A Node without its headers is an error, not a download.
// - node-gyp is the one npm ships (npm_config_node_gyp in lifecycle scripts).
// - The core is compiled from src/ in an installed package, else from the checkout around node/
//   (see binding.gyp, tools/paths.js); libpq,
//   librabbitmq-c and cJSON come from the system through pkg-config (on Debian/Ubuntu:
//   apt-get install build-essential python3 pkg-config libpq-dev librabbitmq-dev libcjson-dev).
// - Incremental: `configure` + `build` recompile only what changed; --rebuild starts clean.
//   Jobs: OUTBOX_BUILD_JOBS (default 2).
// - node-addon-api (header-only) is a dependency; when it cannot be found (a linked folder, whose
//   dependencies npm does not install), the locked version is installed into this folder first
//   (npm ci --omit=dev, npm registry only).
const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const paths = require('./paths');

function die(msg) {
  console.error(`outbox: ${msg}`);
  process.exit(1);
}

const args = process.argv.slice(2);
const rebuild = args.includes('--rebuild') || process.env.OUTBOX_NODE_REBUILD === '1';
const debug = args.includes('--debug');

const prefix = path.resolve(path.dirname(process.execPath), '..');
const nodeApi = path.join(prefix, 'include', 'node', 'node_api.h');
if (!fs.existsSync(nodeApi)) {
  die(`Node's headers are missing: ${nodeApi} does not exist (node is ${process.execPath}). ` +
      'Install the headers that belong to this Node (they ship with official and NodeSource builds; ' +
      'on Debian\'s own nodejs package: apt-get install libnode-dev); they are never downloaded.');
}

// What a build from source needs from the system, as Debian/Ubuntu packages: the C/C++ toolchain and
// make (build-essential), python3 (node-gyp), pkg-config and the three libraries' development files.
const DEB_PACKAGES = 'build-essential python3 pkg-config libpq-dev librabbitmq-dev libcjson-dev';
const howToInstall = `On Debian or Ubuntu: apt-get install ${DEB_PACKAGES} ` +
  '(elsewhere: a C++17 compiler, make, python3, pkg-config and the development files of libpq, librabbitmq-c and cJSON).';
const pc = spawnSync('pkg-config', ['--exists', '--print-errors', 'libpq', 'librabbitmq', 'libcjson'], { encoding: 'utf8' });
if (pc.error || pc.status !== 0) {
  const why = pc.error ? `pkg-config: ${pc.error.message}` :
    pc.stderr.split('\n').filter((l) => /not found/.test(l)).join('; ') || pc.stderr.trim();
  die('building the addon from source (the install script does when no prebuilt addon loads) needs the development files of libpq, ' +
      `librabbitmq-c and cJSON (pkg-config libpq librabbitmq libcjson: ${why}). ${howToInstall}`);
}
const missingTools = [['c++', ['--version']], ['make', ['--version']], ['python3', ['--version']]]
  .filter(([cmd, a]) => spawnSync(cmd, a, { stdio: 'ignore' }).status !== 0).map(([cmd]) => cmd);
if (missingTools.length > 0) {
  die(`building the addon from source needs ${missingTools.join(', ')}, not found on PATH. ${howToInstall}`);
}

try {
  paths.repoRoot();
} catch (e) {
  die(e.message);
}

function findNodeGyp() {
  const candidates = [
    process.env.npm_config_node_gyp,
    path.join(prefix, 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
  ];
  try {
    candidates.push(require.resolve('node-gyp/bin/node-gyp.js'));
  } catch (_) {
    // not installed locally
  }
  const found = candidates.find((c) => c && fs.existsSync(c));
  if (!found) die('node-gyp not found (it ships with npm; run this through npm install)');
  return found;
}

const pkgDir = paths.packageDir();

function missingDeps() {
  return ['node-addon-api'].filter((m) => {
    try {
      require.resolve(`${m}/package.json`, { paths: [pkgDir] });
      return false;
    } catch (_) {
      return true;
    }
  });
}

function ensureDeps() {
  const missing = missingDeps();
  if (missing.length === 0) return;
  console.error(`outbox: ${missing.join(' and ')} not installed in ${pkgDir} (npm does not install the ` +
    'dependencies of a linked folder): installing the package\'s own dependencies there');
  const npmCli = [process.env.npm_execpath, path.join(prefix, 'lib', 'node_modules', 'npm', 'bin', 'npm-cli.js')]
    .find((p) => p && /\.js$/.test(p) && fs.existsSync(p));
  if (!npmCli) die('npm not found; run `npm install` in ' + pkgDir);
  const env = { ...process.env };
  for (const k of Object.keys(env)) {
    if (/^npm_config_(global|location|prefix|save|save_.*|omit|include|workspaces?)$/i.test(k)) delete env[k];
  }
  const lock = fs.existsSync(path.join(pkgDir, 'package-lock.json'));
  const args = [npmCli, lock ? 'ci' : 'install', '--omit=dev', '--ignore-scripts', '--no-audit', '--no-fund'];
  if (!lock) args.push('--no-save');
  const r = spawnSync(process.execPath, args, { cwd: pkgDir, stdio: 'inherit', env });
  if (r.error || r.status !== 0 || missingDeps().length > 0) {
    die(`could not install the dependencies in ${pkgDir}; run \`npm install\` there`);
  }
}

ensureDeps();
const gyp = findNodeGyp();
const jobs = process.env.OUTBOX_BUILD_JOBS || '2';
const common = [`--nodedir=${prefix}`, '--loglevel=info'];
if (debug) common.push('--debug');

function run(cmdArgs) {
  console.error(`outbox: node ${path.relative(pkgDir, gyp) || gyp} ${cmdArgs.join(' ')}`);
  const r = spawnSync(process.execPath, [gyp, ...cmdArgs], { cwd: pkgDir, stdio: 'inherit' });
  if (r.error) die(r.error.message);
  if (r.status !== 0) process.exit(r.status || 1);
}

console.error(`outbox: building against the headers of node ${process.version} in ${path.join(prefix, 'include', 'node')}`);
if (rebuild) run(['clean', ...common]);
run(['configure', ...common]);
run(['build', ...common, `--jobs=${jobs}`]);
