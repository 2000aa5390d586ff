"""mypy --strict on code that uses the package: the good file passes; a misspelt field and an
unknown operation fail with mypy's own messages."""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent / "typing"


def mypy(name: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--no-error-summary",
                           str(HERE / name)], capture_output=True, text=True, timeout=170)


def test_good_file_passes():
    r = mypy("good.py")
    assert r.returncode == 0, r.stdout + r.stderr


def test_misspelt_field_fails():
    r = mypy("bad_field.py")
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'Unexpected keyword argument "paylod"' in r.stdout, r.stdout


def test_unknown_operation_fails():
    r = mypy("bad_operation.py")
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert out.count("Literal['POSTT']") == 2 and "bad_operation.py:5:" in out and "bad_operation.py:6:" in out, out
    assert "Literal['POST', 'PUT', 'PATCH', 'DELETE', 'FORCE_DELETE']" in out, out
