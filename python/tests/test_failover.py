"""A PostgreSQL failover as an owned ``outbox.Db`` sees it (docs/cluster.md, "PostgreSQL failover").

A libpq multi-host conninfo whose first host is down reaches the server that accepts writes
(``target_session_attrs=read-write``, as after a promotion). A connection lost inside a
transaction fails that transaction with ConnectionLost and is never reopened inside it; the next
transaction opens it again by itself, through the same host list. The fault suite shows the same
with a real promotion (faults 12 and the quick subset); this runs in the ordinary suite."""

from __future__ import annotations

import socket
import urllib.parse

import psycopg
import pytest

import outbox

from conftest import PG_URL, event


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more
    return port


def multi_host_url(url: str) -> str:
    """PG_URL with a dead server listed first, as a client sees a failed primary."""
    u = urllib.parse.urlsplit(url)
    userinfo, _, hostport = u.netloc.rpartition("@")
    netloc = f"{userinfo}@127.0.0.1:{closed_port()},{hostport}"
    query = "target_session_attrs=read-write&connect_timeout=5"
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, query, ""))


def backend_pid(db: outbox.Db) -> int:
    return int(db.execute("SELECT pg_backend_pid()").scalar())


def test_an_owned_db_follows_a_host_list_and_reopens_only_between_transactions(
    cfg: outbox.Config, admin: psycopg.Connection, count
) -> None:
    with outbox.Db.open(multi_host_url(PG_URL), config=cfg) as db:
        db.begin()
        db.write(event(aggregate_id="lost"))
        pid = backend_pid(db)
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

        # The transaction in flight is gone: its writes fail, and COMMIT never succeeds on a new session.
        with pytest.raises(outbox.ConnectionLost) as lost:
            db.write(event(aggregate_id="lost-2"))
        assert lost.value.code == "CONNECTION"
        with pytest.raises(outbox.ConnectionLost):
            db.commit()
        assert count() == 0, "nothing of the lost transaction may commit"

        # The next transaction reconnects by itself, through the host list, on a new backend.
        db.rollback()
        with db.transaction():
            written = db.write(event(aggregate_id="after"))
        assert backend_pid(db) != pid
        assert count() == 1
        assert admin.execute("SELECT aggregate_id FROM \"%s\".outbox WHERE outbox_id = %%s" % cfg["outbox.schema"],
                             (written.id,)).fetchone()[0] == "after"


def test_a_host_list_with_no_server_that_accepts_writes_is_a_clear_connection_error(cfg: outbox.Config) -> None:
    url = f"postgresql://outbox:secret-pw@127.0.0.1:{closed_port()},127.0.0.1:{closed_port()}/outbox?connect_timeout=2"
    with pytest.raises(outbox.ConnectionLost) as e:
        outbox.Db.open(url, config=cfg)
    assert e.value.code == "CONNECTION"
    assert "secret-pw" not in str(e.value)
