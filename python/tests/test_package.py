"""The installed package: importable from anywhere without environment variables, typed,
documented, and refusing driver connections from another libpq (binary wheels)."""

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
BINARY_WHEELS = pathlib.Path(os.environ.get("OUTBOX_PY_BINARY_WHEELS") or REPO / ".run" / "py-binary")


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


def refused(driver: str, code: str) -> None:
    assert BINARY_WHEELS.is_dir(), f"{BINARY_WHEELS} is missing (scripts/test_python.sh installs the binary wheels there)"
    script = (
        f"import sys, os\nsys.path.insert(0, {str(BINARY_WHEELS)!r})\nimport outbox\n"
        + textwrap.dedent(code)
        + textwrap.dedent(f"""
            assert {str(BINARY_WHEELS)!r} in driver_module.__file__, driver_module.__file__
            try:
                outbox.write(conn, aggregate_type="PRD", aggregate_id="1", operation="POST", payload={{}})
            except outbox.LibpqMismatch as e:
                print("REFUSED", e)
            try:
                outbox.Db.wrap(conn)
            except outbox.LibpqMismatch as e:
                print("REFUSED")
        """)
    )
    r = run_python(script, PSYCOPG_IMPL="binary")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("REFUSED") == 2, r.stdout
    assert "binary wheels" in r.stdout and driver in r.stdout


def test_psycopg2_binary_connection_is_refused():
    refused("psycopg2", f"""
        import psycopg2 as driver_module
        conn = driver_module.connect({PG_URL!r})
    """)


def test_psycopg_binary_connection_is_refused():
    refused("psycopg", f"""
        import psycopg as driver_module
        assert driver_module.pq.__impl__ == "binary"
        import psycopg_binary
        driver_module = psycopg_binary
        conn = __import__("psycopg").connect({PG_URL!r})
    """)
