#!/usr/bin/env bash
# The Node package's suite (node/, bindings/node, examples/node), run against the package as users
# install it:
#   1. npm ci --ignore-scripts in node/ from package-lock.json: the development tools (prebuildify,
#      typescript, amqplib, ...) from the npm registry; nothing is compiled in node/;
#   2. scripts/node_package.sh: node/tools/pack.js makes the tarball in a staging directory outside
#      the source tree (C sources + the linux-x64 prebuild, compiled by prebuildify with node-gyp
#      --nodedir=<node prefix>: the running Node's own headers, never downloaded; cached while the
#      sources are unchanged), then `npm install <tarball> pg --ignore-scripts` into a fresh project
#      in $OUTBOX_RUN_DIR/node-project: the README's install line;
#   3. node --test over node/test/*.test.js with OUTBOX_NODE_PROJECT set: the tests load `outbox`
#      from that project (test/outbox.js). Real PostgreSQL and RabbitMQ, the examples as child
#      processes, tsc --strict on index.d.ts, the README's examples and ESM/CJS programs, the
#      tarball installed again from itself alone with npm (scripts on and off) and pnpm 10 (source
#      tree unchanged), and once built from source without a prebuild (one more compile, ~40 s).
# Assumes the services are up with OUTBOX_PG_URL / OUTBOX_AMQP_URL exported (scripts/test.sh does
# that; the defaults are the local throwaway services). Exits non-zero on any failure.
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,19p' "$0"; exit 0; fi

: "${OUTBOX_PG_URL:=postgresql://outbox:outbox@127.0.0.1:54329/outbox}"
: "${OUTBOX_AMQP_URL:=amqp://outbox:outbox@127.0.0.1:56729/%2f}"
export OUTBOX_PG_URL OUTBOX_AMQP_URL

command -v node >/dev/null || { echo "test_node.sh: node is not installed (scripts/deps.sh)" >&2; exit 1; }
command -v npm >/dev/null || { echo "test_node.sh: npm is not installed (scripts/deps.sh)" >&2; exit 1; }
echo "node $(node --version), npm $(npm --version), $(command -v node)"

: "${OUTBOX_RUN_DIR:=$root/.run}"
export OUTBOX_RUN_DIR
cd "$root/node"
start=$SECONDS
npm ci --ignore-scripts --prefer-offline --no-audit --no-fund
echo "=== npm ci (node/, no scripts): $((SECONDS - start)) s"

start=$SECONDS
project="$OUTBOX_RUN_DIR/node-project"
dev() { node -p "'$1@' + require('./package.json').devDependencies['$1']"; }
tarball=$("$root/scripts/node_package.sh" "$project" "$(dev amqplib)" "$(dev typescript)" "$(dev @types/pg)" "$(dev @types/node)" | tail -n 1)
export OUTBOX_NODE_PROJECT=$project OUTBOX_NODE_TARBALL=$tarball
echo "=== pack + install $tarball into $project: $((SECONDS - start)) s"

start=$SECONDS
status=0
# Every test has a time limit (a hang fails that test in minutes, not at CI's limit). Test files
# run side by side (each test has its own schema, exchange and queues): the default, one file at a
# time on 2 cores, leaves the machine idle while a file waits on the services.
node --test --test-timeout="${OUTBOX_NODE_TEST_TIMEOUT_MS:-180000}" \
  --test-concurrency="${OUTBOX_NODE_TEST_CONCURRENCY:-3}" test/*.test.js || status=$?
echo "=== node --test: $((SECONDS - start)) s, exit $status"
exit "$status"
