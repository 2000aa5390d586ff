#!/usr/bin/env bash
# The demo (scripts/demo.sh), the documents' system end to end, as a test:
#   1. the demo exits 0 and its check passed (every event written by PHP, Python and C applied
#      exactly once by each of the four subscribers, both forced redeliveries skipped);
#   2. its check fails on that run's evidence with a planted break (tests/demo/planted_breaks.sh);
#   3. a live planted break: the demo again, its Node subscribers from a copy whose inbox is
#      ignored (every delivery applied); the demo must exit non-zero, its check naming the
#      search-indexer's and the cache-invalidator's double applications.
# Needs the services up with OUTBOX_PG_URL / OUTBOX_AMQP_URL exported (scripts/test.sh does that).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "  FAIL  $*" >&2; exit 1; }
ok() { echo "  ok    $*"; }

start=$SECONDS
rc=0
"$root/scripts/demo.sh" >"$tmp/demo.out" 2>&1 || rc=$?
if [[ $rc != 0 ]] || ! grep -qE '^demo check: [0-9]+ passed, 0 failed$' "$tmp/demo.out"; then
  tail -80 "$tmp/demo.out"
  fail "scripts/demo.sh exited $rc"
fi
grep -E '^  (ok|FAIL)  ' "$tmp/demo.out"
ok "scripts/demo.sh: $(grep -E '^demo check:' "$tmp/demo.out") ($((SECONDS - start)) s)"

"$root/tests/demo/planted_breaks.sh" "$OUTBOX_RUN_DIR/demo"

# 3. The live break: the examples' Node subscribers, with the inbox's answer ignored.
start=$SECONDS
mkdir "$tmp/node"
cp "$root"/examples/node/*.js "$tmp/node/"  # their packages: the demo's NODE_PATH
sed -i 's|if (seen.firstTime) await handle(event);|await handle(event); seen.firstTime = true; // PLANTED: the inbox ignored|' \
  "$tmp/node/amqplib-inbox.js"
grep -q PLANTED "$tmp/node/amqplib-inbox.js" || fail "could not plant the break in amqplib-inbox.js"
rc=0
OUTBOX_DEMO_NODE_DIR=$tmp/node "$root/scripts/demo.sh" >"$tmp/broken.out" 2>&1 || rc=$?
for want in "FAIL  search-indexer: every one of the" "FAIL  cache-invalidator: every one of the" "applied more than once"; do
  grep -qF -- "$want" "$tmp/broken.out" || { tail -60 "$tmp/broken.out"; fail "the broken demo's output lacks '$want'"; }
done
[[ $rc != 0 ]] || { tail -40 "$tmp/broken.out"; fail "the demo with the inbox ignored exited 0"; }
grep -F "applied more than once" "$tmp/broken.out" | cut -c1-160 | sed "s/^  FAIL  /        as expected, the check says: /"
ok "live planted break (Node subscribers ignore their inbox): the demo exits $rc, naming the double applications ($((SECONDS - start)) s)"
echo "demo: 3 passed, 0 failed"
