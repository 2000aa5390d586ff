#!/usr/bin/env bash
# The documents' system, end to end, in one command on throwaway local services:
#   writers: the documents' PHP DataStore::insert (examples/php, the Composer package php/ through
#     FFI), the Python order service (import outbox, psycopg) and the C writer (pkg-config), each
#     a business row and its event in one transaction;
#   the `outbox relay` daemon publishes them to the fanout exchange corewrite.fanout;
#   subscribers, each on its own queue, each applying every event once through its inbox: the
#     documents' Node search-indexer and cache-invalidator (amqplib), the Python analytics-writer
#     and the C audit-logger (the consumer runtime);
#   forced redeliveries: the search-indexer is killed after applying an event, before its ack (the
#     broker redelivers it), and one event is published twice (the relay); the inboxes skip both.
# Then prints what each subscriber applied and checks it (scripts/demo_check.py): every event
# written applied exactly once by every subscriber, the redeliveries seen and skipped; exits
# non-zero if not. Installs what it needs (scripts/deps.sh, the npm tarball of node/ into a
# project, the corewrite-outbox wheel into a venv under $OUTBOX_RUN_DIR, a Composer project),
# builds, starts the services (they keep running: scripts/services.sh down), stops the processes
# it started. Every wait has a time limit.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT
cd "$root"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,17p' "$0"; exit 0; fi

step() { printf '\n=== %s\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }
logs=$OUTBOX_RUN_DIR/demo
# The Node subscribers' directory; tests/demo plants a broken copy here to see the demo fail.
node_dir=${OUTBOX_DEMO_NODE_DIR:-$root/examples/node}
run=$OUTBOX_RUN_DIR/demo-run   # installs that outlive a run: the Composer project

# --- installs, each in one function ------------------------------------------------------------
# The Node subscribers' packages, as examples/node/README.md installs them: the npm tarball of
# node/ (scripts/node_package.sh: packed outside the source tree with its linux-x64 prebuild, which
# is cached by the hash of its sources) installed into a project with pg and amqplib, install
# scripts off. Sets node_path, where the subscribers' require() finds them (NODE_PATH).
install_node() {
  timeout 900 "$root/scripts/node_package.sh" "$OUTBOX_RUN_DIR/node-demo" "amqplib@^0.10.9" >/dev/null
  node_path=$OUTBOX_RUN_DIR/node-demo/node_modules
}
# The Python distribution as python/README.md installs it: the self-contained wheel of
# scripts/build_python_dist.sh (built when missing or older than its sources) and psycopg[binary],
# in a venv of the demo's own ($OUTBOX_RUN_DIR/venv-demo).
python=$OUTBOX_RUN_DIR/venv-demo/bin/python
install_python() {
  local venv=$OUTBOX_RUN_DIR/venv-demo dist=${OUTBOX_PY_DIST:-$OUTBOX_RUN_DIR/dist} wheel
  wheel=$(ls "$dist"/corewrite_outbox-*-manylinux_*.whl 2>/dev/null | head -n 1 || true)
  if [[ -z $wheel || -n $(find "$root/python" "$root/bindings/python" "$root/core" "$root/capi" -type f \
        -newer "$wheel" -not -path '*/__pycache__/*' -print -quit) ]]; then
    OUTBOX_PY_DIST=$dist timeout 900 "$root/scripts/build_python_dist.sh" >/dev/null
  fi
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
  timeout 300 "$venv/bin/python" -m pip install --disable-pip-version-check -q "psycopg[binary]>=3.1"
  timeout 300 "$venv/bin/python" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps \
    --no-index --only-binary corewrite-outbox --find-links "$dist" corewrite-outbox
}
# The PHP package as php/README.md installs it: a Composer project requiring outbox/outbox from
# this checkout's php/ (a path repository, Packagist off, so offline).
php_app=$run/php-app
install_php() {
  php -r 'exit(extension_loaded("ffi") ? 0 : 1);' || die "php has no FFI extension (scripts/deps.sh installs php-cli)"
  mkdir -p "$php_app"
  cat >"$php_app/composer.json" <<JSON
{
    "name": "demo/product-service",
    "repositories": [{"type": "path", "url": "$root/php"}, {"packagist.org": false}],
    "require": {"outbox/outbox": "*@dev"}
}
JSON
  rm -f "$php_app/composer.lock"
  COMPOSER_HOME="$run/composer-home" COMPOSER_CACHE_DIR="$run/composer-cache" COMPOSER_DISABLE_NETWORK=1 \
    timeout 300 composer install --working-dir="$php_app" --no-interaction --no-progress --quiet
}

# --- bounded waits -----------------------------------------------------------------------------
q() { "$root/scripts/services.sh" psql -Atqc "$1"; }
wait_sql() { # sql expected seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do [[ "$(q "$1")" == "$2" ]] && return 0; sleep 0.1; done
  die "timed out after $3 s waiting for: $1 = $2 (got $(q "$1"))"
}
wait_log() { # file fixed-string seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -qF -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  die "timed out after $3 s waiting for '$2' in $1"
}
lines_of() { wc -l <"$1"; }
wait_again() { # file from-line event-id seconds: the subscriber dealt with the event again (after
  # line from-line); whether it skipped it or applied it twice is for the check to say
  local i
  for ((i = 0; i < $4 * 10; i++)); do tail -n +"$(($2 + 1))" "$1" | grep -qF -- "$3" && return 0; sleep 0.1; done
  die "timed out after $4 s waiting for $1 to get event $3 again"
}
wait_exit() { # pid seconds -> sets $exit_status
  local i
  for ((i = 0; i < $2 * 10; i++)); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then kill -KILL "$1" 2>/dev/null || true; fi
  exit_status=0
  wait "$1" || exit_status=$?
}

"$root/scripts/deps.sh"
"$root/scripts/services.sh" up
eval "$("$root/scripts/services.sh" env)"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
"$root/scripts/build.sh" release
prefix=$root/_install
export PATH="$prefix/bin:$PATH"
step "installs: the npm tarball (node/), the corewrite-outbox wheel (python/), composer install (php/)"
start=$SECONDS
install_node
install_python
install_php
echo "installed in $((SECONDS - start)) s"

# The demo keeps its tables in their own schema, fresh on every run.
export OUTBOX_SCHEMA=demo
rm -rf "$logs"
mkdir -p "$logs"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM
q "DROP SCHEMA IF EXISTS demo CASCADE" >/dev/null 2>&1
subscribers=(search-indexer cache-invalidator analytics-writer audit-logger)
for sub in "${subscribers[@]}"; do
  "$root/scripts/services.sh" rabbitmqctl delete_queue "$sub" >/dev/null 2>&1 || true
done

step "outbox migrate"
outbox migrate --schema demo
# The PHP application's records are numbered from 1001, apart from the C writer's products.
q "CREATE TABLE demo.tb_anag_records (id bigserial PRIMARY KEY, dimension text NOT NULL, data jsonb NOT NULL);
   ALTER SEQUENCE demo.tb_anag_records_id_seq RESTART 1001" >/dev/null
build=$root/build/examples-c
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -s -C "$root/examples/c" O="$build" >/dev/null

step "four subscribers, each with its own durable queue on the fanout exchange"
node_sub() { # role [args...]: appends to its log
  local role=$1; shift
  NODE_PATH=$node_path node "$node_dir/amqplib-$role.js" "$@" >>"$logs/$role.log" 2>&1 &
  pids+=("$!"); last_pid=$!
}
node_sub search-indexer --crash-after-apply; indexer_pid=$last_pid
node_sub cache-invalidator
"$python" "$root/examples/python/analytics_writer.py" >"$logs/analytics-writer.log" 2>&1 &
pids+=("$!")
"$build/subscriber" audit-logger >"$logs/audit-logger.log" 2>&1 &
pids+=("$!")
wait_log "$logs/search-indexer.log" "Waiting for events" 30
wait_log "$logs/cache-invalidator.log" "Waiting for events" 30
wait_log "$logs/analytics-writer.log" "waiting for events" 30
wait_log "$logs/audit-logger.log" "waiting for events" 30
echo "search-indexer, cache-invalidator: Node (amqplib, examples/node), started with --crash-after-apply for the indexer"
echo "analytics-writer: Python (outbox.Consumer); audit-logger: C (outbox_consumer_run)"
outbox tail --count 1 --timeout 60 >"$logs/tail.out" 2>"$logs/tail.err" &
tail_pid=$!; pids+=("$tail_pid")

step "the relay daemon (outbox relay)"
outbox relay --schema demo --log-format text >"$logs/relay.log" 2>&1 &
relay_pid=$!; pids+=("$relay_pid")

step "PHP: the documents' DataStore::insert, with outbox/outbox installed by Composer (FFI + PDO)"
for product in "Widget Pro:cat_electronics" "Gadget Max:cat_home"; do
  (cd "$php_app" && php -d auto_prepend_file=vendor/autoload.php "$root/examples/php/DataStore.php" \
     "${product%%:*}" "${product#*:}") | tee -a "$logs/writer-php.log"
done
grep -q "outbox/outbox" "$php_app/vendor/composer/installed.json" || die "outbox/outbox is not in the Composer project"

step "forced redelivery 1: the search-indexer is killed after applying the first event, before its ack"
wait_exit "$indexer_pid" 30
crashed=$(grep -o "killed after the COMMIT of event [0-9a-f-]*" "$logs/search-indexer.log" | awk '{print $NF}' || true)
[[ $exit_status == 137 ]] || die "the search-indexer was to be killed (exit 137), it exited $exit_status"
for i in "${!pids[@]}"; do [[ ${pids[$i]} == "$indexer_pid" ]] && unset 'pids[i]'; done
grep -F -- "--crash-after-apply" "$logs/search-indexer.log"
echo "restarted; RabbitMQ redelivers the unacknowledged event:"
from=$(lines_of "$logs/search-indexer.log")
node_sub search-indexer
wait_again "$logs/search-indexer.log" "$from" "$crashed" 30
tail -n +"$((from + 1))" "$logs/search-indexer.log" | grep -F "$crashed"

step "Python: the order service, an order row and its OrderCreated event in one psycopg transaction"
"$python" "$root/examples/python/order_service.py" --count 2 | tee "$logs/writer-python.log"
step "C: the writer, a product row and its ProductCreated event in one transaction"
for name in "Doohickey Mini" "Sprocket Plus"; do
  "$build/writer" "$OUTBOX_PG_URL" "$name" | tee -a "$logs/writer-c.log"
done
total=$(q "SELECT count(*) FROM demo.outbox")
echo "$total events committed: PHP, Python and C"
for sub in "${subscribers[@]}"; do
  wait_sql "SELECT count(*) FROM demo.outbox_inbox WHERE consumer = '$sub'" "$total" 60
done

step "forced redelivery 2: one event published twice (outbox replay, as a relay crash before recording it would)"
again=$(q "SELECT outbox_id FROM demo.outbox WHERE metadata->>'microservice' = 'example-c' ORDER BY outbox_id LIMIT 1")
aggregate=$(q "SELECT aggregate_type || ':' || aggregate_id FROM demo.outbox WHERE outbox_id = '$again'")
echo "$again" >"$logs/republished.txt"
declare -A before=()
for sub in "${subscribers[@]}"; do before[$sub]=$(lines_of "$logs/$sub.log"); done
outbox replay --schema demo --aggregate "$aggregate" --event "$again"
for sub in "${subscribers[@]}"; do
  wait_again "$logs/$sub.log" "${before[$sub]}" "$again" 30
  tail -n +"$((${before[$sub]} + 1))" "$logs/$sub.log" | grep -F "$again"
done

step "stopping the subscribers and the relay (SIGTERM)"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
unclean=0
for p in "${pids[@]}"; do
  wait_exit "$p" 20
  if [[ $exit_status != 0 ]]; then echo "demo: process $p exited $exit_status" >&2; unclean=$((unclean + 1)); fi
done
pids=()
echo "${#subscribers[@]} subscribers, the relay and outbox tail stopped; $unclean of them not cleanly"

step "what the subscribers printed"
for sub in "${subscribers[@]}"; do cat "$logs/$sub.log"; done
step "the first message on the wire (outbox tail)"
sed -n '1,/^}/p' "$logs/tail.out"
step "relay log"
cat "$logs/relay.log"
step "the events in the outbox table"
"$root/scripts/services.sh" psql -c "SELECT outbox_id, event_type, aggregate_type || ':' || aggregate_id AS aggregate, seq,
  metadata->>'microservice' AS written_by, status FROM demo.outbox ORDER BY outbox_id"
step "the subscribers' effects"
"$root/scripts/services.sh" psql -c "SELECT consumer, count(*) AS inbox_rows FROM demo.outbox_inbox GROUP BY consumer ORDER BY consumer" \
  -c "SELECT id, doc->>'XPRD01' AS name FROM demo.search_index ORDER BY id" \
  -c "SELECT cache_key, count(*) FROM demo.cache_invalidations GROUP BY cache_key ORDER BY cache_key"

# What the database says, for the check.
q "SELECT outbox_id, event_type, aggregate_type, aggregate_id, status FROM demo.outbox" >"$logs/events.txt"
q "SELECT consumer, outbox_id FROM demo.outbox_inbox" >"$logs/inbox.txt"
q "SELECT outbox_id FROM demo.audit_log" >"$logs/audit_log.txt"
q "SELECT event_id FROM demo.analytics_events" >"$logs/analytics_events.txt"
step "what each subscriber applied, checked (scripts/demo_check.py $logs)"
python3 "$root/scripts/demo_check.py" "$logs"
[[ $unclean == 0 ]] || die "$unclean process(es) did not stop cleanly"
