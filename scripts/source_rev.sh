#!/usr/bin/env bash
# Prints the commit whose code a report measures, for bench/run and tests/faults/run:
#   <12-hex commit>                          the checkout is that commit, unchanged
#   <12-hex commit>+uncommitted changes      sources differ from it (the report measures no commit)
#   unknown (not a git checkout)
# Reports (bench/results, tests/faults/results) are left out of the comparison.
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,6p' "$0"; exit 0; fi
if ! rev=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null); then
  echo "unknown (not a git checkout)"
  exit 0
fi
changes=$(git -C "$root" status --porcelain --untracked-files=no -- . ':(exclude)bench/results' ':(exclude)tests/faults/results')
if [[ -n "$changes" ]]; then echo "$rev+uncommitted changes"; else echo "$rev"; fi
