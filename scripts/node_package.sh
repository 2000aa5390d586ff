#!/usr/bin/env bash
# The npm package as users install it: makes the tarball (node/tools/pack.js: staged outside the
# source tree, with the C sources and the linux-x64 glibc prebuild; the prebuild is cached by the
# hash of its sources, so unchanged sources do not compile again) and installs it into a fresh
# project, the way node/README.md says:
#   npm install <tarball> pg --ignore-scripts
# (--ignore-scripts: the prebuild is what loads, nothing compiles; pnpm 10 and npm configured to
# block install scripts install it the same way). Extra arguments are more packages for that
# project (the test suite's amqplib, typescript, @types/*), from the npm registry or its cache.
#   scripts/node_package.sh PROJECT_DIR [PACKAGE...]
# Prints the tarball's path on stdout as its last line. Needs node/node_modules (npm ci
# --ignore-scripts in node/; done here when prebuildify is missing).
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then sed -n '2,12p' "$0"; exit 2; fi
project=$1; shift
: "${OUTBOX_RUN_DIR:=$root/.run}"
export OUTBOX_RUN_DIR

if [[ ! -d "$root/node/node_modules/prebuildify" ]]; then
  (cd "$root/node" && npm ci --ignore-scripts --prefer-offline --no-audit --no-fund) >&2
fi
# One pack at a time per run directory (the demo's and the bench's run at once in the test command):
# pack.js stages every pack in one directory per checkout, and each writes the same tarball.
mkdir -p "$OUTBOX_RUN_DIR"
exec 9>"$OUTBOX_RUN_DIR/node-package.lock"
flock -w 600 9 || { echo "node_package.sh: another pack held $OUTBOX_RUN_DIR/node-package.lock for 600 s" >&2; exit 1; }
tarball=$(node "$root/node/tools/pack.js" --out "$OUTBOX_RUN_DIR/node-dist")
rm -rf "$project"
mkdir -p "$project"
printf '{ "name": "outbox-user", "version": "1.0.0", "private": true }\n' > "$project/package.json"
(cd "$project" && npm install "$tarball" pg "$@" --ignore-scripts --prefer-offline --no-audit --no-fund) >&2
echo "$tarball"
