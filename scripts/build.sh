#!/usr/bin/env bash
# Configures and builds the project.
#   scripts/build.sh release   -> build/release, installed into _install/ (library, header, pkg-config, CMake package, CLI)
#   scripts/build.sh asan      -> build/asan with AddressSanitizer + UndefinedBehaviorSanitizer, for the C++ test suite
#                                 (without bench/: no test runs it there; the release tree builds it)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

kind=${1:-release}
root=$OUTBOX_REPO_ROOT
jobs=$(nproc 2>/dev/null || echo 2)
# Unity builds: each target's sources compiled a batch at a time, in about half the time on 2 cores
# (headers parsed once a batch). The ThreadSanitizer suite's build compiles every core file alone.
# OUTBOX_UNITY_BUILD=OFF builds file by file.
unity=-DCMAKE_UNITY_BUILD=${OUTBOX_UNITY_BUILD:-ON}
case "$kind" in
  release)
    cmake -S "$root" -B "$root/build/release" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DOUTBOX_WERROR=ON -DOUTBOX_BUILD_TESTS=OFF -DCMAKE_INSTALL_PREFIX="$root/_install" "$unity" >/dev/null
    cmake --build "$root/build/release" -j "$jobs"
    cmake --install "$root/build/release" >/dev/null
    echo "build: release built and installed into $root/_install"
    ;;
  asan)
    cmake -S "$root" -B "$root/build/asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOX_SANITIZE=ON \
      -DOUTBOX_WERROR=ON -DOUTBOX_BUILD_BENCH=OFF "$unity" >/dev/null
    cmake --build "$root/build/asan" -j "$jobs"
    echo "build: sanitizer build ready in $root/build/asan"
    ;;
  -h|--help)
    sed -n '2,5p' "$0"; exit 0 ;;
  *)
    echo "usage: scripts/build.sh release|asan" >&2; exit 2 ;;
esac
