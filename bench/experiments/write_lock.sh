#!/usr/bin/env bash
# Issue 30's write experiment, reproducible: what outbox_write costs with other write statements than
# the counter row's, through the whole library path (bench W), and what a transaction-scoped advisory
# lock per aggregate does to a transaction that writes many aggregates.
#
#   bench/experiments/write_lock.sh [--pairs N] [--sides "counter lock ..."] [--out FILE]
#
# 1. Builds relay_bench in a worktree of HEAD ($OUTBOX_RUN_DIR/exp-write_lock) with
#    issue-30-write-lock.patch applied: OUTBOX_EXPERIMENT_WRITE chooses the write statement.
#    counter (unset): this commit's write, the counter row by INSERT ... ON CONFLICT DO UPDATE.
#    lock: pg_advisory_xact_lock(hashtextextended(type || chr(31) || id, 0)) and the event row with
#      seq 0, no counter row (a ceiling: the seq a relay would give costs the relay, not the writer).
#    none: the event row alone (its position from the sequence, its primary key), no lock, no
#      counter: the ceiling of any write into this events table, order and seq given up.
#    update-first: the counter by an UPDATE, and by INSERT ... ON CONFLICT only when no row was found.
#    The same binary measures every side.
# 2. N rounds (default 3) of `relay_bench --only W`, one per side in the order given (default
#    "counter lock"): W-off / W-row and W-off-100 / W-row with their slice-pair medians and the CPU
#    stolen on each side.
# 3. The lock table (defaults: max_locks_per_transaction 64): one transaction writing 100,000 events of
#    distinct aggregates through the counter, and one taking 100,000 distinct advisory locks.
# Writes a Markdown report (default bench/results/issue-30/write_lock.md). Needs the services of
# scripts/services.sh (started if down).
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)"
pairs=3
sides="counter lock"
out="$root/bench/results/issue-30/write_lock.md"
name=write_lock
help_lines='2,23p'
patch=issue-30-write-lock.patch
extra=--sides
# shellcheck source=bench/experiments/patched_common.sh
source "$root/bench/experiments/patched_common.sh" "$@"
for ((k = 1; k <= pairs; k++)); do
    for side in $sides; do
        case $side in
            counter) unset OUTBOX_EXPERIMENT_WRITE ;;
            lock | none | update-first) export OUTBOX_EXPERIMENT_WRITE=$side ;;
            *) echo "write_lock: unknown side $side" >&2; exit 2 ;;
        esac
        "$bin" --only W --no-retry --json "$work/$side-$k.json" >"$work/$side-$k.log" 2>&1 ||
            { tail -20 "$work/$side-$k.log" >&2; exit 1; }
        outbox_log "pair $k, $side: $(grep -c 'against the same event row' "$work/$side-$k.log") floor figures"
    done
done
unset OUTBOX_EXPERIMENT_WRITE
lock_table() { # SQL -> "ok" or the error
    psql "$OUTBOX_PG_URL" -v ON_ERROR_STOP=1 -qAtc "$1" >/dev/null 2>"$work/err" && echo ok || head -1 "$work/err"
}
schema="exp_write_lock_$$"
psql "$OUTBOX_PG_URL" -qc "CREATE SCHEMA $schema; CREATE TABLE $schema.ctr (aggregate_type text, aggregate_id text, last_seq bigint NOT NULL, PRIMARY KEY (aggregate_type, aggregate_id))"
ctr=$(lock_table "BEGIN; INSERT INTO $schema.ctr AS a SELECT 'ORD', g::text, 1 FROM generate_series(1, 100000) g ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1; COMMIT;")
adv=$(lock_table "BEGIN; SELECT count(pg_advisory_xact_lock(hashtextextended('ORD' || chr(31) || g::text, 0))) FROM generate_series(1, 100000) g; COMMIT;")
psql "$OUTBOX_PG_URL" -qc "DROP SCHEMA $schema CASCADE"
locks=$(psql "$OUTBOX_PG_URL" -qAtc "SELECT current_setting('max_locks_per_transaction') || ' x (' || current_setting('max_connections') || ' + ' || current_setting('max_prepared_transactions') || ')'")
mkdir -p "$(dirname -- "$out")"
python3 - "$work" "$pairs" "$out" "$rev" "$ctr" "$adv" "$locks" "$sides" <<'PY'
import datetime, json, re, statistics, sys
work, pairs, out, rev, ctr, adv, locks, sides = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
sides = sides.split()
pat = re.compile(r"outbox_write(, 100 events per aggregate,)? against the same event row by a plain INSERT: (\d+) TPS, "
                 r"p99 ([\d.]+) ms \(slice pairs: median ([\d.]+)\).* ratio ([\d.]+) .*CPU stolen ([\d.]+)% / ([\d.]+)%")
rows, ratios = [], {}
for k in range(1, pairs + 1):
    for side in sides:
        for line in open(f"{work}/{side}-{k}.log"):
            m = pat.search(line)
            if not m:
                continue
            mode = "W-off-100" if m.group(1) else "W-off"
            rows.append(f"| {k} | {side} | {mode} | {m.group(5)} | {m.group(4)} | {m.group(2)} | {m.group(3)} | "
                        f"{m.group(6)}% / {m.group(7)}% |")
            ratios.setdefault((side, mode), []).append(float(m.group(5)))
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
lines = [f"# Issue 30: the write's statement, other ways ({now})", "",
         f"Measured the code of commit {rev}, with `bench/experiments/issue-30-write-lock.patch` applied "
         f"(`bench/experiments/write_lock.sh --pairs {pairs} --sides \"{' '.join(sides)}\"`; the same binary "
         "measures every side, chosen by `OUTBOX_EXPERIMENT_WRITE`). counter: the commit's write (the counter row "
         "by INSERT ... ON CONFLICT DO UPDATE). lock: an advisory lock per aggregate and no counter, seq 0 (the "
         "ceiling of a writer that only locks, with the seq given later by the relay). none: the event row "
         "alone, its position and primary key, no lock and no counter (the ceiling of any write into this "
         "events table). update-first: the counter by an UPDATE, by INSERT ... ON CONFLICT only when it found "
         "no row. Sides in the order given, one round after another.", "",
         "| round | write | figure | ratio to W-row | slice-pair median | TPS | p99 ms | CPU stolen (write / row) |",
         "|---|---|---|---|---|---|---|---|", *rows, "",
         "Median ratio over the pairs: " + ", ".join(
             f"{side} {mode} {statistics.median(v):.2f}" for (side, mode), v in sorted(ratios.items())) + ".", "",
         f"The lock table (max_locks_per_transaction x (max_connections + max_prepared_transactions) = {locks}): "
         f"one transaction writing 100,000 counter rows of distinct aggregates: **{ctr}**; one transaction taking "
         f"100,000 distinct transaction-scoped advisory locks: **{adv}**.", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
