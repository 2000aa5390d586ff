"""The installed package: importable from anywhere without environment variables, typed,
documented. (Binary driver wheels: tests/drivers, in a venv of their own.)"""

from __future__ import annotations

import os
import pathlib
import pydoc
import subprocess
import sys
import textwrap

from conftest import PG_URL, REPO

import outbox

# Binary wheels of the drivers, installed apart (scripts/test_python.sh: pip install --target).


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "OUTBOX_PG_URL", "OUTBOX_AMQP_URL")}
    if os.environ.get("PYTHONPATH"):  # a development run (the suite normally tests the installed package)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra)
    return env


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd="/", env=clean_env(**env),
                          capture_output=True, text=True, timeout=60)


def test_installed_module_works_from_any_directory_without_environment():
    pkg = pathlib.Path(outbox.__file__).parent
    assert pkg != REPO / "python" / "outbox", "the suite must import the installed package, not the sources"
    r = run_python("""
        import outbox, os
        print(outbox.library_version(), outbox.libpq_version(), os.path.dirname(outbox._native.__file__))
        with outbox.Db(os.environ["OUTBOX_PG_URL"]) as db:
            print(db.execute("SELECT 40 + 2").scalar())
    """)
    assert r.returncode == 0, r.stderr
    version, libpq, where, answer = r.stdout.split()
    assert version == outbox.library_version() == outbox.__version__ and int(libpq) >= 100000 and answer == "42"
    assert "LD_LIBRARY_PATH" not in clean_env()


def test_type_information_ships():
    pkg = pathlib.Path(outbox.__file__).parent
    assert (pkg / "py.typed").is_file()
    assert (pkg / "_native.pyi").is_file()
    assert outbox.write.__annotations__["return"] in ("Written", outbox.Written)


def test_help_reads_well():
    text = pydoc.render_doc(outbox.write, renderer=pydoc.plaintext)
    for part in ("current transaction", "Args:", "Returns:", "Raises:", "DuplicateEvent", "Example", "psycopg"):
        assert part in text, part
    for obj in (outbox.Relay, outbox.Consumer, outbox.Consumer.run, outbox.Db, outbox.render_write, outbox.dedupe,
                outbox.migrate, outbox.Event, outbox.Error):
        assert len(obj.__doc__ or "") > 80, obj
