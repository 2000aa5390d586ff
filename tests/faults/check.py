#!/usr/bin/env python3
"""Jepsen-style accounting of one fault scenario, from the writers' and consumers' logs and the
database's final state.

    python3 tests/faults/check.py RUN_DIR/SCENARIO   # re-check a kept scenario directory

Inputs (in the scenario directory):
  writer-*.log    C|A <event-id> <aggregate-id> <seq> <how>   (writer.cpp)
  consumer-*.log  R <event-id> <aggregate-id> <seq> <dc> | D <event-id> | L ...   (consumer.cpp)
  db.json         the outbox rows' ids and statuses and every effects row, read after the drain
  faults.json     what was injected, and the allowance of duplicates it earns

Counts, per consumer and summed:
  committed   events of transactions whose COMMIT succeeded, or whose unknown outcome resolved
              to committed (txid_status, cross-checked with a read of the rows)
  lost        committed events without an applied effect at the consumer
  unexpected  events received or applied that were never committed (rolled back, failed)
  duplicates  deliveries beyond the first of an event (the runtime logged each, R or D)
  effects!=1  committed events whose effect row count n is not exactly 1
  order       applied effects of one aggregate not in increasing seq order (or a seq gap)

Faults 15 and 16 (failing handlers, faults.json "parking"): the consumers' handlers fail for the
aggregates failing_class() names; db.json also holds the skipped events and when each effect was
applied. There a committed event is accounted for when applied once or skipped (never both); the
events skipped must be exactly the permanent failures (odd seqs of the "permanent" aggregates);
and no event of an aggregate may be applied before its skipped head was skipped (an applied head
is covered by the increasing-seq order of the effects).
"""
import collections
import json
import os
import sys


def fnv1a(text):
    h = 2166136261
    for b in text.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def failing_class(aggregate_id, fail_pct):
    """The class of an aggregate's handler failures (consumer.cpp, failing_class): None, "flaky"
    (each event fails its first 2 runs in a process), "broken" (until the fix is deployed) or
    "permanent" (odd seqs fail permanently)."""
    h = fnv1a(aggregate_id)
    if fail_pct <= 0 or h % 100 >= fail_pct:
        return None
    return ("flaky", "broken", "permanent")[(h // 100) % 3]


def failed_runs(path):
    """Class -> handler runs that failed on purpose (F lines) in one consumer's log."""
    out = collections.Counter()
    for line in open(path):
        p = line.split()
        if len(p) >= 5 and p[0] == "F":
            out[p[4]] += 1
    return out


def read_writer_logs(d):
    committed, rolled_back, resolved, late = {}, set(), 0, set()
    bad, txid_wrong = [], []
    for name in sorted(os.listdir(d)):
        if not (name.startswith("writer-") and name.endswith(".log")):
            continue
        with open(os.path.join(d, name)) as f:
            for line in f:
                p = line.split()
                if not p:
                    continue
                if p[0] == "T":
                    txid_wrong.append(line.strip())
                    continue
                if p[0] == "X":
                    bad.append(line.strip())
                    continue
                if len(p) not in (5, 6) or p[0] not in "CA":
                    bad.append("%s: %s" % (name, line.strip()))
                    continue
                kind, eid, agg, seq, how = p[:5]
                if how == "resolved":
                    resolved += 1
                if how == "late":
                    late.add(eid)
                if kind == "C":
                    committed[eid] = (agg, int(seq))
                else:
                    rolled_back.add(eid)
    return committed, rolled_back, resolved, bad, late, txid_wrong


def commit_times(d):
    """Event id -> epoch ms its writer saw COMMIT return (the sixth field of a C line)."""
    out = {}
    for name in sorted(os.listdir(d)):
        if name.startswith("writer-") and name.endswith(".log"):
            for line in open(os.path.join(d, name)):
                p = line.split()
                if len(p) == 6 and p[0] == "C":
                    out[p[1]] = int(p[5])
    return out


def first_applied_times(path):
    """Event id -> epoch ms of its first handler run in one consumer's log (R lines)."""
    out = {}
    for line in open(path):
        p = line.split()
        if len(p) >= 6 and p[0] == "R" and p[1] not in out:
            out[p[1]] = int(p[5])
    return out


def delays_beyond(committed_ms, applied_ms, since_ms, until_ms, available_ms):
    """For events committed in [since_ms, until_ms]: ms from the later of their commit and
    available_ms (the broker accepting again) to their first application (0 when applied before
    it); missing ones are left to the loss count."""
    return sorted(max(0, applied_ms[e] - max(c, available_ms)) for e, c in committed_ms.items()
                  if since_ms <= c <= until_ms and e in applied_ms)


def read_consumer_log(path):
    receipts = collections.Counter()
    first_order = []  # (agg, seq) of first receipts, in log order
    first_info = {}  # event id -> (delivery count, the inbox's order report) of its first handler run
    last_info = {}  # the same of its last handler run: the one that applied it (a run before it rolled back)
    seen = set()
    for line in open(path):
        p = line.split()
        if not p:
            continue
        if p[0] == "R" and len(p) >= 4:
            eid = p[1]
            receipts[eid] += 1
            last_info[eid] = (int(p[4]) if len(p) > 4 else 0, p[6] if len(p) > 6 else "?")
            if eid not in seen:
                seen.add(eid)
                first_order.append((p[2], int(p[3]), eid))
                first_info[eid] = (int(p[4]) if len(p) > 4 else 0, p[6] if len(p) > 6 else "?")
        elif p[0] == "D" and len(p) >= 2:
            receipts[p[1]] += 1
    return receipts, first_order, first_info, last_info


def order_violations(seq_by_agg_in_order, committed_seqs_by_agg=None):
    """Events applied after a later seq of their aggregate: [event id]."""
    bad = []
    for agg, seqs in seq_by_agg_in_order.items():
        last = 0
        for s, eid in seqs:
            if s <= last:
                bad.append(eid)
            last = max(last, s)
    return bad


def split_violations(bad, first_info):
    """RabbitMQ may redeliver messages returned by a failure (a broker restart, a lost consumer
    connection) after newer ones of the same queue. Such an event is explained when it was a
    redelivery (delivery count >= 1) and the inbox reported it stale to the handler; anything else
    is a real order violation."""
    explained = [e for e in bad if first_info.get(e, (0, "?"))[0] >= 1 and first_info[e][1] == "stale"]
    return len(bad) - len(explained), len(explained)


def check(d):
    committed, rolled_back, resolved, bad_lines, late, txid_wrong = read_writer_logs(d)
    db = json.load(open(os.path.join(d, "db.json")))
    faults = json.load(open(os.path.join(d, "faults.json")))
    consumers = faults["consumers"]

    # The writers' account against the table: every committed event is there, nothing else is.
    in_db = {r[0]: r[1] for r in db["outbox"]}
    missing_in_db = [e for e in committed if e not in in_db]
    rolled_back_in_db = [e for e in rolled_back if e in in_db]
    unlogged_in_db = [e for e in in_db if e not in committed and e not in rolled_back]
    status = collections.Counter(in_db.values())

    # Per aggregate, committed seqs must be 1..N (gap-free numbering in commit order).
    seqs = collections.defaultdict(list)
    for agg, s in committed.values():
        seqs[agg].append(s)
    seq_gaps = sum(1 for a, ss in seqs.items() if sorted(ss) != list(range(1, len(ss) + 1)))

    effects = collections.defaultdict(list)  # consumer -> [(applied, id, agg, seq, n)]
    for c, eid, agg, seq, n, applied in db["effects"]:
        effects[c].append((applied, eid, agg, seq, n))

    parking = faults.get("parking")
    skipped = collections.defaultdict(dict)  # consumer -> id -> (agg, seq, skipped_at us)
    effect_at = {}  # (consumer, id) -> applied at, us
    expected_skips = set()
    if parking:
        for c, eid, agg, seq, at, _by in db.get("skipped", []):
            skipped[c][eid] = (agg, seq, at)
        for c, eid, at in db.get("effect_times", []):
            effect_at[(c, eid)] = at
        expected_skips = set(e for e, (agg, s) in committed.items()
                             if failing_class(agg, parking["fail_pct"]) == "permanent" and s % 2 == 1)

    per = {}
    for c in consumers:
        receipts, first_order, first_info, last_info = read_consumer_log(os.path.join(d, "consumer-%s.log" % c))
        eff = sorted(effects.get(c, []))
        applied = {e[1]: e[4] for e in eff}
        sk = skipped.get(c, {})
        lost = [e for e in committed if e not in applied and e not in sk]
        unexpected = sorted(set(e for e in receipts if e not in committed) | set(e for e in applied if e not in committed)
                            | set(e for e in sk if e not in committed))
        dups = sum(n - 1 for n in receipts.values() if n > 1)
        max_dup = max(receipts.values(), default=1) - 1
        not_once = [e for e, n in applied.items() if n != 1 or e in sk]  # a skipped event applied too
        by_agg = collections.defaultdict(list)
        for _, eid, agg, seq, _ in eff:
            by_agg[agg].append((seq, eid))
        first_by_agg = collections.defaultdict(list)
        for agg, seq, eid in first_order:
            if eid in committed:
                first_by_agg[agg].append((seq, eid))
        bad_applied, redelivered_applied = split_violations(order_violations(by_agg), last_info)
        # A skipped head: the aggregate's later events applied after the skip, its earlier ones before.
        before_skip = 0
        if parking:
            for eid, (agg, s, at) in sk.items():
                for seq, other in by_agg.get(agg, []):
                    t = effect_at.get((c, other))
                    if t is not None and ((seq > s and t <= at) or (seq < s and t >= at)):
                        before_skip += 1
            bad_applied += before_skip
        bad_first, redelivered_first = split_violations(order_violations(first_by_agg), first_info)
        per[c] = {
            "received": sum(receipts.values()),
            "distinct_received": len(receipts),
            "applied": len(applied),
            "lost": len(lost),
            "lost_ids": lost[:20],
            "lost_all": lost,
            "unexpected": len(unexpected),
            "unexpected_ids": unexpected[:20],
            "duplicates": dups,
            "max_deliveries_of_one_event": max_dup + 1,
            "effects_not_once": len(not_once),
            "order_violations_applied": bad_applied,
            "order_violations_first_delivery": bad_first,
            "reordered_by_redelivery_flagged_stale": max(redelivered_applied, redelivered_first),
        }
        if parking:
            per[c].update({
                "skipped": len(sk),
                "skipped_not_permanent": len(set(sk) - expected_skips),
                "permanent_not_skipped": len(expected_skips - set(sk)),
                "applied_out_of_turn_with_a_skip": before_skip,
                "failed_runs": dict(failed_runs(os.path.join(d, "consumer-%s.log" % c))),
            })

    allowed = faults["duplicates_allowed"]
    total = {
        "committed": len(committed),
        "late_committed": len(late),
        "late_lost": sum(1 for p in per.values() for e in p["lost_all"] if e in late),
        "rolled_back": len(rolled_back),
        "unknown_resolved": resolved,
        "txid_status_wrong": len(txid_wrong),
        "received": sum(p["received"] for p in per.values()),
        "lost": sum(p["lost"] for p in per.values()) + len(missing_in_db),
        "unexpected": sum(p["unexpected"] for p in per.values()) + len(rolled_back_in_db),
        "duplicates": max((p["duplicates"] for p in per.values()), default=0),
        "duplicates_allowed": allowed,
        "effects_not_once": sum(p["effects_not_once"] for p in per.values()),
        "order_violations": sum(p["order_violations_applied"] + p["order_violations_first_delivery"] for p in per.values()) + seq_gaps,
        "reordered_by_redelivery": sum(p["reordered_by_redelivery_flagged_stale"] for p in per.values()),
    }
    if parking:
        total["skipped"] = sum(p["skipped"] for p in per.values())
        total["skips_as_expected"] = all(p["skipped_not_permanent"] == 0 and p["permanent_not_skipped"] == 0
                                         for p in per.values())
        runs = collections.Counter()
        for p in per.values():
            runs.update(p["failed_runs"])
        total["failed_runs"] = dict(runs)
        classes = collections.Counter(failing_class(a, parking["fail_pct"]) for a in seqs)
        total["failing_aggregates"] = {k: v for k, v in classes.items() if k}
    problems = []
    if parking:
        for c, p in per.items():
            if p["skipped_not_permanent"]:
                problems.append("%s: %d skipped events that were no permanent failure" % (c, p["skipped_not_permanent"]))
            if p["permanent_not_skipped"]:
                problems.append("%s: %d permanent failures not skipped" % (c, p["permanent_not_skipped"]))
        if db.get("held_left"):
            problems.append("%d aggregates still held after the drain" % db["held_left"])
    if total["lost"]:
        problems.append("lost %d" % total["lost"])
    if total["unexpected"]:
        problems.append("unexpected %d" % total["unexpected"])
    if total["duplicates"] > allowed:
        problems.append("duplicates %d > allowed %d" % (total["duplicates"], allowed))
    if total["effects_not_once"]:
        problems.append("effects applied other than once: %d" % total["effects_not_once"])
    if total["order_violations"]:
        problems.append("per-aggregate order violations: %d" % total["order_violations"])
    if missing_in_db:
        problems.append("%d committed events missing from the table" % len(missing_in_db))
    if rolled_back_in_db:
        problems.append("%d rolled-back events present in the table" % len(rolled_back_in_db))
    if unlogged_in_db:
        problems.append("%d table rows no writer logged" % len(unlogged_in_db))
    if status.get("PENDING", 0) or status.get("FAILED", 0):
        problems.append("left in the table: %d PENDING, %d FAILED" % (status.get("PENDING", 0), status.get("FAILED", 0)))
    both = [e for e in committed if e in rolled_back]
    if both:
        problems.append("%d event ids logged both committed and not committed (writer error)" % len(both))
    if bad_lines:
        problems.append("writer log problems: %s" % bad_lines[:3])
    if total["committed"] == 0:
        problems.append("no event was committed: the scenario tested nothing")
    for problem in faults.get("problems", []):
        problems.append(problem)
    for p in per.values():
        del p["lost_all"]
    return {
        "total": total,
        "consumers": per,
        "table": {"statuses": dict(status), "missing_committed": len(missing_in_db),
                  "rolled_back_present": len(rolled_back_in_db), "unlogged": len(unlogged_in_db)},
        "seq_gaps": seq_gaps,
        "problems": problems,
        "passed": not problems,
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: check.py SCENARIO_DIR")
    print(json.dumps(check(sys.argv[1]), indent=2))
