"""The GIL is released while the library waits, and Ctrl-C (SIGINT) stops run() promptly and
cleanly: nothing marked published without a confirm, nothing acked before its commit."""

from __future__ import annotations

import signal
import threading
import time

import psycopg
import pytest
from conftest import PG_URL, event, eventually, later

import outbox


def sigint_main_thread() -> None:
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


@pytest.fixture(autouse=True)
def python_sigint_handler():
    """Ctrl-C as an interactive user has it. Python installs its KeyboardInterrupt handler only when
    SIGINT is not ignored at start; under `nohup ... &`, cron or some CI runners it is ignored, and a
    SIGINT sent by these tests would be dropped (the run would wait for ever)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def write_events(cfg, n, aggregates=2):
    with psycopg.connect(PG_URL) as conn:
        ids = [outbox.write(conn, config=cfg, **event(aggregate_id=f"g{i % aggregates}", payload={"n": i})).id
               for i in range(n)]
        conn.commit()
    return ids


def test_gil_released_while_relay_run_waits(cfg):
    counter = [0]
    running = threading.Event()
    done = threading.Event()

    def spin():
        running.set()
        while not done.is_set():
            counter[0] += 1

    relay = outbox.Relay(cfg)
    spinner = threading.Thread(target=spin)
    spinner.start()
    running.wait()
    stopper = later(1.0, relay.stop)
    try:
        before = counter[0]
        t0 = time.monotonic()
        relay.run()  # main thread, blocked in the library for ~1 s
        elapsed = time.monotonic() - t0
        during = counter[0] - before
    finally:
        done.set()
        spinner.join()
        stopper.cancel()
        relay.close()
    assert 0.8 < elapsed < 3.0
    assert during > 100_000, f"the Python thread ran only {during} iterations while Relay.run() waited"


def test_gil_released_while_consumer_waits(cfg, consumer_name):
    counter = [0]
    done = threading.Event()

    def spin():
        while not done.is_set():
            counter[0] += 1

    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        t = threading.Thread(target=spin)
        t.start()
        try:
            before = counter[0]
            assert consumer.next(timeout=0.8) is None
            during = counter[0] - before
        finally:
            done.set()
            t.join()
    assert during > 50_000


def test_ctrl_c_stops_relay_run_promptly_and_cleanly(admin, schema, cfg, consumer_name, count):
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        ids = write_events(cfg, 30)
        relay = outbox.Relay(cfg)
        later(0.6, sigint_main_thread)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            relay.run()
        elapsed = time.monotonic() - t0
        assert elapsed < 0.6 + 0.6, f"KeyboardInterrupt took {elapsed - 0.6:.2f} s"
        # Clean: every event PUBLISHED was confirmed (it is in the queue), the rest is PENDING.
        published = count("status = 'PUBLISHED'")
        assert published + count("status = 'PENDING'") == 30
        received = []
        while True:
            msg = consumer.next(timeout=1.0)
            if msg is None:
                break
            received.append(msg.id)
            msg.ack()
        assert len(received) == published == 30 and sorted(received) == sorted(ids)
        # The relay can run again after an interrupt (its own stop request was cleared).
        write_events(cfg, 1)
        later(0.4, relay.stop)
        relay.run()
        assert count("status = 'PUBLISHED'") == 31
        relay.close()


def test_ctrl_c_stops_a_waiting_consumer_run(cfg, consumer_name):
    with outbox.Consumer(consumer_name, cfg) as consumer, psycopg.connect(PG_URL) as conn:
        consumer.connect()
        later(0.5, sigint_main_thread)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            consumer.run(lambda m, c: None, conn)
        assert time.monotonic() - t0 < 0.5 + 0.5
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_ctrl_c_in_a_handler_rolls_back_and_the_event_comes_again(admin, schema, cfg, consumer_name):
    admin.execute(f'CREATE TABLE "{schema}".effects (event_id uuid PRIMARY KEY)')
    with outbox.Consumer(consumer_name, cfg) as consumer, psycopg.connect(PG_URL) as conn:
        consumer.connect()
        (eid,) = write_events(cfg, 1)
        with outbox.Relay(cfg) as relay:
            relay.drain()
        in_handler = threading.Event()

        def slow(msg, c):
            c.execute(f'INSERT INTO "{schema}".effects VALUES (%s)', (msg.id,))
            in_handler.set()
            time.sleep(5)  # Ctrl-C lands here

        def interrupt():
            in_handler.wait(5)
            time.sleep(0.3)  # inside the sleep (a signal just before a blocking C call waits for it)
            sigint_main_thread()

        threading.Thread(target=interrupt, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            consumer.run(slow, conn)
        assert time.monotonic() - t0 < 3
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, "rolled back"
        assert admin.execute(f'SELECT count(*) FROM "{schema}".effects').fetchone()[0] == 0
        assert admin.execute(f'SELECT count(*) FROM "{schema}".outbox_inbox').fetchone()[0] == 0

        def quick(msg, c):
            c.execute(f'INSERT INTO "{schema}".effects VALUES (%s)', (msg.id,))

        assert consumer.run(quick, conn, limit=1, idle_timeout=5) == 1  # redelivered, handled once
    assert admin.execute(f'SELECT event_id::text FROM "{schema}".effects').fetchall() == [(eid,)]


def test_ctrl_c_stops_run_native(cfg, consumer_name):
    with outbox.Consumer(consumer_name, cfg) as consumer:
        consumer.connect()
        later(0.5, sigint_main_thread)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            consumer.run_native(lambda m, tx: None)
        assert time.monotonic() - t0 < 0.5 + 1.0
        assert consumer.next(timeout=0.1) is None, "usable again after the interrupt"


def test_ctrl_c_stops_consumer_next_and_iteration(cfg, consumer_name):
    with outbox.Consumer(consumer_name, cfg) as consumer:
        later(0.4, sigint_main_thread)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            for _ in consumer:
                pass
        assert time.monotonic() - t0 < 0.4 + 0.5


def test_relay_run_in_a_thread_stops_on_request(cfg):
    relay = outbox.Relay(cfg)
    t = threading.Thread(target=relay.run)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    relay.stop()
    t.join(5)
    assert not t.is_alive() and time.monotonic() - t0 < 1.5
    relay.reset()
    assert eventually(lambda: relay.step().claimed == 0)
    relay.close()


def test_ctrl_c_during_a_blocked_step(cfg):
    """A step blocked on a broker that accepts TCP but never speaks AMQP: Ctrl-C ends the wait
    as soon as the library returns (amqp.connect_timeout_ms), and the relay can run again."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        cfg["amqp.connect_timeout_ms"] = 1000
        cfg["amqp.io_timeout_ms"] = 1000
        relay = outbox.Relay(cfg, amqp_url=f"amqp://outbox:outbox@127.0.0.1:{silent.getsockname()[1]}/%2f", logger=False)
        later(0.3, sigint_main_thread)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            relay.step()
        assert time.monotonic() - t0 < 2.5
        later(0.5, relay.stop)
        t0 = time.monotonic()
        relay.run()  # not left stopped by the interrupt: runs (failing to connect) until stop()
        assert time.monotonic() - t0 >= 0.4
        relay.close()
    finally:
        silent.close()
