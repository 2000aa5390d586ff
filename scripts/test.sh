#!/usr/bin/env bash
# Runs every test suite against real, throwaway PostgreSQL and RabbitMQ:
#   1. installs missing packages, starts the local services (and, for the C++, Python and Node
#      suites, a 3-node RabbitMQ cluster whose nodes their consumer tests kill: scripts/cluster.sh)
#   2. C++ unit + integration suites (GoogleTest, sanitizer build, via ctest)
#   3. the installed library: header, pkg-config and CMake package, C example built against it;
#      then, in the background while 4, 5 and the Node suite run, the quick subset of the
#      fault-injection suite (tests/faults), local clusters included, on servers of its own
#   4. the security suite (roles, TLS, secrets, injection) and a brief libFuzzer run
#   5. ABI, ThreadSanitizer, valgrind; FFI: PHP (FFI + PDO, the documents' DataStore) and Python
#      ctypes against liboutbox.so; the operator console (`outbox console`): its HTTP API, and
#      Debian's Chromium headless driving it
#   6. the Node package (node --test); the fault suite is awaited; the Python package (pytest)
#   7. the benchmark harness: bench/run --quick, checked for numbers (not for speed), in the
#      background while 8 runs (both mostly wait; the quick run's figures are not judged for speed)
#   8. the demo (scripts/demo.sh), checked: every event applied exactly once by every subscriber
# Each suite runs as a process of its own under `set -e` with a time limit (scripts/suites.sh,
# scripts/suite_lib.sh), after a self-test of that machinery (tests/runner/selftest.sh).
# Exits non-zero when any suite fails. Services started here are stopped again at the end.
#
#   scripts/test.sh              every suite, in the order above
#   scripts/test.sh SUITE...     only the named suites (in the order above), e.g. `scripts/test.sh python`
#                                or `scripts/test.sh cxx security`; first the builds they need that no
#                                named suite makes (`scripts/build.sh release` for faults, abi, valgrind,
#                                php, ctypes, console; `scripts/build.sh asan` for security), and the services
#                                only when a named suite needs them (runner and fuzz do not)
#   scripts/test.sh --list       the suites' names, one a line, with what each runs
# An unknown suite name is a usage error (exit 2).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT
cd "$root"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,28p' "$0"; exit 0; fi

# Each suite in a process of its own with a time limit (scripts/suite_lib.sh): every step of it
# counts, and a hang fails it in minutes. The limits are a few times a normal run on 2 cores.
# The table of suites, in the order they run: short name (the function without _suite), title,
# time limit in seconds, and for a suite that runs in the background the suite it is awaited
# before (or at the end, when that one does not run; `end`: at the end). The short name is what
# `scripts/test.sh SUITE` takes. The fault suite mostly waits on its own servers and clusters (half the CPU idle),
# so the suites after it up to Node's run meanwhile; its bounds are tens of seconds, and it runs on
# servers of its own.
suite_table=(
  "runner|test runner: failing steps, time limits, empty filters, cited reports, sizes|120"
  "cxx|C++ (GoogleTest, ASan+UBSan)|1200"
  "installed|installed library (pkg-config, find_package, C example)|900"
  "faults|fault injection, quick subset, clusters included (tests/faults/run --quick)|900|python"
  "security|security: least privilege, TLS, secrets, injection|300"
  "fuzz|fuzz (brief, libFuzzer)|300"
  "abi|ABI: doc comments, exported symbols, libabigail baseline|180"
  "tsan|threads under ThreadSanitizer|900"
  "valgrind|C examples under valgrind (memcheck)|300"
  "php|PHP package through FFI (DataStore, subscriber, php-cgi, Composer)|120"
  "ctypes|Python ctypes against liboutbox.so|120"
  "console|operator console: HTTP API, and Chromium headless through list, redrive and skip|300"
  "node|Node: the npm tarball packed and installed, node --test against it|900"
  "python|Python (pytest)|900"
  "bench|bench: bench/run --quick produces every figure|600|end"
  "demo|demo: the documents' system end to end (PHP, Python, C writers; Node, Python, C subscribers)|300"
)
# What a suite needs that an earlier suite of the full run makes: the release build and _install/
# (scripts/build.sh release, made by `installed`), the sanitizer build (scripts/build.sh asan, made
# by `cxx`). Every other suite builds and installs what it uses itself.
needs_release=" faults abi valgrind php ctypes console "
needs_asan=" security "
# Suites that use no PostgreSQL or RabbitMQ.
no_services=" runner fuzz "
# Suites whose consumer tests kill a node of a RabbitMQ cluster (tests/support/cluster_node.sh).
needs_cluster=" cxx python node "

if [[ "${1:-}" == "--list" ]]; then
  for row in "${suite_table[@]}"; do
    IFS='|' read -r short title _ until <<<"$row"
    case $until in
      "") when="" ;;
      end) when=" (in the background, awaited at the end)" ;;
      *) when=" (in the background, awaited before $until)" ;;
    esac
    printf '%-10s %s%s\n' "$short" "$title" "$when"
  done
  exit 0
fi

# The suites to run: every one, or those named (each at most once, in the table's order).
declare -A named=()
for arg in "$@"; do
  known=0
  for row in "${suite_table[@]}"; do
    IFS='|' read -r short _ <<<"$row"
    if [[ "$arg" == "$short" || "$arg" == "${short}_suite" ]]; then named[$short]=1; known=1; fi
  done
  if [[ $known == 0 ]]; then
    echo "scripts/test.sh: unknown suite '$arg'; the suites are: $(for row in "${suite_table[@]}"; do printf '%s ' "${row%%|*}"; done)" >&2
    echo "usage: scripts/test.sh [--list | SUITE...]" >&2
    exit 2
  fi
done
selected=()
for row in "${suite_table[@]}"; do
  short=${row%%|*}
  if [[ $# == 0 || -n "${named[$short]:-}" ]]; then selected+=("$row"); fi
done

want_services=1
if [[ $# -gt 0 ]]; then
  want_services=0
  for row in "${selected[@]}"; do [[ "$no_services" == *" ${row%%|*} "* ]] || want_services=1; done
fi

"$root/scripts/deps.sh"
started_here=0
if [[ $want_services == 1 ]]; then
  if ! "$root/scripts/services.sh" status >/dev/null 2>&1; then started_here=1; fi
  "$root/scripts/services.sh" up
  eval "$("$root/scripts/services.sh" env)"
  export OUTBOX_PG_URL OUTBOX_AMQP_URL
fi

# The 3-node RabbitMQ cluster of the consumer tests (scripts/cluster.sh, RabbitMQ alone), started in
# the background now and awaited before the first suite that uses it; stopped at the end. Its ports
# are 100 above the fault suite's clusters (OUTBOX_CLUSTER_BASE_PORT, default 27000).
export OUTBOX_TEST_CLUSTER_DIR=$OUTBOX_RUN_DIR/test-cluster
export OUTBOX_TEST_CLUSTER_BASE_PORT=${OUTBOX_TEST_CLUSTER_BASE_PORT:-$((${OUTBOX_CLUSTER_BASE_PORT:-27000} + 100))}
test_cluster() {
  OUTBOX_CLUSTER_DIR=$OUTBOX_TEST_CLUSTER_DIR OUTBOX_CLUSTER_BASE_PORT=$OUTBOX_TEST_CLUSTER_BASE_PORT \
    OUTBOX_CLUSTER_SERVICES=rabbitmq "$root/scripts/cluster.sh" "$@"
}
cluster_pid=""
for row in "${selected[@]}"; do
  if [[ "$needs_cluster" == *" ${row%%|*} "* ]]; then
    test_cluster up >"$OUTBOX_RUN_DIR/test-cluster-up.log" 2>&1 &
    cluster_pid=$!
    break
  fi
done
await_cluster() {
  [[ -n "$cluster_pid" ]] || return 0
  if ! wait "$cluster_pid"; then
    tail -30 "$OUTBOX_RUN_DIR/test-cluster-up.log" >&2
    outbox_die "the test cluster did not start (scripts/cluster.sh up, log above)"
  fi
  cluster_pid=""
  eval "$(test_cluster env | grep '^export OUTBOX_CLUSTER_AMQP_URL=')"
  export OUTBOX_TEST_CLUSTER_AMQP_URL=$OUTBOX_CLUSTER_AMQP_URL
}

cleanup() {
  # Background suites still running (an interrupt) are stopped before their servers go.
  if declare -p suite_bg_pid >/dev/null 2>&1 && [[ ${#suite_bg_pid[@]} -gt 0 ]]; then
    kill -TERM "${suite_bg_pid[@]}" 2>/dev/null || true
    wait "${suite_bg_pid[@]}" 2>/dev/null || true
  fi
  if [[ -n "$cluster_pid" ]]; then wait "$cluster_pid" || true; fi
  if [[ -d "$OUTBOX_TEST_CLUSTER_DIR" && -z "${OUTBOX_KEEP_SERVICES:-}" ]]; then test_cluster down >/dev/null 2>&1 || true; fi
  if [[ $started_here == 1 && -z "${OUTBOX_KEEP_SERVICES:-}" ]]; then "$root/scripts/services.sh" down || true; fi
}
trap cleanup EXIT

# shellcheck source=scripts/suite_lib.sh
source "$root/scripts/suite_lib.sh"
suites=$root/scripts/suites.sh

# Only named suites: first the builds they need that no suite named before them makes.
if [[ $# -gt 0 ]]; then
  release=0 asan=0
  for row in "${selected[@]}"; do
    short=${row%%|*}
    [[ $short == installed ]] && release=2   # it builds release itself, before the suites after it
    [[ $short == cxx ]] && asan=2
    [[ "$needs_release" == *" $short "* && $release == 0 ]] && release=1
    [[ "$needs_asan" == *" $short "* && $asan == 0 ]] && asan=1
  done
  if [[ $release == 1 ]]; then suite "build: scripts/build.sh release (for the named suites)" 900 "$suites" release_build; fi
  if [[ $asan == 1 ]]; then suite "build: scripts/build.sh asan (for the named suites)" 1200 "$suites" asan_build; fi
fi

declare -A await_before=() # a suite's short name -> the title of the background suite awaited before it
for row in "${selected[@]}"; do
  IFS='|' read -r short title limit until <<<"$row"
  if [[ -n "${await_before[$short]:-}" ]]; then suite_await "${await_before[$short]}"; fi
  if [[ "$needs_cluster" == *" $short "* ]]; then await_cluster; fi
  if [[ -n "$until" ]]; then
    await_before[$until]=$title
    suite_start "$title" "$limit" "$suites" "${short}_suite"
  else
    suite "$title" "$limit" "$suites" "${short}_suite"
  fi
done
suite_await_all

suite_summary
