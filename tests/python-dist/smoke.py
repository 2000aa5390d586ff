"""A repaired wheel at work without a server: run by scripts/build_python_dist.sh --check (and
--all-pythons) with the python of a fresh venv holding only that wheel, usually under
tests/python-dist/without_libs.sh. Prints what it found; exits non-zero (a traceback) on failure.

Imports `outbox` from the venv's site-packages, then calls into the extension: a configuration set
and read back through the native Config, and the INSERT of a write rendered by the library (the
event validated, named and given its id), and names the libpq, librabbitmq and libcjson the process
mapped: the copies grafted into the wheel, never the system's.
"""

import os
import sys

import outbox

native = outbox._native.__file__
assert os.path.realpath(native).startswith(os.path.realpath(sys.prefix)), f"outbox._native from {native}, not the venv"
print(f"python {sys.version.split()[0]}: outbox {outbox.__version__} (liboutbox {outbox.library_version()}, "
      f"libpq {outbox.libpq_version()}) from {os.path.dirname(native)}")

config = outbox.Config({"outbox.schema": "smoke", "relay.poll_interval_ms": 250})
assert config["outbox.schema"] == "smoke" and config["relay.poll_interval_ms"] == "250", config
st = outbox.render_write(aggregate_type="Order", aggregate_id="42", operation="POST", payload={"total": 10},
                         config=config, placeholders="format")
assert st.event_type == "OrderCreated" and 'INSERT INTO "smoke"."outbox_events"' in st.sql, st
print(f"render_write: INSERT INTO \"smoke\".\"outbox_events\" ... ({len(st.params)} %s params), "
      f"{st.event_type} {st.event_id}")

with open("/proc/self/maps") as maps:
    mapped = sorted({line.split()[-1] for line in maps if any(
        f"/{name}" in line for name in ("libpq", "librabbitmq", "libcjson"))})
assert mapped and all(".libs/" in path for path in mapped), mapped
print("mapped: " + ", ".join(os.path.basename(path) for path in mapped))
