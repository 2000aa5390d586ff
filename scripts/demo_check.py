#!/usr/bin/env python3
"""Checks what scripts/demo.sh did, from its log directory: prints what each subscriber applied
and fails unless every event written (PHP + Python + C) was applied exactly once by every
subscriber and the forced redeliveries were seen and skipped by the inboxes.

    scripts/demo_check.py LOG_DIR

LOG_DIR holds what the demo left there: the writers' output (writer-php.log, writer-python.log,
writer-c.log), the subscribers' output (<subscriber>.log), and what the database says
(events.txt: outbox_id|event_type|aggregate_type|aggregate_id|status of every outbox row;
inbox.txt: consumer|outbox_id of every inbox row; audit_log.txt and analytics_events.txt: the
event id of every effect row of the C and Python subscribers; republished.txt: the id of the
event the demo had the relay publish a second time).

A subscriber applied an event when its log has a line with "(event <id>" (printed with the
effect, inside or right after its transaction) that does not say "already processed"; it skipped
a delivery when a line names the id and says "already processed". Ends with the line
"demo check: N passed, N failed"; exits 1 when any check failed.
"""
from __future__ import annotations

import collections
import pathlib
import re
import sys

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
WRITERS = (("PHP", "writer-php.log"), ("Python", "writer-python.log"), ("C", "writer-c.log"))
SUBSCRIBERS = (
    ("search-indexer", "Node, amqplib + outbox inbox"),
    ("cache-invalidator", "Node, amqplib + outbox inbox"),
    ("analytics-writer", "Python, outbox.Consumer"),
    ("audit-logger", "C, outbox_consumer_run"),
)


class Checks:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, ok: bool, what: str, why: str = "") -> None:
        if ok:
            self.passed += 1
            print(f"  ok    {what}")
        else:
            self.failed += 1
            print(f"  FAIL  {what}{': ' + why if why else ''}")


def lines(path: pathlib.Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def rows(path: pathlib.Path) -> list[list[str]]:
    return [line.split("|") for line in lines(path) if line.strip()]


def deliveries(log: pathlib.Path) -> tuple[collections.Counter, collections.Counter, list[str]]:
    """(applied id -> count, skipped id -> count, skip lines) from a subscriber's log."""
    applied: collections.Counter = collections.Counter()
    skipped: collections.Counter = collections.Counter()
    skip_lines = []
    for line in lines(log):
        if "already processed" in line:
            m = re.search(UUID, line)
            if m:
                skipped[m.group(0)] += 1
                skip_lines.append(line.strip())
            continue
        m = re.search(r"\(event (" + UUID + ")", line)
        if m:
            applied[m.group(1)] += 1
    return applied, skipped, skip_lines


def describe(ids, written_by, events) -> str:
    return ", ".join(f"{written_by.get(i, '?')} {events[i][0]} {events[i][1]} {i}" if i in events else i for i in ids)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    d = pathlib.Path(argv[1])
    c = Checks()

    # What was written, by whom, and what the outbox table holds.
    written_by: dict[str, str] = {}
    for writer, name in WRITERS:
        ids = [m.group(0) for line in lines(d / name) if "committed" in line for m in [re.search(UUID, line)] if m]
        c.check(len(ids) > 0, f"the {writer} writer committed {len(ids)} event(s)", f"no committed event in {name}")
        for i in ids:
            written_by[i] = writer
    events = {r[0]: (r[1], f"{r[2]}:{r[3]}", r[4]) for r in rows(d / "events.txt") if len(r) == 5}
    written = set(written_by)
    c.check(written == set(events), f"the outbox table holds exactly the {len(written)} events the writers committed",
            f"written but not in the table: {sorted(written - set(events))}; "
            f"in the table but not written: {sorted(set(events) - written)}")
    unpublished = sorted(i for i, e in events.items() if e[2] != "PUBLISHED")
    c.check(not unpublished, "every event is PUBLISHED", f"not published: {unpublished}")

    inbox: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for consumer, event_id in (r for r in rows(d / "inbox.txt") if len(r) == 2):
        inbox[consumer][event_id] += 1
    republished = (lines(d / "republished.txt") or [""])[0].strip()

    for sub, how in SUBSCRIBERS:
        applied, skipped, skip_lines = deliveries(d / f"{sub}.log")
        print(f"--- {sub} ({how}): applied {sum(applied.values())} event(s), skipped {sum(skipped.values())} delivery(ies)")
        for i in sorted(applied, key=lambda i: (written_by.get(i, "~"), i)):
            writer = written_by.get(i, "not written")
            kind, aggregate = events.get(i, ("?", "?"))[:2]
            print(f"        {writer:<7} {kind:<15} {aggregate:<45} {i}{'' if applied[i] == 1 else f'  x{applied[i]}'}")
        for line in skip_lines:
            print(f"        skipped: {line}")
        missing = sorted(written - set(applied))
        twice = sorted(i for i, n in applied.items() if n > 1)
        foreign = sorted(set(applied) - written)
        c.check(not missing and not twice and not foreign,
                f"{sub}: every one of the {len(written)} events applied exactly once",
                "; ".join(p for p in (f"missed {describe(missing, written_by, events)}" if missing else "",
                                      f"applied more than once {describe(twice, written_by, events)}" if twice else "",
                                      f"applied events nobody wrote {foreign}" if foreign else "") if p))
        rows_in = inbox.get(sub, collections.Counter())
        c.check(set(rows_in) == written and all(n == 1 for n in rows_in.values()),
                f"{sub}: its inbox holds one row per event",
                f"inbox rows {dict(rows_in)} vs written {sorted(written)}")
        c.check(bool(republished) and skipped[republished] >= 1,
                f"{sub}: the event published twice (outbox replay) was skipped by its inbox",
                f"no 'already processed' line for {republished or '(no republished event recorded)'}")

    # The forced redelivery: the search-indexer killed after applying an event, before its ack.
    log = lines(d / "search-indexer.log")
    crashed = [m.group(1) for line in log for m in [re.search(r"killed after the COMMIT of event (" + UUID + ")", line)] if m]
    redelivered = [line for line in log if crashed and crashed[0] in line and "already processed" in line
                   and "redelivered by the broker" in line]
    c.check(len(crashed) == 1 and bool(redelivered),
            "search-indexer: killed after applying an event, before its ack; the broker redelivered it and the inbox skipped it",
            f"crash lines {crashed}, redelivery skip lines {redelivered}")

    # The effects in the database of the C and Python subscribers, one row per event.
    for table, who in (("audit_log", "audit-logger (C)"), ("analytics_events", "analytics-writer (Python)")):
        effect = collections.Counter(line.strip() for line in lines(d / f"{table}.txt") if line.strip())
        c.check(set(effect) == written and all(n == 1 for n in effect.values()),
                f"{who}: {table} holds one row per event",
                f"rows {dict(effect)} vs written {sorted(written)}")

    print(f"demo check: {c.passed} passed, {c.failed} failed")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
