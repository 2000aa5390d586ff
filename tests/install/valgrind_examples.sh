#!/usr/bin/env bash
# The C examples under valgrind (memcheck), built against the installed library: the writer,
# a subscriber and the embedded relay moving real events. Fails on any memory error or
# definite/indirect leak (exit code 99 from valgrind).
set -euo pipefail
prefix=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
: "${OUTBOX_PG_URL:?}" "${OUTBOX_AMQP_URL:?}"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -s -C "$root/examples/c" O="$work" CFLAGS="-std=c99 -g -O1 -Wall -Wextra -pedantic" >/dev/null
vg=(valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
    --show-leak-kinds=definite,indirect --track-origins=yes)
tag=$RANDOM$RANDOM
export OUTBOX_SCHEMA="vg_$tag" OUTBOX_EXCHANGE="test.vg.$tag"
"$root/scripts/services.sh" rabbitmqctl delete_queue search-indexer >/dev/null 2>&1 || true
q() { psql "$OUTBOX_PG_URL" -Atqc "$1"; }
q "CREATE SCHEMA $OUTBOX_SCHEMA"
fail=0
run_checked() { # name log command...
  local name=$1 log=$2; shift 2
  if "$@" >"$log" 2>&1; then echo "  ok    $name"; else echo "  FAIL  $name (exit $?)"; tail -40 "$log" | sed 's/^/        /'; fail=1; fi
}

run_checked "writer" "$work/writer1.log" "${vg[@]}" "$work/writer" "$OUTBOX_PG_URL" "Valgrind One"
( "${vg[@]}" "$work/subscriber" search-indexer 2 >"$work/subscriber.log" 2>&1; echo $? >"$work/subscriber.rc" ) &
pids+=("$!")
for _ in $(seq 600); do grep -q waiting "$work/subscriber.log" 2>/dev/null && break; sleep 0.1; done
run_checked "writer (second event)" "$work/writer2.log" "${vg[@]}" "$work/writer" "$OUTBOX_PG_URL" "Valgrind Two"
( "${vg[@]}" "$work/relay" >"$work/relay.log" 2>&1; echo $? >"$work/relay.rc" ) &
relay=$!; pids+=("$relay")
for _ in $(seq 1200); do [[ -f "$work/subscriber.rc" ]] && break; sleep 0.1; done
sleep 1
pkill -TERM -f "$work/relay" || true
for _ in $(seq 600); do [[ -f "$work/relay.rc" ]] && break; sleep 0.1; done
for name in subscriber relay; do
  rc=$(cat "$work/$name.rc" 2>/dev/null || echo timeout)
  if [[ "$rc" == 0 ]]; then echo "  ok    $name"; else echo "  FAIL  $name (exit $rc)"; tail -40 "$work/$name.log" | sed 's/^/        /'; fail=1; fi
done
processed=$(q "SELECT count(*) FROM $OUTBOX_SCHEMA.outbox_inbox WHERE consumer = 'search-indexer'")
[[ "$processed" == 2 ]] && echo "  ok    two events went write -> relay -> subscriber under valgrind" ||
  { echo "  FAIL  the subscriber processed $processed event(s), expected 2"; fail=1; }
q "DROP SCHEMA $OUTBOX_SCHEMA CASCADE" >/dev/null
"$root/scripts/services.sh" rabbitmqctl delete_queue search-indexer >/dev/null 2>&1 || true
[[ $fail == 0 ]] && echo "valgrind: 5 passed, 0 failed" || { echo "valgrind: failures above"; exit 1; }
