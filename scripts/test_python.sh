#!/usr/bin/env bash
# The Python package's suite: builds the distribution once (scripts/build_python_dist.sh: sdist, the
# wheel compiled from it, the auditwheel-repaired wheel), installs the sdist's wheel into the venv
# <run dir>/venv, then runs its pytest suite from outside the source tree, against real PostgreSQL
# and RabbitMQ (test_dist.py: the sdist, and the repaired wheel with the system libraries hidden).
# Expects the services up and OUTBOX_PG_URL / OUTBOX_AMQP_URL exported (scripts/test.sh does both;
# the local services' URLs are the defaults). Exits non-zero when a test fails or none ran.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,7p' "$0"; exit 0; fi

: "${OUTBOX_PG_URL:=$OUTBOX_LOCAL_PG_URL}"
: "${OUTBOX_AMQP_URL:=$OUTBOX_LOCAL_AMQP_URL}"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
unset PYTHONPATH PYTHONHOME

venv=$OUTBOX_RUN_DIR/venv
if [[ ! -x "$venv/bin/python" ]]; then
  outbox_log "creating $venv"
  "${OUTBOX_PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip
fi
py=$venv/bin/python
pip_q() { "$py" -m pip install --disable-pip-version-check -q "$@"; }

outbox_log "test dependencies"
# The pure psycopg loads the system libpq, and psycopg2 is built from source against it: only
# then may their connections be lent to the library (never psycopg[binary] or psycopg2-binary).
pip_q pytest "pytest-timeout>=2.1" "psycopg>=3.1" "asyncpg>=0.27" "pika>=1.3"
pip_q --no-binary psycopg2 "psycopg2>=2.8"
if "$py" -c 'import psycopg.pq as p, sys; sys.exit(p.__impl__ != "python")'; then :; else
  outbox_die "psycopg in $venv is not the pure-Python implementation (a psycopg[binary]/[c] extra is installed)"
fi
# The binary wheels, kept apart (pip --target), for the test that their connections are refused.
binary=$OUTBOX_RUN_DIR/py-binary
psycopg_version=$("$py" -c 'import psycopg; print(psycopg.__version__)')
if [[ ! -f "$binary/.ok-$psycopg_version" ]]; then
  rm -rf "$binary"
  pip_q --target "$binary" "psycopg-binary==$psycopg_version" psycopg2-binary
  touch "$binary/.ok-$psycopg_version"
fi
export OUTBOX_PY_BINARY_WHEELS=$binary

# The distribution as a user gets it, built once (scripts/build_python_dist.sh): the sdist, the
# wheel pip compiles from that sdist alone, and that wheel after auditwheel repair.
# This suite runs on the wheel compiled from the sdist (what `pip install corewrite_outbox-*.tar.gz`
# installs: it links the system libpq, so the pure psycopg's connections are lent); test_dist.py
# checks the sdist and runs the repaired wheel in a fresh venv with libpq, librabbitmq and libcjson hidden.
dist=${OUTBOX_PY_DIST:-$OUTBOX_RUN_DIR/dist}
export OUTBOX_PY_DIST=$dist
start=$SECONDS
OUTBOX_PY_DIST=$dist "$root/scripts/build_python_dist.sh" >/dev/null
outbox_log "built the sdist and the wheels in $((SECONDS - start)) s: $(cd "$dist" && echo corewrite_outbox-*)"
# The distribution was called `outbox` before: a venv that still has it gets only the new one.
"$py" -m pip uninstall --disable-pip-version-check -q -y outbox 2>/dev/null || true
pip_q --force-reinstall --no-deps "$dist"/raw/corewrite_outbox-*.whl
outbox_log "installed: $("$py" -c 'import outbox; print(outbox.__file__)')"

# From a directory outside python/, so `import outbox` is the installed package.
work=$OUTBOX_RUN_DIR/pytest
mkdir -p "$work"
cd "$work"
rc=0
# A hung test fails in minutes: pytest-timeout's thread method dumps every thread's stack and ends
# the run (a hang inside the C library never returns to Python, so a signal-based timeout may not fire).
"$py" -m pytest -q -p no:cacheprovider -p timeout --timeout "${OUTBOX_PYTEST_TIMEOUT:-180}" \
  --timeout-method thread --rootdir "$root/python" "$root/python/tests" "$@" || rc=$?
if [[ $rc == 5 ]]; then
  echo "test_python.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
