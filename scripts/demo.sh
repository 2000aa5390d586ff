#!/usr/bin/env bash
# The main job, end to end on throwaway local services: installs what is missing, builds and
# installs the library, migrates the schema with the `outbox` CLI, then runs the C writer
# example (a product row and its ProductCreated event in one transaction) built against the
# installed library with pkg-config, while the `outbox relay` daemon publishes the events to the
# fanout exchange and `outbox tail` (a subscriber queue) prints them as they arrive.
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

echo "=== a subscriber queue on the fanout exchange (outbox tail), then the relay daemon"
outbox tail --count 3 --timeout 60 >"$logs/tail.out" 2>"$logs/tail.err" &
tail_pid=$!; pids+=("$tail_pid")
for _ in $(seq 50); do grep -q tailing "$logs/tail.err" 2>/dev/null && break; sleep 0.1; done
outbox relay --schema demo --log-format text >"$logs/relay.log" 2>&1 &
relay_pid=$!; pids+=("$relay_pid")

echo "=== three writes: each a product row and its ProductCreated event in one transaction"
for name in "Widget Pro" "Gadget Max" "Doohickey Mini"; do
  "$build/writer" "$OUTBOX_PG_URL" "$name"
done

echo "=== what the subscriber received from RabbitMQ"
wait "$tail_pid"
cat "$logs/tail.out"

echo "=== relay log (stopped with SIGTERM)"
kill -TERM "$relay_pid"; wait "$relay_pid"
cat "$logs/relay.log"

echo "=== the events in the outbox table"
"$root/scripts/services.sh" psql -c "SELECT outbox_id, event_type, aggregate_id, seq, status, published_at IS NOT NULL AS published FROM demo.outbox ORDER BY created_at"
