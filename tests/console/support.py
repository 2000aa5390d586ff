"""What the console's tests share: a real outbox on the test PostgreSQL and RabbitMQ, in a schema and
an exchange of their own; a relay (`outbox relay`); a real subscriber, the library's own consumer loop
(outbox_consumer_run through ctypes) whose handler fails for the aggregates a test names, so the
library parks them; and `outbox console` with a token file, driven over HTTP.

Needs OUTBOX_PG_URL and OUTBOX_AMQP_URL (scripts/test.sh exports both) and the release install
(OUTBOX_INSTALL, default _install/: bin/outbox and lib/liboutbox.so)."""
import ctypes
import http.client
import json
import os
import secrets
import socket
import subprocess
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INSTALL = os.environ.get("OUTBOX_INSTALL", os.path.join(ROOT, "_install"))
OUTBOX = os.path.join(INSTALL, "bin", "outbox")
PG_URL = os.environ["OUTBOX_PG_URL"]
AMQP_URL = os.environ["OUTBOX_AMQP_URL"]
HANDLER_PERMANENT = 2

lib = ctypes.CDLL(os.path.join(INSTALL, "lib", "liboutbox.so"))
_vpp = ctypes.POINTER(ctypes.c_void_p)
HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
for _name, _res, _args in [
    ("outbox_last_error", ctypes.c_char_p, []),
    ("outbox_status_name", ctypes.c_char_p, [ctypes.c_int]),
    ("outbox_config_new", ctypes.c_int, [_vpp]),
    ("outbox_config_set", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    ("outbox_config_free", None, [ctypes.c_void_p]),
    ("outbox_db_open_config", ctypes.c_int, [_vpp, ctypes.c_void_p]),
    ("outbox_db_close", None, [ctypes.c_void_p]),
    ("outbox_db_exec", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    ("outbox_migrate", ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int]),
    ("outbox_event_new", ctypes.c_int, [_vpp]),
    ("outbox_event_free", None, [ctypes.c_void_p]),
    ("outbox_event_set", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    ("outbox_event_id", ctypes.c_char_p, [ctypes.c_void_p]),
    ("outbox_write", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
    ("outbox_consumer_new", ctypes.c_int, [_vpp, ctypes.c_void_p, ctypes.c_char_p]),
    ("outbox_consumer_connect", ctypes.c_int, [ctypes.c_void_p]),
    ("outbox_consumer_run", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, HANDLER, ctypes.c_void_p]),
    ("outbox_consumer_stop", None, [ctypes.c_void_p]),
    ("outbox_consumer_free", None, [ctypes.c_void_p]),
    ("outbox_message_field", ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]),
    ("outbox_handler_error", None, [ctypes.c_char_p]),
]:
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args


def ok(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: {lib.outbox_status_name(status).decode()}: {lib.outbox_last_error().decode()}")


def config(settings):
    cfg = ctypes.c_void_p()
    ok(lib.outbox_config_new(ctypes.byref(cfg)), "config")
    for k, v in settings.items():
        ok(lib.outbox_config_set(cfg, k.encode(), str(v).encode()), k)
    return cfg


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_all(console, relay, sub, ob):
    """A fixture's teardown: the console, the relay daemon, the subscriber, the schema."""
    console.stop()
    relay.terminate()
    relay.wait(15)
    sub.stop()
    ob.close()


def wait_until(what, predicate, timeout=20.0, interval=0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Outbox:
    """A schema and exchange of its own, migrated; writes events; queries through psql."""

    def __init__(self, tag):
        self.schema = f"console_{tag}_{secrets.token_hex(3)}"
        self.exchange = f"console.{tag}.{secrets.token_hex(3)}"
        self.settings = {"pg.url": PG_URL, "amqp.url": AMQP_URL, "outbox.schema": self.schema,
                         "amqp.exchange": self.exchange}
        self.cfg = config(self.settings)
        self.db = ctypes.c_void_p()
        ok(lib.outbox_db_open_config(ctypes.byref(self.db), self.cfg), "open")
        ok(lib.outbox_migrate(ctypes.byref(ctypes.c_int()), self.db, 0), "migrate")
        ok(lib.outbox_db_exec(self.db, f'CREATE TABLE "{self.schema}".applied (consumer text, aggregate_id text, '
                                       f'event_id uuid, n serial)'.encode()), "applied table")

    def write(self, aggregate_type, aggregate_id, payload=None):
        ev = ctypes.c_void_p()
        ok(lib.outbox_event_new(ctypes.byref(ev)), "event")
        try:
            for k, v in [("aggregate_type", aggregate_type), ("aggregate_id", aggregate_id), ("operation", "PUT"),
                         ("payload", json.dumps(payload or {"id": aggregate_id}))]:
                ok(lib.outbox_event_set(ev, k.encode(), v.encode()), k)
            ok(lib.outbox_write(self.db, ev), "write")
            return lib.outbox_event_id(ev).decode()
        finally:
            lib.outbox_event_free(ev)

    def sql(self, query):
        """Rows of a query as lists of text (psql, unaligned)."""
        out = subprocess.run(["psql", PG_URL, "-XAt", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", query],
                             check=True, capture_output=True, text=True).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def relay(self, *extra):
        return subprocess.Popen([OUTBOX, "relay", "--schema", self.schema, "--set", f"amqp.exchange={self.exchange}",
                                 "--poll-interval-ms", "50", *extra], env=dict(os.environ),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def relay_once(self, *extra):
        subprocess.run([OUTBOX, "relay", "--once", "--schema", self.schema, "--set",
                        f"amqp.exchange={self.exchange}", *extra], check=True, capture_output=True)

    def close(self):
        ok(lib.outbox_db_exec(self.db, f'DROP SCHEMA "{self.schema}" CASCADE'.encode()), "drop schema")
        lib.outbox_db_close(self.db)
        lib.outbox_config_free(self.cfg)


class Subscriber:
    """The library's consumer loop on a thread of its own; its handler records each event in the
    schema's `applied` table, and fails (permanently: parked at once) for the aggregate ids in `fail`,
    or transiently (retried with backoff) for those in `flaky`."""

    def __init__(self, outbox, name, extra=None):
        self.outbox, self.name = outbox, name
        self.fail, self.flaky = set(), set()
        self.cfg = config({**outbox.settings, "consumer.retry_initial_ms": "600000",
                           "consumer.max_attempts": "5", "consumer.retry_poll_ms": "100", **(extra or {})})
        self.consumer = ctypes.c_void_p()
        ok(lib.outbox_consumer_new(ctypes.byref(self.consumer), self.cfg, name.encode()), "consumer")
        ok(lib.outbox_consumer_connect(self.consumer), "connect")  # the queue is bound from now on
        self.handler = HANDLER(self._handle)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _handle(self, tx, msg, _ud):
        agg = lib.outbox_message_field(msg, b"AGGREGATE_ID").decode()
        event_id = lib.outbox_message_field(msg, b"OUTBOX_ID").decode()
        if agg in self.fail:
            lib.outbox_handler_error(f"search index rejected {agg}: mapping conflict on field 'price'".encode())
            return HANDLER_PERMANENT
        if agg in self.flaky:
            lib.outbox_handler_error(b"search cluster unavailable (HTTP 503)")
            return 1
        sql = f"INSERT INTO \"{self.outbox.schema}\".applied (consumer, aggregate_id, event_id) VALUES " \
              f"('{self.name}', '{agg}', '{event_id}')"
        return 0 if lib.outbox_db_exec(tx, sql.encode()) == 0 else 1

    def _run(self):
        self.status = lib.outbox_consumer_run(self.consumer, None, self.handler, None)

    def applied(self, aggregate_id):
        return [r[0] for r in self.outbox.sql(f"SELECT event_id FROM \"{self.outbox.schema}\".applied WHERE "
                                              f"consumer = '{self.name}' AND aggregate_id = '{aggregate_id}' ORDER BY n")]

    def stop(self):
        lib.outbox_consumer_stop(self.consumer)
        self.thread.join(30)
        lib.outbox_consumer_free(self.consumer)
        lib.outbox_config_free(self.cfg)


class Console:
    """`outbox console` on a free loopback port, with a token file of an operator and a reader."""

    def __init__(self, outbox, tmpdir, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.operator, self.reader = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.token_file = os.path.join(tmpdir, "tokens")
        with open(self.token_file, "w") as f:
            f.write(f"# name role token\nalice operator {self.operator}\nbob read {self.reader}\n")
        os.chmod(self.token_file, 0o600)
        self.log_path = os.path.join(tmpdir, "console.log")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen([OUTBOX, "console", "--listen", f"127.0.0.1:{self.port}", "--token-file",
                                      self.token_file, "--schema", outbox.schema, "--sample-interval", "1", *extra],
                                     env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=self.log_file)
        wait_until("the console to listen", self._listening)

    def _listening(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"outbox console exited with {self.proc.returncode}: {self.log()}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def log(self):
        self.log_file.flush()
        with open(self.log_path) as f:
            return f.read()

    def request(self, method, path, body=None, headers=None, token=None, raw=None):
        """(status, headers, parsed JSON or text) of one request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        text = r.read().decode()
        conn.close()
        ctype = r.getheader("Content-Type") or ""
        return r.status, r, (json.loads(text) if ctype.startswith("application/json") and text else text)

    def login(self, token):
        """A session: (cookie header value, CSRF token) after signing in as the page does."""
        form = urllib.parse.urlencode({"token": token})
        status, r, _ = self.request("POST", "/login", raw=form.encode(), headers={
            "Content-Type": "application/x-www-form-urlencoded", "Origin": self.base})
        assert status == 303, status
        cookie = r.getheader("Set-Cookie").split(";")[0]
        status, _, page = self.request("GET", "/", headers={"Cookie": cookie})
        assert status == 200
        csrf = page.split('<meta name="csrf" content="')[1].split('"')[0]
        return cookie, csrf

    def state(self, token=None):
        status, _, body = self.request("GET", "/api/state", token=token or self.reader)
        assert status == 200, (status, body)
        return body

    def parked(self, consumer, aggregate_id):
        return [r for r in self.state()["parked"] if r["consumer"] == consumer and r["aggregate_id"] == aggregate_id]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(15)
        self.log_file.close()
