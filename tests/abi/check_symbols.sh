#!/usr/bin/env bash
# The exported symbols of liboutbox.so must be exactly the documented API in symbols.txt.
# After an intentional API addition, regenerate with: tests/abi/check_symbols.sh LIB --update
set -euo pipefail
lib=$1
here=$(cd "$(dirname "$0")" && pwd)
actual=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sed 's/@.*//' | sort -u)
if [[ "${2:-}" == "--update" ]]; then
  printf '%s\n' "$actual" > "$here/symbols.txt"
  exit 0
fi
if ! diff -u "$here/symbols.txt" <(printf '%s\n' "$actual"); then
  echo "exported symbols differ from tests/abi/symbols.txt (- expected, + actual)" >&2
  exit 1
fi
# Every exported function is declared in the public header.
missing=0
for s in $actual; do
  grep -q "\b$s(" "$here/../../capi/include/outbox.h" || { echo "exported but not in outbox.h: $s" >&2; missing=1; }
done
[[ $missing == 0 ]] || exit 1
echo "symbols: $(wc -l <<<"$actual") exported, all documented"
