#!/usr/bin/env bash
# Issue 30: what a seq given by the relay would cost the drain, measured in the relay itself. The
# write reaches its goal only without the per-aggregate counter row in the writer's transaction
# (bench/results/issue-30/write_statements-2.md); the seq must then be given by the relay, in publish
# order, before it publishes. relay_seq.sh measured that statement alone at the server; this runs
# bench E with it in the relay's read.
#
#   bench/experiments/relay_seq_drain.sh [--pairs N] [--drain-sizes LIST] [--out FILE]
#
# 1. Builds relay_bench and its drain child in a worktree of HEAD ($OUTBOX_RUN_DIR/exp-relay_seq_drain)
#    with issue-30-relay-seq.patch applied: with OUTBOX_EXPERIMENT_RELAY_SEQ set, the relay's read
#    is one statement that also upserts the counters of the batch's aggregates (by the batch's count
#    of each) and keeps every event's seq (one row a batch: positions and seqs as two arrays), as a
#    relay numbering events would have to before publishing. The relay still sends the writer's seq.
# 2. N pairs (default 3) of `relay_bench --only E --drain-sizes LIST` (default 100000,1000000), the
#    plain read then the numbering one: Rc / Bc of each size, the CPU stolen on both sides, and the
#    CPU per event of the relay, RabbitMQ and PostgreSQL during each Rc.
# Writes a Markdown report (default bench/results/issue-30/relay_seq_drain.md). Needs the services
# of scripts/services.sh (started if down).
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)"
pairs=3
drain_sizes=100000,1000000
out="$root/bench/results/issue-30/relay_seq_drain.md"
name=relay_seq_drain
help_lines='2,19p'
patch=issue-30-relay-seq.patch
extra=--drain-sizes
# shellcheck source=bench/experiments/patched_common.sh
source "$root/bench/experiments/patched_common.sh" "$@"
for ((k = 1; k <= pairs; k++)); do
    for side in plain numbering; do
        if [[ $side == numbering ]]; then export OUTBOX_EXPERIMENT_RELAY_SEQ=1; else unset OUTBOX_EXPERIMENT_RELAY_SEQ; fi
        "$bin" --only E --drain-sizes "$drain_sizes" --no-retry --json "$work/$side-$k.json" >"$work/$side-$k.log" 2>&1 ||
            { tail -20 "$work/$side-$k.log" >&2; exit 1; }
        outbox_log "pair $k, $side: done"
    done
done
unset OUTBOX_EXPERIMENT_RELAY_SEQ
mkdir -p "$(dirname -- "$out")"
python3 - "$work" "$pairs" "$out" "$rev" "$drain_sizes" <<'PY'
import datetime, json, statistics, sys
work, pairs, out, rev, sizes = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
label = lambda n: f"{n // 1000000}M" if n >= 1000000 and n % 1000000 == 0 else f"{n // 1000}k"
keys = [label(int(s)) for s in sizes.split(",")]
rows, ratios = [], {}
for k in range(1, pairs + 1):
    for side in ("plain", "numbering"):
        sc = {s["key"]: s for s in json.load(open(f"{work}/{side}-{k}.json"))["scenarios"]}
        for key in keys:
            r, b = sc[f"Rc-{key}"], sc[f"Bc-{key}"]
            ratio = r["events_per_s"] / b["events_per_s"]
            per = lambda s, f: 1e6 * s[f] / s["events"]
            rows.append(f"| {k} | {side} | Rc-{key} / Bc-{key} | {ratio:.2f} | {r['events_per_s']:.0f} / "
                        f"{b['events_per_s']:.0f} | {per(r, 'client_cpu_s'):.1f}, {per(r, 'broker_cpu_s'):.1f}, "
                        f"{per(r, 'pg_cpu_s'):.1f} | {100 * r['cpu_steal']:.1f}% / {100 * b['cpu_steal']:.1f}% |")
            ratios.setdefault((side, key), []).append(ratio)
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
lines = [f"# Issue 30: the drain with the relay numbering the events ({now})", "",
         f"Measured the code of commit {rev}, with `bench/experiments/issue-30-relay-seq.patch` applied "
         f"(`bench/experiments/relay_seq_drain.sh --pairs {pairs} --drain-sizes {sizes}`; bench E, every event its "
         "own aggregate; the same binaries measure both sides, chosen by `OUTBOX_EXPERIMENT_RELAY_SEQ`). plain: the "
         "commit's read. numbering: the read in one statement with the upsert of the batch's aggregate counters "
         "and one row keeping the batch's positions and seqs (what a relay giving the seq in publish order would "
         "write before publishing). Each pair: plain, then numbering.", "",
         "| pair | relay read | figure | ratio | events/s (Rc / Bc) | CPU µs an event during Rc: relay, RabbitMQ, "
         "PostgreSQL | CPU stolen (Rc / Bc) |", "|---|---|---|---|---|---|---|", *rows, "",
         "Median ratio over the pairs: " + ", ".join(
             f"{side} Rc-{key} {statistics.median(ratios[(side, key)]):.2f}"
             for side in ("plain", "numbering") for key in keys) + ".", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
