"""The rules the package reads from the C API instead of keeping copies (issue 15): each test
fails when the Python side and the library disagree."""

import dataclasses

import pytest

import outbox
from outbox import _native


def test_event_fields_are_the_libraries_in_its_order():
    native = [name for name, _ in _native.event_fields()]
    assert native[:3] == ["aggregate_type", "aggregate_id", "operation"] and "force_delete" in native
    # The public dataclass names the same fields, in the same order.
    assert [f.name for f in dataclasses.fields(outbox.Event)] == native
    kinds = dict(_native.event_fields())
    assert {n for n, k in kinds.items() if k == 1} == {"payload", "previous_payload", "metadata"}


@pytest.mark.parametrize(
    "style, first, named",
    [("dollar", "$1", False), ("qmark", "?", False), ("format", "%s", False), ("named", ":p1", True),
     ("pyformat", "%(p1)s", True)],
)
def test_placeholder_styles_come_from_the_library(style, first, named):
    ev = outbox.Event(aggregate_type="PRD", aggregate_id="1", operation="POST", payload={"a": 1})
    st = outbox.render_write(ev, placeholders=style)
    assert first in st.sql
    if named:
        assert isinstance(st.params, dict) and list(st.params)[:2] == ["p1", "p2"]
    else:
        assert isinstance(st.params, tuple) and len(st.params) == 11
    # The configured style is the same conversion.
    assert outbox.render_write(ev, config={"render.placeholders": style}).sql.split("VALUES")[0] == st.sql.split("VALUES")[0]
    d = outbox.render_dedupe("c", "0190f5c2-1c1e-7c2a-9d1b-2f4c5e6a7b8c", "PRD", "1", 1, placeholders=style)
    assert first in d.sql and isinstance(d.params, dict) == named
    with pytest.raises(outbox.InvalidArgument, match="placeholders"):
        outbox.render_write(ev, placeholders="numeric")


def test_db_without_a_url_takes_pg_url_then_the_environment(monkeypatch, pg_url):
    monkeypatch.setenv("OUTBOX_PG_URL", pg_url)
    with outbox.Db() as db:
        assert db.execute("SELECT 1") is not None
    monkeypatch.setenv("OUTBOX_PG_URL", "postgresql://nobody:envsecret@127.0.0.1:1/x?connect_timeout=1")
    with outbox.Db(config={"pg.url": pg_url}) as db:  # the configuration's wins over the environment
        assert db.execute("SELECT 1") is not None
    with pytest.raises(outbox.ConnectionLost) as info:
        outbox.Db()
    assert "envsecret" not in str(info.value)
    monkeypatch.delenv("OUTBOX_PG_URL")
    with pytest.raises(outbox.InvalidArgument, match="OUTBOX_PG_URL"):
        outbox.Db()


def test_config_copies_keep_the_environment_fallback(monkeypatch, pg_url):
    monkeypatch.setenv("OUTBOX_AMQP_URL", "amqp://u:amqpsecret@127.0.0.1:1/%2f")
    c = outbox.Config({"outbox.schema": "s1"})
    c.apply_env()
    assert c.copy()["amqp.url"] == "***" and c["amqp.url"] == "***"
    del c["outbox.schema"]  # rebuilt from the rest: the default again, the fallback kept
    assert c["outbox.schema"] == outbox.Config()["outbox.schema"] and c["amqp.url"] == "***"
    assert "amqpsecret" not in repr(c)
    plain = outbox.Config()
    assert plain["amqp.url"] == ""
