#!/usr/bin/env bash
# The npm tarball's prebuild at work where libpq, librabbitmq and libcjson are not installed:
#   tests/node-dist/without_libs.sh [TARBALL]
# TARBALL: default $OUTBOX_NODE_TARBALL, else the newest $OUTBOX_RUN_DIR/node-dist/outbox-*.tgz
# (scripts/node_package.sh, scripts/test_node.sh), else one packed now (node/tools/pack.js).
# Installs it into a fresh project (npm install TARBALL --ignore-scripts: the prebuild is what
# loads), then, under tests/python-dist/without_libs.sh (a private mount namespace where those
# libraries are hidden):
#   - the addon as the compiler left it (pack.js's build tree, linked to the system's libraries),
#     when there is one, must fail to load, naming one of them: the libraries are really gone;
#   - require('outbox') from the project loads the prebuild, tells its version, renders a write
#     (liboutbox validates and names the event: the native library at work) and maps libpq,
#     librabbitmq and libcjson from the package's prebuilds/linux-x64 only.
# No services needed. Prints `ok STEP detail` per step and exits non-zero when one failed.
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,14p' "$0"; exit 0; fi
: "${OUTBOX_RUN_DIR:=$root/.run}"
export OUTBOX_RUN_DIR
start=$SECONDS

tarball=${1:-${OUTBOX_NODE_TARBALL:-}}
if [[ -z $tarball ]]; then
  tarball=$(ls -t "$OUTBOX_RUN_DIR"/node-dist/outbox-*.tgz 2>/dev/null | head -n 1 || true)
fi
if [[ -z $tarball ]]; then
  [[ -d "$root/node/node_modules/prebuildify" ]] ||
    (cd "$root/node" && npm ci --ignore-scripts --prefer-offline --no-audit --no-fund) >&2
  tarball=$(node "$root/node/tools/pack.js" --out "$OUTBOX_RUN_DIR/node-dist")
fi
[[ -f $tarball ]] || { echo "without_libs.sh: no tarball $tarball" >&2; exit 1; }
echo "tarball: $tarball"

mkdir -p "$OUTBOX_RUN_DIR"
project=$(mktemp -d "$OUTBOX_RUN_DIR/node-nolibs-XXXXXX")
trap 'rm -rf "$project"' EXIT
printf '{ "name": "outbox-nolibs", "version": "1.0.0", "private": true }\n' > "$project/package.json"
(cd "$project" && npm install "$tarball" --ignore-scripts --prefer-offline --no-audit --no-fund) >/dev/null
installed=$project/node_modules/outbox
echo "ok install $(ls "$installed/prebuilds/linux-x64" | tr '\n' ' ')"

# The compiler's addon, before pack.js grafted the libraries in (<work>/build of node/tools/pack.js).
build=$(cd "$root/node" && node -p "require('path').join(require('./tools/pack').defaultWork(), 'build', 'Release')")
raw=
for f in "$build/outbox.node" "$build/obj.target/outbox.node"; do [[ -f $f ]] && { raw=$f; break; }; done

cat > "$project/check.js" <<'JS'
'use strict';
const fs = require('fs');
const path = require('path');
const failed = [];
function step(name, fn) {
  try {
    console.log(`ok ${name} ${fn() ?? ''}`);
  } catch (e) {
    failed.push(name);
    console.log(`FAIL ${name} ${e && e.stack ? e.stack : e}`);
  }
}
const raw = process.env.OUTBOX_RAW_ADDON;
if (raw) {
  step('raw-addon-fails', () => {
    let err = null;
    try {
      require(raw);
    } catch (e) {
      err = e;
    }
    if (!err || !/lib(pq|rabbitmq|cjson)\.so/.test(err.message)) throw new Error(`${raw} loaded or failed otherwise: ${err && err.message}`);
    return `${err.code}: ${err.message.split(':').slice(-2).join(':').trim()}`;
  });
}
let outbox = null;
step('require', () => {
  outbox = require('outbox');
  const pkg = require('outbox/package.json');
  return `outbox ${pkg.version} (liboutbox ${outbox.version})`;
});
if (outbox) {
  step('render-write', () => {
    const st = outbox.renderWrite({ aggregateType: 'Order', aggregateId: '42', operation: 'POST', payload: { total: 10 } },
      { 'outbox.schema': 'nolibs' });
    if (st.eventType !== 'OrderCreated' || !st.text.includes('"nolibs"."outbox_events"')) throw new Error(JSON.stringify(st));
    return `INSERT INTO "nolibs"."outbox_events" ... (${st.values.length} params), ${st.eventType} ${st.eventId}`;
  });
  step('mapped', () => {
    const dir = fs.realpathSync(path.join(require.resolve('outbox/package.json'), '..', 'prebuilds', 'linux-x64'));
    const files = [...new Set(fs.readFileSync('/proc/self/maps', 'utf8').split('\n').map((l) => l.split(/\s+/).pop())
      .filter((f) => /\/(outbox[^/]*\.node|lib(pq|rabbitmq|cjson)[-.][^/]*)$/.test(f)))];
    const libs = files.filter((f) => /\/lib(pq|rabbitmq|cjson)[-.]/.test(f));
    if (libs.length !== 3 || files.some((f) => path.dirname(f) !== dir)) throw new Error(`mapped ${files.join(', ')}; expected all in ${dir}`);
    return files.map((f) => path.basename(f)).join(', ');
  });
}
console.log(failed.length ? `FAILED: ${failed.join(', ')}` : 'ALL OK');
process.exit(failed.length ? 1 : 0);
JS

cd "$project"
rc=0
OUTBOX_RAW_ADDON=$raw NODE_PATH= "$root/tests/python-dist/without_libs.sh" node check.js || rc=$?
echo "tests/node-dist/without_libs.sh: $((SECONDS - start)) s, exit $rc"
exit "$rc"
