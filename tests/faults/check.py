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
"""
import collections
import json
import os
import sys


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

    per = {}
    for c in consumers:
        receipts, first_order, first_info, last_info = read_consumer_log(os.path.join(d, "consumer-%s.log" % c))
        eff = sorted(effects.get(c, []))
        applied = {e[1]: e[4] for e in eff}
        lost = [e for e in committed if e not in applied]
        unexpected = sorted(set(e for e in receipts if e not in committed) | set(e for e in applied if e not in committed))
        dups = sum(n - 1 for n in receipts.values() if n > 1)
        max_dup = max(receipts.values(), default=1) - 1
        not_once = [e for e, n in applied.items() if n != 1]
        by_agg = collections.defaultdict(list)
        for _, eid, agg, seq, _ in eff:
            by_agg[agg].append((seq, eid))
        first_by_agg = collections.defaultdict(list)
        for agg, seq, eid in first_order:
            if eid in committed:
                first_by_agg[agg].append((seq, eid))
        bad_applied, redelivered_applied = split_violations(order_violations(by_agg), last_info)
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
    problems = []
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
