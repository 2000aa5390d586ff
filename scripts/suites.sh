# The suites of scripts/test.sh, one function each. Not run directly: scripts/test.sh runs each
# through scripts/run_suite.sh (set -euo pipefail: every step counts) under a time limit, e.g.
#   scripts/run_suite.sh scripts/suites.sh abi_suite
# Expects the services up and OUTBOX_PG_URL / OUTBOX_AMQP_URL exported, as scripts/test.sh does.
# shellcheck shell=bash
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT

sanitizer_env() {
  # LeakSanitizer is on; libpq/OpenSSL keep process-lifetime allocations that are not leaks of ours.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LSAN_OPTIONS="suppressions=$root/tests/lsan.supp"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
}

# The test runner itself: a failing first step fails a suite, a hang fails in time, an empty
# GoogleTest filter fails (tests/runner/selftest.sh); every report the README, docs/ and
# bench/README.md cite names the commit it measured.
runner_suite() {
  "$root/tests/runner/selftest.sh"
  python3 "$root/tests/runner/check_cited_reports.py" "$root/README.md" "$root"/docs/*.md "$root/bench/README.md"
  # One idea a file, one job a function: no function in core/, capi/, cli/ over 120 lines, no source
  # file outside tests/ over 1,000.
  python3 "$root/tests/runner/check_sizes.py"
}

# The builds that `scripts/test.sh SUITE...` makes first when a named suite needs one that no suite
# named before it makes (in the full run, installed_suite makes the release build and cxx_suite
# the sanitizer build).
release_build() {
  "$root/scripts/build.sh" release
}

asan_build() {
  "$root/scripts/build.sh" asan
}

# Each integration test is a ctest test of its own (tests/CMakeLists.txt): they run side by side.
cxx_suite() {
  "$root/scripts/build.sh" asan
  sanitizer_env
  ctest --test-dir "$root/build/asan" --output-on-failure --no-tests=error --timeout 600 -LE security \
    -j "${OUTBOX_CTEST_JOBS:-3}"
}

# Least-privilege roles, TLS to both servers, no password in any output, injection strings
# (tests/security, built by cxx_suite's sanitizer build).
security_suite() {
  sanitizer_env
  ctest --test-dir "$root/build/asan" --output-on-failure --no-tests=error --timeout 300 -L security
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
  # Not a unity build: the one build of the test command that compiles every core/ and capi/ file
  # alone, so a file that misses an include of its own fails here.
  cmake -S "$root" -B "$root/build/tsan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOX_TSAN=ON -DOUTBOX_BUILD_CLI=OFF >/dev/null
  # Only the C ABI tests' files that hold the tests run here (tests/CMakeLists.txt).
  cmake --build "$root/build/tsan" --target outbox_capi_threads_it -j "$(nproc)"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    "$root/scripts/gtest_each.sh" "$root/build/tsan/tests/outbox_capi_threads_it" \
    '*DistinctHandlesOnDistinctThreadsAtOnce*' '*FourThreads*' '*StepsDrainABacklogEachStepRecordingItsOutcomes*'
}

abi_suite() {
  python3 "$root/tests/abi/check_docs.py" "$root/capi/include/outbox.h"
  "$root/tests/abi/check_symbols.sh" "$root/build/release/capi/liboutbox.so"
  "$root/tests/abi/check_abi.sh" "$root/build/release/capi/liboutbox.so"
}

faults_suite() {
  python3 "$root/tests/faults/selftest.py"
  # The quick subset of the fault-injection suite (tests/faults/README.md) on the release tree just
  # built: its own PostgreSQL and RabbitMQ (and for faults 9 and 12 the clusters of scripts/cluster.sh),
  # in a network namespace of its own when run as root.
  "$root/tests/faults/run" --quick --build-dir "$root/build/release"
}

valgrind_suite() {
  "$root/tests/install/valgrind_examples.sh" "$root/_install"
}

php_suite() {
  # The package (php/): header drift, the PHP checks, the library search, php-cgi with the README's
  # FPM/CGI setup and with FFI off, and an offline Composer install (tests/php/run.sh).
  "$root/tests/php/run.sh"
}

ctypes_suite() {
  python3 "$root/tests/ffi/ctypes_test.py" "$root/_install/lib/liboutbox.so"
}

# The operator console (`outbox console`): its HTTP API (tokens, roles, no state change through GET,
# CSRF, the actions and their log lines) and Debian's Chromium headless through Selenium signing in,
# listing, redriving and skipping against a real subscriber that parks aggregates (tests/console/run.sh).
console_suite() {
  "$root/tests/console/run.sh"
}

node_suite() {
  "$root/scripts/test_node.sh"
  # The tarball test_node.sh packed, installed and loaded with libpq, librabbitmq and libcjson
  # hidden: the prebuild carries them (about 10 s).
  "$root/tests/node-dist/without_libs.sh"
}

# The Python distribution built once (scripts/build_python_dist.sh): the suite runs on the wheel
# compiled from the sdist; test_dist.py runs the auditwheel-repaired wheel with libpq, librabbitmq
# and libcjson hidden (tests/python-dist/without_libs.sh).
python_suite() {
  "$root/scripts/test_python.sh"
}

bench_suite() {
  # After the Node and Python suites: their package installs are what the bindings figures use.
  # The quick report is deleted first, so the check below reads this run's figures or fails.
  rm -rf "$root/bench/results/quick.json" "$root/bench/results/quick.md" "$root/bench/results/quick"
  "$root/bench/run" --quick
  python3 "$root/bench/check_results.py" "$root/bench/results/quick.json" "$root/bench/results/quick"
}

# The demo, the documents' system end to end (scripts/demo.sh): PHP, Python and C writers, the relay,
# Node (amqplib), Python and C subscribers, forced redeliveries; its check passes, and fails with a
# planted break, on that run's evidence and live (tests/demo/run.sh). Runs last: it reuses the
# release install, the venv of python_suite and the addon node_suite built.
demo_suite() {
  "$root/tests/demo/run.sh"
}
