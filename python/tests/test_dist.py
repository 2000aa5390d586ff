"""The distribution `corewrite-outbox` as scripts/build_python_dist.sh makes it (scripts/test_python.sh
runs it first and exports OUTBOX_PY_DIST): the sdist carries the C++ sources and builds from itself
(this suite runs on the wheel pip compiled from it), and the auditwheel-repaired wheel, installed by
the README's line into a fresh venv, works on a machine without libpq, librabbitmq and libcjson
(tests/python-dist/without_libs.sh hides them in a mount namespace)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
from conftest import AMQP_URL, PG_URL, REPO, unique

import outbox

DIST_TOOLS = REPO / "tests" / "python-dist"
VERSION = "0.1.0"


@pytest.fixture(scope="module")
def dist() -> pathlib.Path:
    d = os.environ.get("OUTBOX_PY_DIST")
    assert d, "OUTBOX_PY_DIST is not set (scripts/test_python.sh builds the distribution and sets it)"
    return pathlib.Path(d)


def one(pattern: str, where: pathlib.Path) -> pathlib.Path:
    found = sorted(where.glob(pattern))
    assert len(found) == 1, f"{where}/{pattern}: {found}"
    return found[0]


def tracked(*paths: str) -> list:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--", *paths], capture_output=True, text=True, check=True)
    return [p for p in out.stdout.split() if (REPO / p).is_file()]


def test_sdist_carries_the_sources_it_builds_from(dist):
    sdist = dist / f"corewrite_outbox-{VERSION}.tar.gz"
    top = f"corewrite_outbox-{VERSION}"
    with tarfile.open(sdist) as tar:
        members = {m.name[len(top) + 1:]: m for m in tar.getmembers() if m.isfile()}

        def read(name: str) -> bytes:
            f = tar.extractfile(members[name])
            assert f is not None, name
            return f.read()

        pkg_info = read("PKG-INFO").decode()
        assert "Name: corewrite-outbox\n" in pkg_info and "License-Expression: Apache-2.0\n" in pkg_info, pkg_info[:400]
        assert read("LICENSE") == (REPO / "LICENSE").read_bytes()
        for name in ("pyproject.toml", "CMakeLists.txt", "outbox/__init__.py", "outbox/py.typed"):
            assert read(name) == (REPO / "python" / name).read_bytes(), name
        # The project's CMake and every C++ source the extension needs, vendored byte for byte.
        needed = tracked("CMakeLists.txt", "LICENSE", "core", "capi", "bindings/python", "cmake")
        assert len(needed) > 40 and any(p.startswith("core/") for p in needed)
        for path in needed:
            assert f"cpp/{path}" in members, f"the sdist lacks cpp/{path}"
            assert read(f"cpp/{path}") == (REPO / path).read_bytes(), f"cpp/{path} differs from the checkout"
        assert not [n for n in members if n.startswith(("tests/", "cpp/tests/", "cpp/node/", "cpp/php/"))]


def test_this_suite_runs_on_the_wheel_built_from_the_sdist(dist):
    """pip compiled the sdist alone (unpacked outside the checkout); that wheel is what this venv has."""
    raw = one(f"raw/corewrite_outbox-{VERSION}-*.whl", dist)
    native = pathlib.Path(outbox._native.__file__)
    with zipfile.ZipFile(raw) as whl:
        built = whl.read(f"outbox/{native.name}")
        assert not [n for n in whl.namelist() if ".libs/" in n], "the raw wheel has grafted libraries"
    assert hashlib.sha256(built).digest() == hashlib.sha256(native.read_bytes()).digest()
    # It links the system libraries (the self-contained wheel grafts its own).
    ldd = subprocess.run(["ldd", str(native)], capture_output=True, text=True, check=True).stdout
    assert "libpq.so.5 => /" in ldd and ".libs/" not in ldd, ldd


def test_nothing_is_written_into_the_source_tree():
    for leftover in ("python/cpp", "python/build", "python/dist", "python/corewrite_outbox.egg-info"):
        assert not (REPO / leftover).exists(), leftover
    status = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--ignored", "--", "python", "core", "capi",
                             "bindings", "cmake"], capture_output=True, text=True, check=True).stdout.splitlines()
    ignored = [line for line in status if line.startswith("!!") and "__pycache__" not in line]
    assert ignored == [], f"build output in the source tree: {ignored}"


@pytest.fixture
def dist_names(admin, amqp):
    names = {"OUTBOX_DIST_SCHEMA": unique("py_dist_"), "OUTBOX_DIST_EXCHANGE": unique("py.dist."),
             "OUTBOX_DIST_CONSUMER": unique("py-dist-")}
    amqp.exchanges.append(names["OUTBOX_DIST_EXCHANGE"])
    amqp.consumer_topology(names["OUTBOX_DIST_CONSUMER"])
    try:
        yield names
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{names["OUTBOX_DIST_SCHEMA"]}" CASCADE')


def pip(python: pathlib.Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args],
                   check=True, timeout=300, cwd="/")


def test_repaired_wheel_works_without_libpq_librabbitmq_libcjson(dist, dist_names, tmp_path):
    wheel = one(f"corewrite_outbox-{VERSION}-*manylinux_*.whl", dist)
    with zipfile.ZipFile(wheel) as whl:
        grafted = " ".join(n for n in whl.namelist() if n.startswith("corewrite_outbox.libs/"))
    for lib in ("libpq-", "librabbitmq-", "libcjson-", "libssl-"):
        assert lib in grafted, f"{wheel.name} does not bundle {lib}*: {grafted}"

    # A fresh venv: the README's install line, and the binary psycopg (it bundles its own libpq).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip(python, "--no-index", "--find-links", str(dist), "corewrite-outbox")
    pip(python, "psycopg[binary]>=3.1")
    site = pathlib.Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                       capture_output=True, text=True, check=True).stdout.strip())
    assert (site / "corewrite_outbox.libs").is_dir(), "pip installed something else than the repaired wheel"
    # The wheel before repair, apart: in the same place it must fail to import (the control).
    raw = tmp_path / "raw"
    pip(python, "--no-deps", "--target", str(raw), str(one(f"raw/corewrite_outbox-{VERSION}-*.whl", dist)))

    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
           "OUTBOX_PG_URL": PG_URL, "OUTBOX_AMQP_URL": AMQP_URL, "OUTBOX_DIST_RAW": str(raw), **dist_names}
    r = subprocess.run([str(DIST_TOOLS / "without_libs.sh"), str(python), str(DIST_TOOLS / "hidden_libs_check.py")],
                       env=env, cwd="/", capture_output=True, text=True, timeout=150)
    report = r.stdout + r.stderr
    print(report)
    assert "gone: libpq, librabbitmq, libcjson" in r.stdout, report
    assert r.returncode == 0 and "ALL OK" in r.stdout, report
    for name in ("raw-wheel-fails", "import", "migrate", "owned-write", "psycopg-binary-write", "relay-consumer"):
        assert f"ok {name} " in r.stdout, f"{name}: {report}"
    shutil.rmtree(venv)
