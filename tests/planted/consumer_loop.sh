#!/usr/bin/env bash
# The consumer's exactly-once loop lives once, in core (core/consumer_loop.cpp, the step machine
# every face drives, and Consumer::settle): a bug planted there must be caught by the C, the Python
# (blocking and asyncio), the Node and the PHP suites alike. For each planted bug this script takes a
# clean copy of the committed tree (git clone of HEAD into $OUTBOX_RUN_DIR/planted), changes one
# line of core, and runs the suites on that copy exactly as the test command does (scripts/suites.sh
# cxx_suite, python_suite, node_suite, php_suite), each with a time limit. Every suite must FAIL,
# and name the test that caught the bug.
#   tests/planted/consumer_loop.sh [BUG...]     bugs: db-lost-counted, limit-off-by-one (the loop),
#                                               write-no-savepoint (the write plan); default: all three
# The copy starts throwaway services of its own (scripts/services.sh in the copy, its own run
# directory, ports from OUTBOX_PLANTED_PORT_BASE, default 57300, up to base+29; the RabbitMQ cluster of
# the node-kill tests from base+200) and stops them after.
# Takes 15-25 minutes per bug on 2 cores (four builds). Exits 0 only when every suite caught
# every bug. Not part of the test command: run it by hand.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,13p' "$0"; exit 0; fi
base=${OUTBOX_PLANTED_PORT_BASE:-57300}
export OUTBOX_PG_PORT=$base OUTBOX_AMQP_PORT=$((base + 1)) OUTBOX_AMQPS_PORT=$((base + 2))
export OUTBOX_RABBIT_DIST_PORT=$((base + 3)) OUTBOX_EPMD_PORT=$((base + 4))
export OUTBOX_RABBIT_CTL_PORT_MIN=$((base + 10)) OUTBOX_RABBIT_CTL_PORT_MAX=$((base + 29))
unset OUTBOX_PG_URL OUTBOX_AMQP_URL
run_dir=${OUTBOX_RUN_DIR:-$root/.run}/planted
bugs=("$@")
[[ ${#bugs[@]} -gt 0 ]] || bugs=(db-lost-counted limit-off-by-one write-no-savepoint)

# plant BUG FILE: rewrites one line of FILE; fails when the line it expects is not there.
plant() {
  local file=$1/core/consumer.cpp before after
  case $2 in
    db-lost-counted) # the rule the issue names: a lost database under the handler is no attempt
      file=$1/core/consumer_loop.cpp
      before='    if (outcome_ == Outcome::handler_failed) {'
      after='    if (false) { // (planted)' ;;
    limit-off-by-one) # dead-letter one attempt late
      before='        if (s.attempt >= cfg_.consumer_delivery_limit) {'
      after='        if (s.attempt > cfg_.consumer_delivery_limit) {' ;;
    write-no-savepoint) # the write plan: a keyed write inside a transaction without its savepoint
      file=$1/core/write_plan.cpp
      before='    savepoint_ = ev_.idempotency_key.has_value() && !idle_;'
      after='    savepoint_ = false; // (planted)' ;;
    *) echo "unknown bug '$2' (db-lost-counted, limit-off-by-one, write-no-savepoint)" >&2; return 2 ;;
  esac
  [[ $(grep -cxF -- "$before" "$file") == 1 ]] || { echo "plant $2: the line is not in $file once" >&2; return 1; }
  python3 - "$file" "$before" "$after" <<'EOF'
import sys
path, before, after = sys.argv[1:]
text = open(path).read()
open(path, "w").write(text.replace(before + "\n", after + "\n", 1))
EOF
  git -C "$1" diff --stat
}

caught=0 missed=0
for bug in "${bugs[@]}"; do
  src=$run_dir/$bug
  mkdir -p "$run_dir"
  if [[ -d $src/.git ]]; then # again: the committed tree, keeping the copy's build trees
    git -C "$src" fetch -q "$root" HEAD && git -C "$src" reset -q --hard FETCH_HEAD
  else
    git clone -q "$root" "$src"
  fi
  [[ -d $root/../shared && ! -e $src/../shared ]] && ln -s "$root/../shared" "$src/../shared" 2>/dev/null || true
  plant "$src" "$bug"
  echo "=== planted $bug in $src"
  export OUTBOX_RUN_DIR=$src/.run
  "$src/scripts/services.sh" up >"$run_dir/$bug.services.log" 2>&1
  trap '"$src/scripts/services.sh" down >/dev/null 2>&1 || true' EXIT
  eval "$("$src/scripts/services.sh" env)"
  export OUTBOX_PG_URL OUTBOX_AMQP_URL
  # The RabbitMQ cluster of the suites' node-kill tests, as scripts/test.sh starts it.
  export OUTBOX_TEST_CLUSTER_DIR=$OUTBOX_RUN_DIR/test-cluster OUTBOX_TEST_CLUSTER_BASE_PORT=$((base + 200))
  test_cluster() {
    OUTBOX_CLUSTER_DIR=$OUTBOX_TEST_CLUSTER_DIR OUTBOX_CLUSTER_BASE_PORT=$OUTBOX_TEST_CLUSTER_BASE_PORT \
      OUTBOX_CLUSTER_SERVICES=rabbitmq "$src/scripts/cluster.sh" "$@"
  }
  test_cluster up >"$run_dir/$bug.cluster.log" 2>&1 || { echo "  the test cluster did not start ($run_dir/$bug.cluster.log)"; exit 1; }
  trap '"$src/scripts/services.sh" down >/dev/null 2>&1 || true; test_cluster down >/dev/null 2>&1 || true' EXIT
  eval "$(test_cluster env | grep '^export OUTBOX_CLUSTER_AMQP_URL=')"
  export OUTBOX_TEST_CLUSTER_AMQP_URL=$OUTBOX_CLUSTER_AMQP_URL
  for s in cxx_suite python_suite node_suite php_suite; do
    log=$run_dir/$bug.$s.log
    rc=0
    if [[ $s == php_suite ]]; then # PHP runs on the installed library, as in the test command
      timeout -k 10 900 "$src/scripts/build.sh" release >"$log.build" 2>&1 || { echo "  release build failed ($log.build)"; exit 1; }
    fi
    timeout -k 10 1500 "$src/scripts/run_suite.sh" "$src/scripts/suites.sh" "$s" >"$log" 2>&1 || rc=$?
    failing=$(grep -E '^\[  FAILED  \] [A-Za-z]|^FAILED |^not ok |^# fail [1-9]|^  FAIL  |^[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Failed' "$log" \
      | grep -v ' listed below' | sort -u | head -8 || true)
    if [[ $rc != 0 ]]; then
      caught=$((caught + 1))
      echo "  caught  $bug by $s (exit $rc; $log):"
      sed 's/^/            /' <<<"${failing:-(see the log)}"
    else
      missed=$((missed + 1))
      echo "  MISSED  $bug: $s passed with the bug planted ($log)"
    fi
  done
  "$src/scripts/services.sh" down >/dev/null 2>&1 || true
  test_cluster down >/dev/null 2>&1 || true
done
echo "planted bugs: caught $caught time(s), missed $missed time(s)"
[[ $missed == 0 ]]
