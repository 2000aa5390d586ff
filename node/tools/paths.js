'use strict';
// Where the sources the addon is compiled from live:
// - an installed package (the tarball of tools/pack.js) carries them in <package>/src (core/, capi/,
//   bindings/node/src);
// - in a checkout, node/ is next to core/, capi/ and bindings/node/ (a development build,
//   `npm run build` in node/).
// OUTBOX_SOURCE_DIR overrides both.
const fs = require('fs');
const path = require('path');

function packageDir() {
  return fs.realpathSync(path.join(__dirname, '..'));
}

function repoRoot() {
  const shipped = path.join(packageDir(), 'src');
  let root = path.join(packageDir(), '..');
  if (process.env.OUTBOX_SOURCE_DIR) root = path.resolve(process.env.OUTBOX_SOURCE_DIR);
  else if (fs.existsSync(path.join(shipped, 'capi', 'include', 'outbox.h'))) root = shipped;
  const header = path.join(root, 'capi', 'include', 'outbox.h');
  if (!fs.existsSync(header)) {
    throw new Error(
      `outbox: cannot find the C sources (${header} is missing). The package's tarball carries them ` +
        'in src/ (make it with node tools/pack.js); a checkout has them next to node/; or set ' +
        'OUTBOX_SOURCE_DIR to a repository root.');
  }
  return fs.realpathSync(root);
}

// Sources listed in a CMakeLists.txt `set(NAME ...)` block: the build's own list, so the addon
// compiles exactly what liboutbox does. Falls back to every *.cpp of the folder.
function cmakeSources(dir, variable) {
  const cmake = path.join(dir, 'CMakeLists.txt');
  try {
    const text = fs.readFileSync(cmake, 'utf8');
    const m = new RegExp(`set\\(\\s*${variable}\\s+([^)]*)\\)`).exec(text);
    if (m) {
      const files = m[1].split(/\s+/).filter((f) => f && !f.startsWith('#') && /\.(c|cc|cpp)$/.test(f));
      if (files.length > 0 && files.every((f) => fs.existsSync(path.join(dir, f)))) {
        return files.map((f) => path.join(dir, f));
      }
    }
  } catch (_) {
    // fall through
  }
  return fs.readdirSync(dir).filter((f) => f.endsWith('.cpp')).sort().map((f) => path.join(dir, f));
}

// The native glue: bindings/node/src/*.cc. Compiled with capi/include only on its include path,
// so it cannot reach a core/ header.
function addonSources() {
  const bindings = path.join(repoRoot(), 'bindings', 'node', 'src');
  return fs.readdirSync(bindings).filter((f) => f.endsWith('.cc')).sort().map((f) => path.join(bindings, f));
}

// liboutbox itself: the C API layer and the C++ core, as CMake builds them (two lists).
function librarySources() {
  const root = repoRoot();
  return [
    cmakeSources(path.join(root, 'capi'), 'OUTBOX_CAPI_SOURCES'),
    cmakeSources(path.join(root, 'core'), 'OUTBOX_CORE_SOURCES'),
  ];
}

// A unity build of `groups` (lists of sources, each batched apart, as CMake's CMAKE_UNITY_BUILD does
// per target): build/unity/outbox_c_<n>.cpp each #including up to 8 consecutive sources, written
// only when their text changed (so an incremental build recompiles only what did). About half the
// compile time of one file at a time.
function unitySources(groups, batch = 8) {
  const dir = path.join(packageDir(), 'build', 'unity');
  fs.mkdirSync(dir, { recursive: true });
  const files = [];
  for (const group of groups) {
    for (let i = 0; i < group.length; i += batch) {
      const text = group.slice(i, i + batch).map((f) => `#include ${JSON.stringify(f)}\n`).join('');
      const file = path.join(dir, `outbox_c_${files.length}.cpp`);
      if (!fs.existsSync(file) || fs.readFileSync(file, 'utf8') !== text) fs.writeFileSync(file, text);
      files.push(file);
    }
  }
  return files;
}

function publicInclude() {
  return [path.join(repoRoot(), 'capi', 'include')];
}

function libraryIncludes() {
  const root = repoRoot();
  return [path.join(root, 'capi', 'include'), path.join(root, 'core')];
}

module.exports = { packageDir, repoRoot, addonSources, librarySources, unitySources, publicInclude, libraryIncludes };
