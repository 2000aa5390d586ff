'use strict';
// Used by binding.gyp: prints the sources or include directories, one per line.
const paths = require('./paths');

const what = process.argv[2];
const lists = {
  'addon-sources': paths.addonSources,
  'library-sources': () => paths.unitySources(paths.librarySources()),
  'public-include': paths.publicInclude,
  'library-includes': paths.libraryIncludes,
  'addon-api': () => [require('node-addon-api').include_dir],
};
if (!lists[what]) {
  console.error(`usage: node tools/sources.js ${Object.keys(lists).join('|')}`);
  process.exit(2);
}
// Relative to the package's real directory (node-gyp runs there, see build.js): gyp's make
// generator places objects by source path and cannot take absolute ones.
const base = paths.packageDir();
const list = lists[what]().map((p) => (require('path').isAbsolute(p) ? require('path').relative(base, p) : p));
for (const p of list) {
  if (/\s/.test(p)) {
    console.error(`outbox: path with white space is not supported by node-gyp lists: ${p}`);
    process.exit(1);
  }
}
process.stdout.write(list.join('\n') + '\n');
