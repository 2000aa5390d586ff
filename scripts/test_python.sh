#!/usr/bin/env bash
# The Python package's suite: builds the distribution corewrite-outbox once
# (scripts/build_python_dist.sh: the sdist, the wheel pip compiles from it, that wheel after auditwheel
# repair) and installs it into two venvs in $OUTBOX_RUN_DIR: venv gets the wheel compiled from the
# sdist (pure psycopg, psycopg2 from source), venv-drivers the self-contained repaired wheel
# (psycopg[binary], psycopg2-binary, SQLAlchemy, asyncpg, mypy). Every driver takes the one path:
# the library's statements through the driver's cursor. Then runs the pytest suites from outside the source tree, against real PostgreSQL and
# RabbitMQ (test_dist.py: the sdist, and the repaired wheel with the system libraries hidden).
# Expects the services up and OUTBOX_PG_URL / OUTBOX_AMQP_URL exported (scripts/test.sh does both;
# the local services' URLs are the defaults). Exits non-zero when a test fails or none ran.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,10p' "$0"; exit 0; fi

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
# .run/venv: the pure psycopg (Python-level protocol) and psycopg2 built from source: the whole suite
# runs on them.
pip_q pytest "pytest-timeout>=2.1" "pytest-xdist>=3" "psycopg>=3.1" "asyncpg>=0.27" "pika>=1.3"
pip_q --no-binary psycopg2 "psycopg2>=2.8"
if "$py" -c 'import psycopg.pq as p, sys; sys.exit(p.__impl__ != "python")'; then :; else
  outbox_die "psycopg in $venv is not the pure-Python implementation (a psycopg[binary]/[c] extra is installed)"
fi
# venv-drivers: what most users install (the README's lines): psycopg[binary], psycopg2-binary,
# SQLAlchemy, asyncpg; the driver path (the library's statement through the driver's cursor), and
# mypy --strict on code using the package.
dvenv=$OUTBOX_RUN_DIR/venv-drivers
if [[ ! -x "$dvenv/bin/python" ]]; then
  outbox_log "creating $dvenv"
  "${OUTBOX_PYTHON:-python3}" -m venv "$dvenv"
  "$dvenv/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip
fi
dpy=$dvenv/bin/python
"$dpy" -m pip install --disable-pip-version-check -q pytest "pytest-timeout>=2.1" "pika>=1.3" \
  "psycopg[binary]>=3.1" psycopg2-binary "sqlalchemy[asyncio]>=2" "asyncpg>=0.27" "mypy>=1.8"

# The distribution as a user gets it, built once (scripts/build_python_dist.sh): the sdist, the
# wheel pip compiles from that sdist alone, and that wheel after auditwheel repair. venv runs on the
# wheel compiled from the sdist (what `pip install corewrite_outbox-*.tar.gz` installs: it links the
# system libpq); venv-drivers on the self-contained wheel (the README's first install line: it bundles
# its own libpq).
dist=${OUTBOX_PY_DIST:-$OUTBOX_RUN_DIR/dist}
export OUTBOX_PY_DIST=$dist
start=$SECONDS
OUTBOX_PY_DIST=$dist "$root/scripts/build_python_dist.sh" >/dev/null
outbox_log "built the sdist and the wheels in $((SECONDS - start)) s: $(cd "$dist" && echo corewrite_outbox-*)"
# The distribution was called `outbox` before: a venv that still has it gets only the new one.
for p in "$py" "$dpy"; do "$p" -m pip uninstall --disable-pip-version-check -q -y outbox 2>/dev/null || true; done
pip_q --force-reinstall --no-deps "$dist"/raw/corewrite_outbox-*.whl
"$dpy" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps --no-index \
  --only-binary corewrite-outbox --find-links "$dist" corewrite-outbox
outbox_log "installed: $("$py" -c 'import outbox; print(outbox.__file__)'), $("$dpy" -c 'import outbox; print(outbox.__file__)')"

# From a directory outside python/, so `import outbox` is the installed package.
work=$OUTBOX_RUN_DIR/pytest
mkdir -p "$work"
cd "$work"
rc=0
# A hung test fails in minutes: pytest-timeout's thread method dumps every thread's stack and ends
# the run (a hang inside the C library never returns to Python, so a signal-based timeout may not fire).
nargs=$#
run_pytest() {
  local python=$1 r=0; shift
  "$python" -m pytest -q -p no:cacheprovider -p timeout --timeout "${OUTBOX_PYTEST_TIMEOUT:-180}" \
    --timeout-method thread --rootdir "$root/python" "$@" || r=$?
  if [[ $r == 5 && $nargs == 0 ]]; then echo "test_python.sh: pytest collected no tests" >&2; r=1; fi
  if [[ $r == 5 ]]; then r=0; fi  # a -k filter that selects nothing in one of the two suites
  return "$r"
}
# The two runs at once: most of their time is spent waiting on the services, a subprocess or a
# cluster node coming back (one at a time, the machine was 13-45% busy). The drivers' run prints its
# output after the first's.
outbox_log "pytest in $dvenv (psycopg[binary], psycopg2-binary, SQLAlchemy, asyncpg, mypy), in the background"
drivers_log=$work/drivers.log
run_pytest "$dpy" "$root/python/tests/drivers" "$@" >"$drivers_log" 2>&1 &
drivers_pid=$!
outbox_log "pytest in $venv (pure psycopg, psycopg2 from source)"
# Three worker processes (pytest-xdist), each taking whole files: every test has its own schema,
# exchange and queues, and most of their time is spent waiting on the services or a subprocess.
run_pytest "$py" -n "${OUTBOX_PYTEST_WORKERS:-3}" --dist loadfile "$root/python/tests" \
  --ignore="$root/python/tests/drivers" "$@" || rc=$?
drc=0
wait "$drivers_pid" || drc=$?
outbox_log "pytest in $dvenv: exit $drc"
cat "$drivers_log"
if [[ $drc != 0 ]]; then rc=$drc; fi
exit "$rc"
