#!/usr/bin/env bash
# Runs every test suite against real, throwaway PostgreSQL and RabbitMQ:
#   1. installs missing packages, starts the local services
#   2. C++ unit + integration suites (GoogleTest, sanitizer build, via ctest), the security
#      suite (roles, TLS, secrets, injection) and a brief libFuzzer run
#   3. the installed library: header, pkg-config and CMake package, C example built against it;
#      the quick subset of the fault-injection suite (tests/faults)
#   4. FFI: PHP (FFI + PDO, the documents' DataStore) and Python ctypes against liboutbox.so
#   5. the Node package (node --test) and the Python package (pytest)
#   6. the benchmark harness: bench/run --quick, checked for numbers (not for speed)
# Exits non-zero when any suite fails. Services started here are stopped again at the end.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT
cd "$root"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,7p' "$0"; exit 0; fi

"$root/scripts/deps.sh"
started_here=0
if ! "$root/scripts/services.sh" status >/dev/null 2>&1; then started_here=1; fi
"$root/scripts/services.sh" up
eval "$("$root/scripts/services.sh" env)"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
cleanup() { if [[ $started_here == 1 && -z "${OUTBOX_KEEP_SERVICES:-}" ]]; then "$root/scripts/services.sh" down || true; fi; }
trap cleanup EXIT

declare -a results=()
failed=0
suite() { # name command...
  local name=$1; shift
  echo "=== suite: $name"
  local start=$SECONDS
  if "$@"; then results+=("PASS  $name ($((SECONDS - start)) s)")
  else results+=("FAIL  $name ($((SECONDS - start)) s)"); failed=$((failed + 1)); fi
}

cxx_suite() {
  "$root/scripts/build.sh" asan
  # LeakSanitizer is on; libpq/OpenSSL keep process-lifetime allocations that are not leaks of ours.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/build/asan" --output-on-failure --timeout 600 -LE security
}

# Least-privilege roles, TLS to both servers, no password in any output, injection strings
# (tests/security, built by cxx_suite's sanitizer build).
security_suite() {
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/build/asan" --output-on-failure --timeout 300 -L security
}

# libFuzzer targets (clang-14), a few seconds each; the long run is tests/fuzz/run --seconds N.
fuzz_suite() {
  "$root/tests/fuzz/run" --seconds "${OUTBOX_FUZZ_SECONDS:-4}"
}

installed_suite() {
  "$root/scripts/build.sh" release
  "$root/tests/install/check_installed.sh" "$root/_install"
}

tsan_suite() {
  cmake -S "$root" -B "$root/build/tsan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOX_TSAN=ON -DOUTBOX_BUILD_CLI=OFF >/dev/null
  cmake --build "$root/build/tsan" --target outbox_capi_it -j "$(nproc)"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    "$root/build/tsan/tests/outbox_capi_it" --gtest_filter='*DistinctHandlesOnDistinctThreadsAtOnce*:*FourThreads*:*StepsDrainABacklogWithMarksOverlapping*'
}

abi_suite() {
  python3 "$root/tests/abi/check_docs.py" "$root/capi/include/outbox.h"
  "$root/tests/abi/check_symbols.sh" "$root/build/release/capi/liboutbox.so"
  "$root/tests/abi/check_abi.sh" "$root/build/release/capi/liboutbox.so"
}

faults_suite() {
  # The quick subset of the fault-injection suite (tests/faults/README.md) on the release tree just
  # built: its own PostgreSQL and RabbitMQ, in a network namespace of its own when run as root.
  "$root/tests/faults/run" --quick --build-dir "$root/build/release"
}

valgrind_suite() {
  "$root/tests/install/valgrind_examples.sh" "$root/_install"
}

php_suite() {
  OUTBOX_LIB="$root/_install/lib/liboutbox.so" php "$root/tests/php/outbox_test.php"
}

ctypes_suite() {
  python3 "$root/tests/ffi/ctypes_test.py" "$root/_install/lib/liboutbox.so"
}

bench_suite() {
  # After the Node and Python suites: their package installs are what the bindings figures use.
  "$root/bench/run" --quick
  python3 "$root/bench/check_results.py" "$root/bench/results/quick.json" "$root/bench/results/quick"
}

suite "C++ (GoogleTest, ASan+UBSan)" cxx_suite
suite "security: least privilege, TLS, secrets, injection" security_suite
suite "fuzz (brief, libFuzzer)" fuzz_suite
suite "installed library (pkg-config, find_package, C example)" installed_suite
suite "fault injection, quick subset (tests/faults/run --quick)" faults_suite
suite "ABI: doc comments, exported symbols, libabigail baseline" abi_suite
suite "threads under ThreadSanitizer" tsan_suite
suite "C examples under valgrind (memcheck)" valgrind_suite
suite "PHP through FFI (DataStore, subscriber)" php_suite
suite "Python ctypes against liboutbox.so" ctypes_suite
suite "Node (node --test)" "$root/scripts/test_node.sh"
suite "Python (pytest)" "$root/scripts/test_python.sh"
suite "bench: bench/run --quick produces every figure" bench_suite

echo
echo "=== summary"
printf '%s\n' "${results[@]}"
passed=$(( ${#results[@]} - failed ))
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
