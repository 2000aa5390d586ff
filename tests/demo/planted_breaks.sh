#!/usr/bin/env bash
# The demo's check (scripts/demo_check.py) can fail: on the evidence of a demo run that passed
# (its log directory), unchanged it passes; with a planted break it must fail and say which:
#   - a subscriber applied an event twice (a second "applied" line, a second effect row);
#   - a subscriber missed an event (no line, no inbox row, no effect row);
#   - the crashed search-indexer applied its redelivered event again instead of skipping it;
#   - a subscriber never saw the event the relay published twice.
#   tests/demo/planted_breaks.sh LOG_DIR        (scripts/demo.sh leaves it in $OUTBOX_RUN_DIR/demo)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
logs=${1:?usage: tests/demo/planted_breaks.sh LOG_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
ok() { echo "  ok    $*"; passed=$((passed + 1)); }
bad() { echo "  FAIL  $*"; failed=$((failed + 1)); }

uuid='[0-9a-f]\{8\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{12\}'
first_applied() { grep -m1 "(event $uuid" "$1" | grep -v "already processed"; }
id_of() { grep -o "$uuid" <<<"$1" | head -1; }

# expect NAME EXPECTED-STATUS TEXT...: run the check on $tmp/d, want the status and every TEXT in its output.
expect() {
  local name=$1 want=$2 out rc=0 text
  shift 2
  out=$(python3 "$root/scripts/demo_check.py" "$tmp/d" 2>&1) || rc=$?
  for text in "$@"; do
    if ! grep -qF -- "$text" <<<"$out"; then bad "$name: the check's output lacks '$text'"; echo "$out" | tail -30; return; fi
  done
  if [[ $rc == "$want" ]]; then ok "$name (check exit $rc)"; else bad "$name: check exited $rc, expected $want"; echo "$out" | tail -30; fi
}
fresh() { rm -rf "$tmp/d"; cp -r "$logs" "$tmp/d"; }

fresh
expect "the demo's own evidence passes" 0 "demo check:" " 0 failed"

fresh  # the Node cache-invalidator applies one event twice
line=$(first_applied "$tmp/d/cache-invalidator.log")
echo "$line" >>"$tmp/d/cache-invalidator.log"
expect "planted: cache-invalidator applies $(id_of "$line") twice" 1 \
  "FAIL  cache-invalidator: every one of the" "applied more than once"

fresh  # the C audit-logger writes one event's effect twice (its audit_log has no unique key)
echo "$(head -1 "$tmp/d/audit_log.txt")" >>"$tmp/d/audit_log.txt"
expect "planted: audit_log holds one event twice" 1 "FAIL  audit-logger (C): audit_log holds one row per event"

fresh  # the C audit-logger misses one event: no line, no inbox row, no effect row
line=$(first_applied "$tmp/d/audit-logger.log")
id=$(id_of "$line")
grep -vF -- "$line" "$logs/audit-logger.log" >"$tmp/d/audit-logger.log"
grep -vF -- "audit-logger|$id" "$logs/inbox.txt" >"$tmp/d/inbox.txt"
grep -vF -- "$id" "$logs/audit_log.txt" >"$tmp/d/audit_log.txt"
expect "planted: audit-logger misses $id" 1 "FAIL  audit-logger: every one of the" "missed" \
  "FAIL  audit-logger: its inbox holds one row per event" "FAIL  audit-logger (C): audit_log holds one row per event"

fresh  # the Python analytics-writer misses one event
line=$(first_applied "$tmp/d/analytics-writer.log")
grep -vF -- "$line" "$logs/analytics-writer.log" >"$tmp/d/analytics-writer.log"
expect "planted: analytics-writer misses $(id_of "$line")" 1 "FAIL  analytics-writer: every one of the" "missed"

fresh  # the crashed search-indexer applies its redelivered event again (no inbox)
skip=$(grep -m1 "redelivered by the broker" "$logs/search-indexer.log")
id=$(id_of "$skip")
sed "s/^\[search-indexer\] skipped \(.*\)): already processed.*/[search-indexer] applied \1, IN_ORDER)/" \
  "$logs/search-indexer.log" >"$tmp/d/search-indexer.log"
expect "planted: the redelivered $id applied again by the search-indexer" 1 \
  "FAIL  search-indexer: every one of the" "applied more than once" \
  "FAIL  search-indexer: killed after applying an event, before its ack"

fresh  # the Node search-indexer never gets the event published twice
again=$(cat "$logs/republished.txt")
grep -v "$again.*already processed" "$logs/search-indexer.log" >"$tmp/d/search-indexer.log"
expect "planted: the search-indexer never sees the republished $again" 1 \
  "FAIL  search-indexer: the event published twice (outbox replay) was skipped by its inbox"

echo "planted breaks: $passed passed, $failed failed"
[[ $failed == 0 ]]
