#!/usr/bin/env bash
# The main job, end to end on throwaway local services: installs what is missing, builds and
# installs the library, migrates the schema with the `outbox` CLI, then runs the C writer
# example (a product row and its ProductCreated event in one transaction) built against the
# installed library with pkg-config; the `outbox relay` daemon publishes the events to the fanout
# exchange, and two C subscribers (search-indexer, cache-invalidator) apply each event exactly once
# through their inbox, even when it is delivered twice; a Python order service writes through
# psycopg and a Python analytics-writer consumes (import outbox).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT
cd "$root"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,6p' "$0"; exit 0; fi

"$root/scripts/deps.sh"
"$root/scripts/services.sh" up
eval "$("$root/scripts/services.sh" env)"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
"$root/scripts/build.sh" release
prefix=$root/_install
export PATH="$prefix/bin:$PATH"

# The demo keeps its tables in their own schema, fresh on every run.
export OUTBOX_SCHEMA=demo
"$root/scripts/services.sh" psql -qc "DROP SCHEMA IF EXISTS demo CASCADE" >/dev/null
logs=$root/.run/demo
mkdir -p "$logs"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

echo "=== outbox migrate"
outbox migrate --schema demo

echo "=== C writer example (built against the installed library with pkg-config)"
build=$root/build/examples-c
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -s -C "$root/examples/c" O="$build" >/dev/null

q() { "$root/scripts/services.sh" psql -Atqc "$1"; }
wait_for() { # sql expected seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do [[ "$(q "$1")" == "$2" ]] && return 0; sleep 0.1; done
  echo "demo: timed out waiting for: $1 = $2 (got $(q "$1"))" >&2; return 1
}

echo "=== two subscribers, each with its own durable queue on the fanout exchange (C, consumer runtime)"
for sub in search-indexer cache-invalidator; do
  "$root/scripts/services.sh" rabbitmqctl delete_queue "$sub" >/dev/null 2>&1 || true
  "$build/subscriber" "$sub" >"$logs/$sub.log" 2>&1 &
  pids+=("$!")
done
outbox tail --count 3 --timeout 60 >"$logs/tail.out" 2>"$logs/tail.err" &
tail_pid=$!; pids+=("$tail_pid")
for f in search-indexer cache-invalidator; do
  for _ in $(seq 100); do grep -q waiting "$logs/$f.log" 2>/dev/null && break; sleep 0.1; done
done

echo "=== a Python subscriber (analytics-writer, import outbox) in its own venv"
venv=$OUTBOX_RUN_DIR/venv
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check -q "psycopg>=3.1"
"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps "$root/python" \
  -Cbuild-dir="$OUTBOX_RUN_DIR/python-build"
"$root/scripts/services.sh" rabbitmqctl delete_queue analytics-writer >/dev/null 2>&1 || true
"$venv/bin/python" "$root/examples/python/analytics_writer.py" --count 4 >"$logs/analytics-writer.log" 2>&1 &
py_sub=$!; pids+=("$py_sub")
for _ in $(seq 100); do grep -q waiting "$logs/analytics-writer.log" 2>/dev/null && break; sleep 0.1; done

echo "=== the relay daemon (outbox relay)"
outbox relay --schema demo --log-format text >"$logs/relay.log" 2>&1 &
relay_pid=$!; pids+=("$relay_pid")

echo "=== three writes: each a product row and its ProductCreated event in one transaction"
for name in "Widget Pro" "Gadget Max" "Doohickey Mini"; do
  "$build/writer" "$OUTBOX_PG_URL" "$name"
done
echo "=== a Python order service: an order row and its OrderCreated event in one psycopg transaction"
"$venv/bin/python" "$root/examples/python/order_service.py" --count 1
wait_for "SELECT count(*) FROM demo.outbox_inbox WHERE consumer <> 'analytics-writer'" 8 30
wait "$py_sub"

echo "=== a redelivery: event of product 1 put back to PENDING, as after a relay crash before marking"
q "UPDATE demo.outbox SET status = 'PENDING', published_at = NULL WHERE aggregate_id = '1'" >/dev/null
wait_for "SELECT status FROM demo.outbox WHERE aggregate_id = '1'" PUBLISHED 30
sleep 1
echo "published twice; the subscribers' inboxes recognised the duplicate:"
"$root/scripts/services.sh" psql -c "SELECT consumer, count(*) AS events_processed FROM demo.outbox_inbox GROUP BY consumer ORDER BY consumer" \
  -c "SELECT count(*) AS search_documents FROM demo.search_index" \
  -c "SELECT count(*) AS cache_invalidations FROM demo.cache_invalidations"

echo "=== what the subscribers did"
cat "$logs/search-indexer.log" "$logs/cache-invalidator.log" "$logs/analytics-writer.log"
echo "=== the first message on the wire (outbox tail)"
wait "$tail_pid"
sed -n '1,/^}/p' "$logs/tail.out"

echo "=== relay log (stopped with SIGTERM)"
kill -TERM "$relay_pid"; wait "$relay_pid"
cat "$logs/relay.log"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
wait 2>/dev/null || true

echo "=== the events in the outbox table"
"$root/scripts/services.sh" psql -c "SELECT outbox_id, event_type, aggregate_id, seq, status, published_at IS NOT NULL AS published FROM demo.outbox ORDER BY created_at"
