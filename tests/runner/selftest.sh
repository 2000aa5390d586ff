#!/usr/bin/env bash
# Checks the test command's own machinery (scripts/suite_lib.sh, run_suite.sh, gtest_each.sh) on
# fake suites, so that it cannot report PASS for work it did not check:
#   - a failing FIRST step of a multi-step suite fails it, and the steps after it do not run
#     (also a failure inside a pipeline, a `$(...)`, or a function the suite calls);
#   - a suite over its time limit fails in time, its children killed;
#   - a GoogleTest filter that selects no test fails;
#   - the summary fails when any suite failed, and when none ran;
#   - the same for suites started in the background (suite_start / suite_await): a failing or
#     hung one fails, one never awaited fails, and they run while the caller goes on.
set -euo pipefail
here="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
root="$(cd -- "$here/../.." && pwd -P)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
problems=0
check() { # description expected actual
  if [[ "$2" == "$3" ]]; then echo "ok    $1"; else echo "FAIL  $1: expected '$2', got '$3'"; problems=$((problems + 1)); fi
}

cat >"$tmp/fake_suites.sh" <<FAKE
marker=$tmp/marker
helper() { false; echo helper-went-on >>"\$marker"; }
first_step_fails() { false; echo after-first-step >>"\$marker"; true; }
middle_step_fails() { true; ls /nonexistent-outbox-selftest 2>/dev/null; echo after-middle >>"\$marker"; }
pipeline_fails() { false | cat; echo after-pipeline >>"\$marker"; }
substitution_fails() { local x; x=\$(false; echo y); echo "after-subst \$x" >>"\$marker"; }
called_function_fails() { helper; echo after-helper >>"\$marker"; }
all_steps_pass() { true; echo one >/dev/null; true; }
hangs() { sleep 300 & sleep 300; }
FAKE

(
  # shellcheck source=scripts/suite_lib.sh
  source "$root/scripts/suite_lib.sh"
  for fn in first_step_fails middle_step_fails pipeline_fails substitution_fails called_function_fails all_steps_pass; do
    suite "$fn" 30 "$tmp/fake_suites.sh" "$fn" >"$tmp/$fn.out" 2>&1
  done
  start=$SECONDS
  suite hangs 3 "$tmp/fake_suites.sh" hangs >"$tmp/hangs.out" 2>&1
  echo $((SECONDS - start)) >"$tmp/hang_seconds"
  printf '%s\n' "${suite_results[@]}" >"$tmp/results"
  if suite_summary >"$tmp/summary" 2>&1; then echo 0 >"$tmp/summary_rc"; else echo 1 >"$tmp/summary_rc"; fi
)
results=$(cat "$tmp/results")
for fn in first_step_fails middle_step_fails pipeline_fails substitution_fails called_function_fails; do
  check "a suite whose step fails ($fn) is FAIL" "FAIL" "$(grep "^[A-Z]*  $fn " <<<"$results" | cut -c1-4)"
done
check "a suite whose steps all pass is PASS" "PASS" "$(grep '^[A-Z]*  all_steps_pass ' <<<"$results" | cut -c1-4)"
check "no step after a failed one ran" "" "$(cat "$tmp/marker" 2>/dev/null || true)"
check "a suite over its time limit is FAIL, saying so" "FAIL  hangs" "$(grep -o '^FAIL  hangs' <<<"$results")"
check "the time-limit failure names the limit" "timed out after 3 s" "$(grep -o 'timed out after 3 s' <<<"$results")"
check "a hung suite is stopped within 10 s of a 3 s limit" "yes" "$( (( $(cat "$tmp/hang_seconds") <= 10 )) && echo yes || echo no)"
check "the summary fails when a suite failed" "1" "$(cat "$tmp/summary_rc")"
check "the summary counts" "1 passed, 6 failed" "$(tail -1 "$tmp/summary")"
(
  source "$root/scripts/suite_lib.sh"
  if suite_summary >/dev/null 2>&1; then echo 0; else echo 1; fi
) >"$tmp/empty_rc"
check "the summary fails when no suite ran" "1" "$(cat "$tmp/empty_rc")"
(
  source "$root/scripts/suite_lib.sh"
  suite all_steps_pass 30 "$tmp/fake_suites.sh" all_steps_pass >/dev/null 2>&1
  if suite_summary >/dev/null 2>&1; then echo 0; else echo 1; fi
) >"$tmp/pass_rc"
check "the summary passes when every suite passed" "0" "$(cat "$tmp/pass_rc")"

# Background suites: two run side by side while the caller goes on; a failing one and a hung one
# fail; one started and never awaited fails the summary.
(
  source "$root/scripts/suite_lib.sh"
  start=$SECONDS
  suite_start bg_pass 30 "$tmp/fake_suites.sh" all_steps_pass >/dev/null 2>&1
  suite_start bg_fails 30 "$tmp/fake_suites.sh" first_step_fails >/dev/null 2>&1
  suite_start bg_hangs 3 "$tmp/fake_suites.sh" hangs >/dev/null 2>&1
  echo $((SECONDS - start)) >"$tmp/bg_start_seconds"
  suite_await bg_pass >/dev/null 2>&1
  suite_await_all >"$tmp/bg_await.out" 2>&1
  echo $((SECONDS - start)) >"$tmp/bg_seconds"
  printf '%s\n' "${suite_results[@]}" >"$tmp/bg_results"
  if suite_summary >/dev/null 2>&1; then echo 0; else echo 1; fi >"$tmp/bg_rc"
  suite_start bg_forgotten 30 "$tmp/fake_suites.sh" all_steps_pass >/dev/null 2>&1
  suite_results=() suite_failed=0
  if suite_summary >"$tmp/bg_forgotten" 2>&1; then echo 0; else echo 1; fi >"$tmp/bg_forgotten_rc"
)
bg=$(cat "$tmp/bg_results")
check "starting background suites does not wait for them" "yes" "$( (( $(cat "$tmp/bg_start_seconds") <= 1 )) && echo yes || echo no)"
check "a passing background suite is PASS" "PASS" "$(grep '^[A-Z]*  bg_pass ' <<<"$bg" | cut -c1-4)"
check "a failing background suite is FAIL" "FAIL" "$(grep '^[A-Z]*  bg_fails ' <<<"$bg" | cut -c1-4)"
check "a hung background suite is FAIL, timed out" "FAIL  bg_hangs" "$(grep -o '^FAIL  bg_hangs' <<<"$bg")"
check "a hung background suite is stopped within 10 s of a 3 s limit" "yes" "$( (( $(cat "$tmp/bg_seconds") <= 10 )) && echo yes || echo no)"
check "the summary fails when a background suite failed" "1" "$(cat "$tmp/bg_rc")"
check "a background suite's output is printed when awaited" "yes" "$(grep -q '=== output of the background suite: bg_fails' "$tmp/bg_await.out" && echo yes || echo no)"
check "a background suite never awaited fails the summary" "1" "$(cat "$tmp/bg_forgotten_rc")"
check "the summary names the suite never awaited" "yes" "$(grep -q 'FAIL  bg_forgotten (started in the background, never awaited)' "$tmp/bg_forgotten" && echo yes || echo no)"

# A fake GoogleTest binary: lists two tests of FakeTest, runs whatever it is asked.
cat >"$tmp/fake_gtest" <<'FAKE'
#!/usr/bin/env bash
filter=; list=0
for a in "$@"; do case $a in --gtest_filter=*) filter=${a#--gtest_filter=};; --gtest_list_tests) list=1;; esac; done
if [[ $list == 1 ]]; then
  echo "FakeTest."
  for t in Alpha Beta; do
    IFS=: read -ra pats <<<"$filter"
    for p in "${pats[@]}"; do [[ "FakeTest.$t" == $p ]] && { echo "  $t"; break; }; done
  done
  exit 0
fi
echo "ran $filter"
FAKE
chmod +x "$tmp/fake_gtest"
if "$root/scripts/gtest_each.sh" "$tmp/fake_gtest" '*Alpha*' '*Beta*' >/dev/null 2>&1; then rc=0; else rc=1; fi
check "filters that each select a test run" "0" "$rc"
if "$root/scripts/gtest_each.sh" "$tmp/fake_gtest" '*Alpha*' '*RenamedAway*' >/dev/null 2>&1; then rc=0; else rc=1; fi
check "a filter that selects no test fails" "1" "$rc"

if [[ $problems != 0 ]]; then echo "selftest: $problems problem(s)"; exit 1; fi
echo "selftest: the test runner fails what it must"
