#!/usr/bin/env bash
# The Node package's suite (node/, bindings/node, examples/node):
#   1. npm ci in node/ from package-lock.json (npm install when there is no lockfile): packages come
#      from the npm registry only; the install script builds the addon from the repository's
#      sources with node-gyp --nodedir=<node prefix> (the running Node's own headers, never
#      downloaded), incrementally when node/build is already there;
#   2. node --test over node/test/*.test.js: real PostgreSQL and RabbitMQ, the examples as child
#      processes, and tsc (a devDependency) checking index.d.ts.
# Assumes the services are up with OUTBOX_PG_URL / OUTBOX_AMQP_URL exported (scripts/test.sh does
# that; the defaults are the local throwaway services). Exits non-zero on any failure.
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,11p' "$0"; exit 0; fi

: "${OUTBOX_PG_URL:=postgresql://outbox:outbox@127.0.0.1:54329/outbox}"
: "${OUTBOX_AMQP_URL:=amqp://outbox:outbox@127.0.0.1:56729/%2f}"
export OUTBOX_PG_URL OUTBOX_AMQP_URL

command -v node >/dev/null || { echo "test_node.sh: node is not installed (scripts/deps.sh)" >&2; exit 1; }
command -v npm >/dev/null || { echo "test_node.sh: npm is not installed (scripts/deps.sh)" >&2; exit 1; }
echo "node $(node --version), npm $(npm --version), $(command -v node)"

cd "$root/node"
start=$SECONDS
if [[ -f package-lock.json ]]; then
  npm ci --prefer-offline --no-audit --no-fund
else
  npm install --prefer-offline --no-audit --no-fund
fi
echo "=== npm install: $((SECONDS - start)) s"

start=$SECONDS
status=0
# Every test has a time limit (a hang fails that test in minutes, not at CI's limit).
node --test --test-timeout="${OUTBOX_NODE_TEST_TIMEOUT_MS:-180000}" test/*.test.js || status=$?
echo "=== node --test: $((SECONDS - start)) s, exit $status"
exit "$status"
