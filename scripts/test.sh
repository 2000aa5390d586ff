#!/usr/bin/env bash
# Runs every test suite against real, throwaway PostgreSQL and RabbitMQ:
#   1. installs missing packages, starts the local services
#   2. C++ unit + integration suites (GoogleTest, sanitizer build, via ctest), the security
#      suite (roles, TLS, secrets, injection) and a brief libFuzzer run
#   3. the installed library: header, pkg-config and CMake package, C example built against it;
#      the quick subset of the fault-injection suite (tests/faults), local clusters included
#   4. FFI: PHP (FFI + PDO, the documents' DataStore) and Python ctypes against liboutbox.so
#   5. the Node package (node --test) and the Python package (pytest)
#   6. the benchmark harness: bench/run --quick, checked for numbers (not for speed)
#   7. the demo (scripts/demo.sh), checked: every event applied exactly once by every subscriber
# Each suite runs as a process of its own under `set -e` with a time limit (scripts/suites.sh,
# scripts/suite_lib.sh), after a self-test of that machinery (tests/runner/selftest.sh).
# Exits non-zero when any suite fails. Services started here are stopped again at the end.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT
cd "$root"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,14p' "$0"; exit 0; fi

"$root/scripts/deps.sh"
started_here=0
if ! "$root/scripts/services.sh" status >/dev/null 2>&1; then started_here=1; fi
"$root/scripts/services.sh" up
eval "$("$root/scripts/services.sh" env)"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
cleanup() { if [[ $started_here == 1 && -z "${OUTBOX_KEEP_SERVICES:-}" ]]; then "$root/scripts/services.sh" down || true; fi; }
trap cleanup EXIT

# shellcheck source=scripts/suite_lib.sh
source "$root/scripts/suite_lib.sh"
suites=$root/scripts/suites.sh

# Each suite in a process of its own with a time limit (scripts/suite_lib.sh): every step of it
# counts, and a hang fails it in minutes. The limits are a few times a normal run on 2 cores.
suite "test runner: failing steps, time limits, empty filters, cited reports, sizes" 120 "$suites" runner_suite
suite "C++ (GoogleTest, ASan+UBSan)" 1200 "$suites" cxx_suite
suite "security: least privilege, TLS, secrets, injection" 300 "$suites" security_suite
suite "fuzz (brief, libFuzzer)" 300 "$suites" fuzz_suite
suite "installed library (pkg-config, find_package, C example)" 900 "$suites" installed_suite
suite "fault injection, quick subset, clusters included (tests/faults/run --quick)" 900 "$suites" faults_suite
suite "ABI: doc comments, exported symbols, libabigail baseline" 180 "$suites" abi_suite
suite "threads under ThreadSanitizer" 900 "$suites" tsan_suite
suite "C examples under valgrind (memcheck)" 300 "$suites" valgrind_suite
suite "PHP package through FFI (DataStore, subscriber, php-cgi, Composer)" 120 "$suites" php_suite
suite "Python ctypes against liboutbox.so" 120 "$suites" ctypes_suite
suite "Node: the npm tarball packed and installed, node --test against it" 900 "$suites" node_suite
suite "Python (pytest)" 900 "$suites" python_suite
suite "bench: bench/run --quick produces every figure" 600 "$suites" bench_suite
suite "demo: the documents' system end to end (PHP, Python, C writers; Node, Python, C subscribers)" 300 "$suites" demo_suite

suite_summary
