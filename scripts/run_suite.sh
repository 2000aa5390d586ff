#!/usr/bin/env bash
# Runs one suite function of a suite file as a program of its own:
#   scripts/run_suite.sh FILE FUNCTION [ARG...]
# FILE is sourced and FUNCTION called at top level with `set -euo pipefail` and inherit_errexit,
# so every step counts: the first command that fails (also inside a pipeline or a `$(...)`) ends
# the suite with its status, and nothing after it runs on a stale tree. scripts/test.sh calls it
# under `timeout`; never call a suite function inside `if`, `&&` or `||` (bash turns `set -e` off there).
set -euo pipefail
shopt -s inherit_errexit
if [[ $# -lt 2 || "$1" == "-h" || "$1" == "--help" ]]; then sed -n '2,7p' "$0"; [[ $# -ge 2 ]]; exit; fi
suite_file=$1 suite_fn=$2
shift 2
# shellcheck source=/dev/null
source "$suite_file"
declare -F "$suite_fn" >/dev/null || { echo "run_suite.sh: no function '$suite_fn' in $suite_file" >&2; exit 2; }
"$suite_fn" "$@"
