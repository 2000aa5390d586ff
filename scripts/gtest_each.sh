#!/usr/bin/env bash
# Runs a GoogleTest binary on a filtered set of tests, refusing a filter that selects nothing:
#   scripts/gtest_each.sh BINARY PATTERN [PATTERN...]
# Each PATTERN (a --gtest_filter pattern) must select at least one test, so a renamed or deleted
# test makes this fail instead of running 0 tests and exiting 0. Then the union runs once.
set -euo pipefail
if [[ $# -lt 2 || "$1" == "-h" || "$1" == "--help" ]]; then sed -n '2,5p' "$0"; [[ $# -ge 2 ]]; exit; fi
bin=$1
shift
total=0
for pattern in "$@"; do
  listing=$("$bin" --gtest_filter="$pattern" --gtest_list_tests)
  # Test names are the indented lines of the listing; suite names are not indented.
  n=$(grep -c '^  ' <<<"$listing" || true)
  if [[ $n == 0 ]]; then
    echo "gtest_each.sh: the filter '$pattern' selects no test of $bin" >&2
    exit 1
  fi
  echo "gtest_each.sh: '$pattern' selects $n test(s)"
  total=$((total + n))
done
filter=$(IFS=:; echo "$*")
"$bin" --gtest_filter="$filter"
