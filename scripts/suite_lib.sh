# Sourced by scripts/test.sh (and tests/runner/selftest.sh): runs suites and tallies them.
#   suite NAME LIMIT_S FILE FUNCTION   runs FUNCTION of FILE through scripts/run_suite.sh under a time
#                                     limit; PASS only when it exits 0 in time, FAIL otherwise
#   suite_summary                     prints one line per suite and "N passed, N failed"; its status
#                                     is 0 only when every suite passed and at least one ran
# Each suite runs in a process of its own (never inside `if`, which would turn `set -e` off).
declare -a suite_results=()
suite_failed=0
suite_run_suite="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)/run_suite.sh"

suite() { # NAME LIMIT_S FILE FUNCTION
  local name=$1 limit=$2 file=$3 fn=$4 start=$SECONDS rc=0 errexit=0
  [[ $- == *e* ]] && errexit=1
  echo "=== suite: $name (time limit $limit s)"
  set +e
  # timeout runs the suite in a process group of its own and, at the limit, sends it SIGTERM, then
  # SIGKILL 20 s later: a hang anywhere in it fails this suite in minutes.
  timeout --kill-after=20 "$limit" "$suite_run_suite" "$file" "$fn"
  rc=$?
  [[ $errexit == 1 ]] && set -e
  local took=$((SECONDS - start))
  if [[ $rc == 0 ]]; then
    suite_results+=("PASS  $name ($took s)")
  else
    local why="exit $rc"
    [[ $rc == 124 || $rc == 137 ]] && why="timed out after $limit s"
    suite_results+=("FAIL  $name ($took s, $why)")
    suite_failed=$((suite_failed + 1))
  fi
}

suite_summary() {
  echo
  echo "=== summary"
  [[ ${#suite_results[@]} -gt 0 ]] && printf '%s\n' "${suite_results[@]}"
  echo "$(( ${#suite_results[@]} - suite_failed )) passed, $suite_failed failed"
  [[ ${#suite_results[@]} -gt 0 && $suite_failed == 0 ]]
}
