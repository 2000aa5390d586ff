#!/usr/bin/env bash
# Compares liboutbox.so with the checked-in ABI baseline (libabigail). Additions are fine;
# an incompatible change (a removed or changed function, a changed public type) fails.
#   tests/abi/check_abi.sh LIB            check
#   tests/abi/check_abi.sh LIB --update   rewrite the baseline (see capi/ABI.md: only with a SOVERSION bump
#                                         for incompatible changes)
set -euo pipefail
lib=$1
here=$(cd "$(dirname "$0")" && pwd)
headers=$here/../../capi/include
baseline=$here/liboutbox.abi
if [[ "${2:-}" == "--update" ]]; then
  abidw --headers-dir "$headers" --suppressions "$here/suppressions.abignore" --exported-interfaces-only \
    --no-corpus-path --no-comp-dir-path --drop-private-types --out-file "$baseline" "$lib"
  echo "ABI baseline written to $baseline"
  exit 0
fi
set +e
abidiff --headers-dir2 "$headers" --suppressions "$here/suppressions.abignore" --exported-interfaces-only \
  --drop-private-types --no-show-locs "$baseline" "$lib" >"${TMPDIR:-/tmp}/abidiff.$$" 2>&1
rc=$?
set -e
report=$(cat "${TMPDIR:-/tmp}/abidiff.$$"); rm -f "${TMPDIR:-/tmp}/abidiff.$$"
printf '%s\n' "$report"
# abidiff's exit code is a bit field: 1 error, 2 usage error, 4 ABI change, 8 incompatible change.
# It sets only 4 for a changed public struct layout, so the summary decides too: anything
# removed or changed is incompatible; only additions are not.
changed=$(printf '%s\n' "$report" | sed -n 's/.*changes summary: \([0-9]*\) Removed[^,]*, \([0-9]*\) Changed.*/\1 \2/p' |
  awk '{n += $1 + $2} END {print n + 0}')
if (( rc & 3 )); then echo "abidiff failed to run (exit $rc)" >&2; exit 1; fi
if (( rc & 8 )) || (( changed > 0 )); then
  echo "INCOMPATIBLE ABI change against tests/abi/liboutbox.abi: see capi/ABI.md" >&2; exit 1
fi
if (( rc & 4 )); then echo "abi: compatible changes only (additions); update the baseline with --update when releasing"; fi
echo "abi: compatible with the baseline"
