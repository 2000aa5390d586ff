#!/usr/bin/env bash
# Checks an installed copy of liboutbox the way a C project uses it: the files are where
# they should be, pkg-config and find_package(outbox) both build the C writer example (shared
# and static), and each binary writes a real event into PostgreSQL ($OUTBOX_PG_URL).
set -euo pipefail
prefix=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: "${OUTBOX_PG_URL:?OUTBOX_PG_URL must point at the test database}"
pass=0; fail=0
check() { # name command...
  local name=$1; shift
  if "$@" >"$work/out.log" 2>&1; then echo "  ok    $name"; pass=$((pass + 1))
  else echo "  FAIL  $name"; sed 's/^/        /' "$work/out.log" | tail -20; fail=$((fail + 1)); fi
}
events() { psql "$OUTBOX_PG_URL" -Atc "SELECT count(*) FROM outbox WHERE aggregate_type = 'PRD' AND payload->>'XPRD01' = '$1'"; }
writes_one() { # binary product-name
  local before after
  "$1" "$OUTBOX_PG_URL" "$2" >/dev/null
  after=$(events "$2")
  [[ "$after" == 1 ]] || { echo "expected 1 event for $2, found $after"; return 1; }
}

check "header installed" test -f "$prefix/include/outbox.h"
check "shared library with SONAME" bash -c "objdump -p '$prefix/lib/liboutbox.so' | grep -q 'SONAME.*liboutbox.so.0'"
check "static archive installed" test -f "$prefix/lib/liboutbox.a"
check "pkg-config file" env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --exists --print-errors outbox
check "CMake package" test -f "$prefix/lib/cmake/outbox/outboxConfig.cmake"
check "outbox CLI installed" "$prefix/bin/outbox" --help

tag=$RANDOM$RANDOM
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
check "pkg-config build of examples/c" make -s -C "$root/examples/c" O="$work/pc"
check "pkg-config binary writes an event" writes_one "$work/pc/writer" "pc-$tag"

check "static build (liboutbox.a, pkg-config --static)" bash -c "cc -std=c99 -Wall -Wextra -pedantic \
  -o '$work/static-writer' '$root/examples/c/writer.c' \$(pkg-config --cflags outbox libpq) \
  -Wl,-Bstatic \$(pkg-config --static --libs-only-l outbox | grep -o -- '-loutbox') -Wl,-Bdynamic \
  \$(pkg-config --static --libs-only-L outbox) \$(pkg-config --static --libs outbox | sed 's/-loutbox//; s/-L[^ ]*//g')"
check "static binary does not need liboutbox.so" bash -c "test -x '$work/static-writer' && ! ldd '$work/static-writer' | grep -q liboutbox"
check "static binary writes an event" writes_one "$work/static-writer" "static-$tag"

check "find_package(outbox) build of examples/c" bash -c "cmake -S '$root/examples/c' -B '$work/cm' -G Ninja \
  -DCMAKE_PREFIX_PATH='$prefix' && cmake --build '$work/cm'"
check "find_package binary writes an event" writes_one "$work/cm/writer" "cmake-$tag"
# A C-only CMake project linking outbox::outbox_static: the target's interface must bring libstdc++.
check "find_package(outbox) static build (outbox::outbox_static, C only)" bash -c "cmake -S '$root/examples/c' \
  -B '$work/cms' -G Ninja -DCMAKE_PREFIX_PATH='$prefix' -DOUTBOX_EXAMPLES_STATIC=ON && cmake --build '$work/cms'"
check "find_package static binary does not need liboutbox.so" bash -c "! ldd '$work/cms/writer' | grep -q liboutbox"
check "find_package static binary writes an event" writes_one "$work/cms/writer" "cmake-static-$tag"

echo "installed library: $pass passed, $fail failed"
[[ $fail == 0 ]]
