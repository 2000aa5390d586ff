#!/usr/bin/env bash
# Write and consume cost through each face, before and after, side by side (issue 29):
#   bench/faces_before_after.sh BEFORE_TREE AFTER_TREE [faces_rounds.py options]
#   e.g. git worktree add /tmp/before 9adade4 && bench/faces_before_after.sh /tmp/before . \
#          --rounds 5 --out bench/results/faces-29.md
# For each tree (a checkout of any commit with the same layout), builds or installs what is missing
# or older than its sources, into TREE/.run:
#   build/release (scripts/build.sh release: bench/relay_bench and bench/write_c),
#   .run/venv-faces: the tree's python/ package (pip install ./python: compiled from the sources, it
#     links the system libpq) with psycopg[binary], asyncpg and pika,
#   .run/node-faces: the tree's npm tarball and pg (scripts/node_package.sh).
# Then starts this tree's throwaway PostgreSQL and RabbitMQ (scripts/services.sh up, left running;
# OUTBOX_RUN_DIR and the OUTBOX_*_PORT variables choose which), so both sides measure against the
# same servers, and runs bench/faces_rounds.py: rounds alternating before, after, before, ... of
# K (python/bench_write.py, node/bench/write.js), and bench/consume_faces.py (every consumer face,
# and relay_bench's C consumer), each with the CPU steal around it; writes the report (--out, default
# bench/results/faces.md, and its .json). The measuring scripts are this tree's, for both sides.
# About 2.5 minutes per round of both sides with the defaults, plus the builds (~3 min per tree
# the first time).
set -euo pipefail
harness="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
if [[ $# -lt 2 || "$1" == "-h" || "$1" == "--help" ]]; then sed -n '2,20p' "$0"; exit 2; fi
# shellcheck source=scripts/lib.sh
source "$harness/scripts/lib.sh"
before="$(cd -- "$1" && pwd -P)"
after="$(cd -- "$2" && pwd -P)"
shift 2
py_for_venv=${OUTBOX_PYTHON:-python3}

newer_than() {  # newer_than STAMP TREE PATH...: true when a file under TREE/PATH... is newer than STAMP
  local stamp=$1 tree=$2; shift 2
  [[ -e "$stamp" ]] || return 0
  local paths=()
  for p in "$@"; do [[ -e "$tree/$p" ]] && paths+=("$tree/$p"); done
  [[ -n "$(find "${paths[@]}" -newer "$stamp" -type f -print -quit)" ]]
}

prepare() {  # prepare TREE: the release build, the Python venv and the Node project of TREE
  local tree=$1 run=$1/.run start=$SECONDS
  mkdir -p "$run"
  outbox_log "$tree: scripts/build.sh release (log $run/faces-build.log)"
  (cd "$tree" && OUTBOX_RUN_DIR=$run scripts/build.sh release) >"$run/faces-build.log" 2>&1 ||
    { tail -n 30 "$run/faces-build.log" >&2; outbox_die "$tree: the release build failed"; }
  local venv=$run/venv-faces
  if [[ ! -x "$venv/bin/python" ]]; then
    outbox_log "$tree: creating $venv"
    "$py_for_venv" -m venv "$venv"
  fi
  if ! (cd / && "$venv/bin/python" -c 'import psycopg, psycopg_binary, asyncpg, pika') 2>/dev/null; then
    "$venv/bin/python" -m pip install --disable-pip-version-check -q "psycopg[binary]>=3.1" "asyncpg>=0.27" "pika>=1.3"
  fi
  if ! (cd / && "$venv/bin/python" -c 'import outbox._native') 2>/dev/null ||
     newer_than "$venv/.faces-stamp" "$tree" core capi bindings/python python/outbox python/pyproject.toml \
       python/CMakeLists.txt CMakeLists.txt cmake; then
    outbox_log "$tree: pip install ./python into $venv (log $run/faces-pip.log)"
    (cd "$tree" && "$venv/bin/python" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps \
      ./python -Cbuild-dir="$run/python-build") >"$run/faces-pip.log" 2>&1 ||
      { tail -n 30 "$run/faces-pip.log" >&2; outbox_die "$tree: pip install ./python failed"; }
    touch "$venv/.faces-stamp"
  fi
  local project=$run/node-faces
  if [[ ! -d "$project/node_modules/outbox" ]] ||
     newer_than "$project/.faces-stamp" "$tree" core capi bindings/node node/lib node/package.json node/binding.gyp; then
    outbox_log "$tree: scripts/node_package.sh $project (log $run/faces-node.log)"
    (cd "$tree" && OUTBOX_RUN_DIR=$run scripts/node_package.sh "$project") >"$run/faces-node.log" 2>&1 ||
      { tail -n 30 "$run/faces-node.log" >&2; outbox_die "$tree: scripts/node_package.sh failed"; }
    touch "$project/.faces-stamp"
  fi
  outbox_log "$tree: ready in $((SECONDS - start)) s"
}

"$harness/scripts/deps.sh" >&2
prepare "$before"
prepare "$after"
# node/bench/write.js and consume.js of this tree take node-postgres from node/node_modules here.
if [[ ! -d "$harness/node/node_modules/pg" ]]; then
  (cd "$harness/node" && npm ci --ignore-scripts --prefer-offline --no-audit --no-fund) >&2
fi
"$harness/scripts/services.sh" up >&2
eval "$("$harness/scripts/services.sh" env)"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
exec python3 "$harness/bench/faces_rounds.py" --before "$before" --after "$after" "$@"
