"""The console's HTTP API against real PostgreSQL and RabbitMQ: who may see and who may act, no state
change through GET, CSRF protection of browser sessions, and the actions themselves (retry at the relay,
redrive, redrive all, skip), each logged with who did it. The aggregates are parked by the library's
own consumer loop, whose handler fails for them."""
import os
import subprocess
import uuid

import pytest

from support import OUTBOX, Console, Outbox, Subscriber, stop_all, wait_until

ACTIONS = ["/api/retry", "/api/redrive", "/api/redrive-all", "/api/skip"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    ob = Outbox("http")
    # The relay's side: published before any queue is bound, with one attempt allowed, it fails.
    ob.write("Order", "relay-1")
    ob.relay_once("--set", "relay.max_attempts=1")
    sub = Subscriber(ob, "search")
    sub.fail.update({"bad-1", "bad-2"})
    relay = ob.relay()
    ids = {"ok-1": [ob.write("Order", "ok-1")], "bad-1": [ob.write("Order", "bad-1"), ob.write("Order", "bad-1")],
           "bad-2": [ob.write("Order", "bad-2")]}
    console = Console(ob, str(tmp_path_factory.mktemp("console")), "--subscriber", "audit")
    # Parked, and bad-1's second event received and held behind its head: the loop parks the head
    # before the second delivery is handled, so both are waited for.
    wait_until("bad-1 and bad-2 parked, bad-1's second event held", lambda: all(
        [(r["state"], r["waiting"]) for r in console.parked("search", a)] == [("parked", held)]
        for a, held in (("bad-1", 1), ("bad-2", 0))))
    yield ob, sub, console, ids
    stop_all(console, relay, sub, ob)


def head(console, consumer, aggregate_id):
    rows = console.parked(consumer, aggregate_id)
    return rows[0] if rows else None


def test_without_a_token_nothing_is_shown(world):
    _, _, console, _ = world
    assert console.request("GET", "/api/state")[0] == 401
    assert console.request("GET", "/api/state", token="not-a-token-of-anyone")[0] == 401
    for path in ACTIONS:
        status, _, body = console.request("POST", path, body={"consumer": "search"})
        assert status == 401, (path, body)
    status, _, page = console.request("GET", "/")
    assert status == 200 and 'name="token"' in page and "bad-1" not in page
    assert "refused /api/redrive from 127.0.0.1: no valid token or session" in console.log()


def test_a_read_token_views_the_relay_subscribers_and_parked_aggregates(world):
    _, _, console, ids = world
    status, _, raw = console.request("GET", "/api/state", token=console.reader, headers={})
    assert status == 200
    state = raw
    assert state["user"] == {"name": "bob", "role": "read"}
    row = head(console, "search", "bad-1")
    assert row["head_event_id"] == ids["bad-1"][0] and row["waiting"] == 1 and row["attempts"] >= 1
    assert "mapping conflict on field 'price'" in row["last_error"]
    assert state["stats"]["failed"] >= 1 and state["stats"]["parked_aggregates"] >= 1
    relay_rows = [r for r in state["parked"] if r["consumer"] is None]
    assert [r["aggregate_id"] for r in relay_rows] == ["relay-1"] and relay_rows[0]["source"] == "relay"
    subs = {s["name"]: s for s in state["subscribers"]}
    assert subs["search"]["parked"] == 2 and subs["search"]["lag_s"] > 0
    assert subs["audit"]["lag_s"] == 0 and subs["audit"]["parked"] == 0  # named by --subscriber
    assert len(state["history"]["t"]) >= 1 and "search" in state["history"]["subscribers"]
    # No payload reaches the page: the console passes on only the members it names.
    text = console.request("GET", "/api/state", token=console.operator)[2]
    assert "payload" not in str(text).lower() and "PAYLOAD" not in str(text)


def test_a_read_token_cannot_act(world):
    _, _, console, ids = world
    before = head(console, "search", "bad-1")
    body = {"consumer": "search", "aggregate_type": "Order", "aggregate_id": "bad-1", "event_id": ids["bad-1"][0],
            "reason": "x"}
    for path in ACTIONS:
        status, _, answer = console.request("POST", path, body=body, token=console.reader)
        assert status == 403, (path, answer)
    after = head(console, "search", "bad-1")
    assert after["state"] == "parked" and after["head_event_id"] == before["head_event_id"]
    assert "for bob (read): only an operator token may act" in console.log()


def test_get_never_changes_state(world):
    ob, _, console, ids = world
    failed_before = console.state()["stats"]["failed"]
    query = f"?consumer=search&aggregate_type=Order&aggregate_id=bad-1&event_id={ids['bad-1'][0]}&reason=x"
    for path in ACTIONS:
        status, r, _ = console.request("GET", path + query, token=console.operator)
        assert status == 405 and r.getheader("Allow") == "POST", path
    assert head(console, "search", "bad-1")["state"] == "parked"
    assert console.state()["stats"]["failed"] == failed_before
    assert ob.sql(f'SELECT count(*) FROM "{ob.schema}".outbox_inbox_skipped') == [["0"]]


def test_a_session_needs_its_csrf_token_and_origin(world):
    _, _, console, _ = world
    cookie, csrf = console.login(console.operator)
    body = {"consumer": "search", "aggregate_type": "Order", "aggregate_id": "no-such"}
    cases = [
        {"Cookie": cookie, "Origin": console.base},                                    # no CSRF header
        {"Cookie": cookie, "Origin": console.base, "X-CSRF-Token": "0" * 64},          # a wrong one
        {"Cookie": cookie, "Origin": "http://evil.example", "X-CSRF-Token": csrf},     # another origin
        {"Cookie": cookie, "X-CSRF-Token": csrf},                                      # no origin
    ]
    for headers in cases:
        status, _, answer = console.request("POST", "/api/redrive", body=body, headers=headers)
        assert status == 403, (headers, answer)
    status, _, answer = console.request("POST", "/api/redrive", body=body,
                                        headers={"Cookie": cookie, "Origin": console.base, "X-CSRF-Token": csrf})
    assert status == 200 and answer == {"redriven": 0}
    # A form posted from another site cannot sign anyone in (login CSRF).
    status, _, _ = console.request("POST", "/login", raw=f"token={console.operator}".encode(), headers={
        "Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"})
    assert status == 403
    status, r, _ = console.request("POST", "/login", raw=b"token=wrong-token-wrong-token", headers={
        "Content-Type": "application/x-www-form-urlencoded", "Origin": console.base})
    assert status == 401 and r.getheader("Set-Cookie") is None
    set_cookie = console.request("POST", "/login", raw=f"token={console.operator}".encode(), headers={
        "Content-Type": "application/x-www-form-urlencoded", "Origin": console.base})[1].getheader("Set-Cookie")
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    assert "the CSRF token or the origin does not match" in console.log()


def test_redrive_applies_the_held_events_in_order_and_is_logged(world):
    _, sub, console, ids = world
    sub.fail.discard("bad-1")
    status, _, answer = console.request("POST", "/api/redrive", token=console.operator, body={
        "consumer": "search", "aggregate_type": "Order", "aggregate_id": "bad-1"})
    assert status == 200 and answer == {"redriven": 1}
    wait_until("bad-1 applied", lambda: sub.applied("bad-1") == ids["bad-1"])
    wait_until("bad-1 no longer held", lambda: head(console, "search", "bad-1") is None)
    assert 'alice (operator) from 127.0.0.1: redrive consumer="search" aggregate="Order"/"bad-1" -> ' \
           '{"redriven":1}' in console.log()


def test_skip_needs_a_reason_and_the_head_the_operator_saw(world):
    ob, sub, console, ids = world
    target = {"consumer": "search", "aggregate_type": "Order", "aggregate_id": "bad-2"}
    status, _, answer = console.request("POST", "/api/skip", token=console.operator,
                                        body={**target, "event_id": ids["bad-2"][0], "reason": "  "})
    assert status == 400, answer
    status, _, answer = console.request("POST", "/api/skip", token=console.operator,
                                        body={**target, "event_id": str(uuid.uuid4()), "reason": "stale view"})
    assert status == 409 and "NOT_FOUND" in answer["error"]
    status, _, answer = console.request("POST", "/api/skip", token=console.operator,
                                        body={**target, "event_id": ids["bad-2"][0], "reason": "price fixed by hand"})
    assert status == 200 and answer == {"skipped": ids["bad-2"][0]}
    wait_until("bad-2 no longer held", lambda: head(console, "search", "bad-2") is None)
    assert ob.sql(f'SELECT outbox_id, skipped_by, reason FROM "{ob.schema}".outbox_inbox_skipped') == [
        [ids["bad-2"][0], "alice", "price fixed by hand"]]
    assert sub.applied("bad-2") == []
    assert 'alice (operator) from 127.0.0.1: skip the head of consumer="search" aggregate="Order"/"bad-2" event=' \
           f'"{ids["bad-2"][0]}" reason="price fixed by hand" -> {{"skipped":"{ids["bad-2"][0]}"}}' in console.log()


def test_retry_puts_the_relays_failed_events_back(world):
    _, sub, console, _ = world
    assert [r["aggregate_id"] for r in console.state()["parked"] if r["consumer"] is None] == ["relay-1"]
    # A skip without a consumer is the relay's: refused here, as the head it names is not the head.
    status, _, answer = console.request("POST", "/api/skip", token=console.operator, body={
        "aggregate_type": "Order", "aggregate_id": "relay-1", "event_id": str(uuid.uuid4()), "reason": "stale"})
    assert status == 409 and "at the relay is event" in answer["error"], answer
    status, _, answer = console.request("POST", "/api/retry", token=console.operator, body={})
    assert status == 200 and answer == {"moved": 1}
    wait_until("relay-1 published and applied", lambda: len(sub.applied("relay-1")) == 1)
    wait_until("the relay holds nothing", lambda: console.state()["stats"]["failed"] == 0)
    assert "alice (operator) from 127.0.0.1: retry every FAILED event at the relay -> {\"moved\":1}" in console.log()


def test_redrive_all_redrives_each_parked_aggregate_of_a_subscriber(world):
    ob, sub, console, _ = world
    sub.fail.update({"bad-3", "bad-4"})
    written = [ob.write("Order", "bad-3"), ob.write("Order", "bad-4")]
    wait_until("bad-3 and bad-4 parked", lambda: all(head(console, "search", a) for a in ("bad-3", "bad-4")))
    sub.fail.difference_update({"bad-3", "bad-4"})
    status, _, answer = console.request("POST", "/api/redrive-all", token=console.operator, body={"consumer": "search"})
    assert status == 200 and answer == {"redriven": 2}
    wait_until("bad-3 and bad-4 applied", lambda: sub.applied("bad-3") + sub.applied("bad-4") == written)
    wait_until("nothing held", lambda: not [r for r in console.state()["parked"] if r["consumer"] == "search"])


def test_pages_carry_a_strict_content_security_policy(world):
    _, _, console, _ = world
    for path in ("/", "/console.js", "/api/state"):
        _, r, _ = console.request("GET", path, token=console.reader)
        assert "script-src 'self'" in r.getheader("Content-Security-Policy") and "frame-ancestors 'none'" in \
            r.getheader("Content-Security-Policy"), path
        assert r.getheader("Cache-Control") == "no-store" and r.getheader("X-Content-Type-Options") == "nosniff"


def run_console(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_CONSOLE_")}
    env.update(env_extra or {})
    return subprocess.run([OUTBOX, "console", "--listen", "127.0.0.1:1", *args], env=env, capture_output=True,
                          text=True, timeout=30)


def test_it_refuses_to_start_without_a_good_token(tmp_path):
    r = run_console()
    assert r.returncode == 2 and "no token configured" in r.stderr
    bad = tmp_path / "tokens"
    bad.write_text("carol operator short-secret\n")
    r = run_console("--token-file", str(bad))
    assert r.returncode == 2 and "16 to 512" in r.stderr and "short-secret" not in r.stderr
    r = run_console(env_extra={"OUTBOX_CONSOLE_TOKENS": "dave admin 0123456789abcdef0123"})
    assert r.returncode == 2 and "read or operator" in r.stderr and "0123456789abcdef0123" not in r.stderr


def test_help_documents_every_flag():
    out = subprocess.run([OUTBOX, "console", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--listen", "--token-file", "--subscriber", "--sample-interval", "--max-rows", "--tls-cert",
                 "--tls-key", "--pg-url", "--schema", "OUTBOX_CONSOLE_TOKENS"):
        assert flag in out, flag
