#!/usr/bin/env python3
"""liboutbox through Python's ctypes alone (no pybind11 module): proof that the C ABI is usable
from any FFI. Opens a connection, migrates a fresh schema, writes an event inside a transaction,
reads it back through libpq (also via ctypes), checks errors, and prints "N passed, N failed"."""
import ctypes
import ctypes.util
import os
import secrets
import sys

lib_path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUTBOX_LIB", "_install/lib/liboutbox.so")
pg_url = os.environ.get("OUTBOX_PG_URL", "postgresql://outbox:outbox@127.0.0.1:54329/outbox")

lib = ctypes.CDLL(lib_path)
pq = ctypes.CDLL(ctypes.util.find_library("pq"))

c_void_pp = ctypes.POINTER(ctypes.c_void_p)
for name, res, args in [
    ("outbox_version", ctypes.c_char_p, []),
    ("outbox_last_error", ctypes.c_char_p, []),
    ("outbox_status_name", ctypes.c_char_p, [ctypes.c_int]),
    ("outbox_config_new", ctypes.c_int, [c_void_pp]),
    ("outbox_config_set", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    ("outbox_config_free", None, [ctypes.c_void_p]),
    ("outbox_db_open", ctypes.c_int, [c_void_pp, ctypes.c_char_p, ctypes.c_void_p]),
    ("outbox_db_close", None, [ctypes.c_void_p]),
    ("outbox_db_exec", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    ("outbox_db_pgconn", ctypes.c_void_p, [ctypes.c_void_p]),
    ("outbox_migrate", ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int]),
    ("outbox_event_new", ctypes.c_int, [c_void_pp]),
    ("outbox_event_free", None, [ctypes.c_void_p]),
    ("outbox_event_set", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    ("outbox_event_set_n", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    ("outbox_event_id", ctypes.c_char_p, [ctypes.c_void_p]),
    ("outbox_event_seq", ctypes.c_int64, [ctypes.c_void_p]),
    ("outbox_write", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
]:
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = res, args
pq.PQexec.restype, pq.PQexec.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
pq.PQgetvalue.restype, pq.PQgetvalue.argtypes = ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
pq.PQntuples.restype, pq.PQntuples.argtypes = ctypes.c_int, [ctypes.c_void_p]
pq.PQclear.argtypes = [ctypes.c_void_p]

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"  ok    {name}")
    else:
        failed += 1
        print(f"  FAIL  {name}: {detail}")


def ok(status, what):
    if status != 0:
        raise SystemExit(f"{what}: {lib.outbox_status_name(status).decode()}: {lib.outbox_last_error().decode()}")


check("outbox_version", lib.outbox_version().decode().count(".") == 2, lib.outbox_version())
schema = "ctypes_" + secrets.token_hex(4)
cfg = ctypes.c_void_p()
ok(lib.outbox_config_new(ctypes.byref(cfg)), "config")
ok(lib.outbox_config_set(cfg, b"outbox.schema", schema.encode()), "config")
ok(lib.outbox_config_set(cfg, b"event.type_map", b"PRD=Product"), "config")
db = ctypes.c_void_p()
ok(lib.outbox_db_open(ctypes.byref(db), pg_url.encode(), cfg), "open")  # fails the run when PostgreSQL is down
version = ctypes.c_int()
ok(lib.outbox_migrate(ctypes.byref(version), db, 0), "migrate")
check("migrate reports schema version 2", version.value == 2, version.value)

ev = ctypes.c_void_p()
ok(lib.outbox_event_new(ctypes.byref(ev)), "event")
for k, v in [("aggregate_type", "PRD"), ("aggregate_id", "42"), ("operation", "POST"),
             ("payload", '{"PRD_ID":"42","XPRD01":"Widget \u00e9"}'), ("user", "ctypes@example.com")]:
    ok(lib.outbox_event_set(ev, k.encode(), v.encode()), k)
ok(lib.outbox_db_exec(db, b"BEGIN"), "begin")
ok(lib.outbox_write(db, ev), "write")
ok(lib.outbox_db_exec(db, b"COMMIT"), "commit")
event_id = lib.outbox_event_id(ev).decode()
check("write returns a UUIDv7 id and sequence 1", len(event_id) == 36 and event_id[14] == "7" and lib.outbox_event_seq(ev) == 1,
      event_id)

conn = lib.outbox_db_pgconn(db)
res = pq.PQexec(conn, f"SELECT outbox_id, event_type, payload::text, actor FROM \"{schema}\".outbox".encode())
row = [pq.PQgetvalue(res, 0, i).decode() for i in range(4)] if pq.PQntuples(res) == 1 else None
pq.PQclear(res)
check("the event reads back exactly as written",
      row == [event_id, "ProductCreated", '{"PRD_ID":"42","XPRD01":"Widget \u00e9"}', "ctypes@example.com"], row)

bad = b'{"a":"x\x00y"}'
status = lib.outbox_event_set_n(ev, b"payload", bad, len(bad))
check("a NUL inside a length-delimited value is INVALID_EVENT", lib.outbox_status_name(status) == b"INVALID_EVENT",
      lib.outbox_status_name(status))
status = lib.outbox_write(None, ev)
check("a NULL handle is INVALID_ARGUMENT, not a crash", lib.outbox_status_name(status) == b"INVALID_ARGUMENT"
      and b"must not be NULL" in lib.outbox_last_error(), lib.outbox_last_error())

ok(lib.outbox_db_exec(db, f'DROP SCHEMA "{schema}" CASCADE'.encode()), "cleanup")
lib.outbox_event_free(ev)
lib.outbox_db_close(db)
lib.outbox_config_free(cfg)
print(f"ctypes: {passed} passed, {failed} failed")
sys.exit(0 if failed == 0 else 1)
