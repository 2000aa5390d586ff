# Sourced by scripts/test.sh (and tests/runner/selftest.sh): runs suites and tallies them.
#   suite NAME LIMIT_S FILE FUNCTION   runs FUNCTION of FILE through scripts/run_suite.sh under a time
#                                     limit; PASS only when it exits 0 in time, FAIL otherwise
#   suite_start NAME LIMIT_S FILE FUNCTION
#                                     the same, started in the background (its output kept in a file):
#                                     for a suite that mostly waits on its own servers, so the suites
#                                     run meanwhile use the CPU it leaves idle
#   suite_await NAME                  waits for a suite that suite_start started, prints its output and
#                                     tallies it as suite does
#   suite_await_all                   the same for every one still running
#   suite_summary                     prints one line per suite and "N passed, N failed"; its status
#                                     is 0 only when every suite passed and at least one ran (a suite
#                                     started and never awaited counts as failed)
# Each suite runs in a process of its own (never inside `if`, which would turn `set -e` off).
declare -a suite_results=()
declare -a suite_failures=()
suite_failed=0
suite_run_suite="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)/run_suite.sh"

suite() { # NAME LIMIT_S FILE FUNCTION
  local name=$1 limit=$2 file=$3 fn=$4 start=$SECONDS rc=0 errexit=0
  [[ $- == *e* ]] && errexit=1
  echo "=== suite: $name (time limit $limit s)"
  set +e
  # timeout runs the suite in a process group of its own and, at the limit, sends it SIGTERM, then
  # SIGKILL 20 s later: a hang anywhere in it fails this suite in minutes.
  # Its output goes to a file that tail echoes while it runs, so the summary can name what failed in
  # it. (Not a pipe: a server the suite leaves running may hold its output open, and the suite must
  # not wait for that; tail ends once the suite has.)
  local log suite_pid tail_pid
  log=$(mktemp)
  timeout --kill-after=20 "$limit" "$suite_run_suite" "$file" "$fn" >"$log" 2>&1 </dev/null &
  suite_pid=$!
  # A command started with & ignores Ctrl-C, so an interrupt is passed on to the suite by hand.
  trap 'kill -TERM "$suite_pid" "${suite_bg_pid[@]}" 2>/dev/null; exit 130' INT TERM
  tail -n +1 -s 0.2 -f --pid="$suite_pid" "$log" &
  tail_pid=$!
  wait "$suite_pid"
  rc=$?
  wait "$tail_pid"
  suite_bg_trap
  [[ $errexit == 1 ]] && set -e
  suite_tally "$name" "$limit" "$rc" $((SECONDS - start)) "$log"
}

# Suites started in the background, by name: their pid (of timeout), start time, limit and log.
declare -A suite_bg_pid=() suite_bg_start=() suite_bg_limit=() suite_bg_log=()

# While background suites run, an interrupt stops them too.
suite_bg_trap() {
  if [[ ${#suite_bg_pid[@]} -gt 0 ]]; then
    trap 'kill -TERM "${suite_bg_pid[@]}" 2>/dev/null; exit 130' INT TERM
  else
    trap - INT TERM
  fi
}

suite_start() { # NAME LIMIT_S FILE FUNCTION
  local name=$1 limit=$2 file=$3 fn=$4 log
  echo "=== suite: $name (time limit $limit s; in the background, its output when it is awaited)"
  log=$(mktemp)
  timeout --kill-after=20 "$limit" "$suite_run_suite" "$file" "$fn" >"$log" 2>&1 </dev/null &
  suite_bg_pid[$name]=$!
  suite_bg_start[$name]=$SECONDS
  suite_bg_limit[$name]=$limit
  suite_bg_log[$name]=$log
  suite_bg_trap
}

suite_await() { # NAME
  local name=$1 rc=0 errexit=0
  [[ -n "${suite_bg_pid[$name]:-}" ]] || { echo "suite_await: no suite '$name' was started" >&2; return 2; }
  [[ $- == *e* ]] && errexit=1
  set +e
  wait "${suite_bg_pid[$name]}"
  rc=$?
  [[ $errexit == 1 ]] && set -e
  echo "=== output of the background suite: $name"
  cat "${suite_bg_log[$name]}"
  suite_tally "$name" "${suite_bg_limit[$name]}" "$rc" $((SECONDS - suite_bg_start[$name])) "${suite_bg_log[$name]}"
  unset "suite_bg_pid[$name]" "suite_bg_start[$name]" "suite_bg_limit[$name]" "suite_bg_log[$name]"
  suite_bg_trap
}

suite_await_all() {
  local name
  for name in "${!suite_bg_pid[@]}"; do suite_await "$name"; done
}

# PASS or FAIL for a suite that ended with status RC after TOOK seconds; a failure's lines kept.
suite_tally() { # NAME LIMIT_S RC TOOK LOG
  local name=$1 limit=$2 rc=$3 took=$4 log=$5
  if [[ $rc == 0 ]]; then
    suite_results+=("PASS  $name ($took s)")
  else
    local why="exit $rc"
    [[ $rc == 124 || $rc == 137 ]] && why="timed out after $limit s"
    suite_results+=("FAIL  $name ($took s, $why)")
    suite_failed=$((suite_failed + 1))
    suite_failures+=("--- what failed in: $name")
    mapfile -t -O "${#suite_failures[@]}" suite_failures < <(suite_failure_lines "$log")
  fi
  rm -f "$log"
}

# The lines of a suite's output that say what failed: GoogleTest's failed tests and the places of
# their failures, pytest's and node --test's failed tests, our scripts' FAIL lines; at most 25.
suite_failure_lines() { # LOG
  grep -E '^\[  FAILED  \] [A-Za-z]|: Failure$|^FAILED |^not ok |^FAIL  |^  (FAIL|not ok)\b|Test +#[0-9]+: .*\*\*\*(Failed|Timeout)' "$1" |
    grep -v 'listed below' | awk '!seen[$0]++' | head -25 || true
}

suite_summary() {
  local name
  for name in "${!suite_bg_pid[@]}"; do
    kill -TERM "${suite_bg_pid[$name]}" 2>/dev/null
    suite_results+=("FAIL  $name (started in the background, never awaited)")
    suite_failed=$((suite_failed + 1))
  done
  echo
  echo "=== summary"
  [[ ${#suite_results[@]} -gt 0 ]] && printf '%s\n' "${suite_results[@]}"
  [[ ${#suite_failures[@]} -gt 0 ]] && printf '%s\n' "${suite_failures[@]}"
  echo "$(( ${#suite_results[@]} - suite_failed )) passed, $suite_failed failed"
  [[ ${#suite_results[@]} -gt 0 && $suite_failed == 0 ]]
}
