#!/usr/bin/env bash
# Issue 30: what a seq given by the relay would cost the drain. The write's goal asks for the
# per-aggregate counter row to leave the writer's transaction (an advisory lock there instead:
# bench/results/issue-30/write_lock.md); the seq then has to be given by the relay, in publish order,
# before it publishes, and kept (a republish after a crash, a replay and the consumers' gap checks
# need the same seq again). This measures that statement at the server against the relay's read of
# the same events, per event (pgbench, prepared statements, one client, batches of the relay's
# default 2,000 events):
#   read        the relay's read of a batch: 2,000 event rows (256-byte payload) past a position
#   seq-new     the counters of the batch's 2,000 aggregates, each new (INSERT ... ON CONFLICT DO
#               UPDATE ... RETURNING, the aggregates given as one array), and the batch's positions
#               and seqs kept in one row (two bigint arrays)
#   seq-old     the same, every aggregate already counted (the counter's update path)
#   count-new   the counters of 2,000 new aggregates alone (the upsert, nothing returned or kept): the
#               least any seq given per aggregate costs
# Each side runs S seconds (default 10) per round, N rounds (default 3), after a CHECKPOINT; the
# server's CPU per event is read from /proc (every postgres process, reaped backends included).
#
#   bench/experiments/relay_seq.sh [--rounds N] [--seconds S] [--out FILE]
#
# Writes a Markdown report (default bench/results/issue-30/relay_seq.md). Needs the services of
# scripts/services.sh (started if down).
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)"
name=relay_seq
rounds=3
seconds=10
out="$root/bench/results/issue-30/relay_seq.md"
help_lines='2,21p'
# shellcheck source=bench/experiments/pgbench_common.sh
source "$root/bench/experiments/pgbench_common.sh" "$@"
batch=2000
rows=400000
outbox_log "filling $rows event rows"
psql "$OUTBOX_PG_URL" -v ON_ERROR_STOP=1 -q <<SQL
CREATE SCHEMA $schema;
CREATE TABLE $schema.ev (position bigint PRIMARY KEY, outbox_id uuid NOT NULL, event_type text NOT NULL,
    aggregate_type text NOT NULL, aggregate_id text NOT NULL, seq bigint NOT NULL, operation text NOT NULL,
    payload json NOT NULL, previous_payload json, metadata json NOT NULL DEFAULT '{}', actor text,
    created_at timestamptz NOT NULL DEFAULT now(), idempotency_key text);
INSERT INTO $schema.ev SELECT g, gen_random_uuid(), 'OrderCreated', 'ORD', 'a' || g, 1, 'POST',
    '$payload', NULL, '{"k":"v"}', 'user', now(), NULL FROM generate_series(1, $rows) g;
CREATE TABLE $schema.agg (aggregate_type text, aggregate_id text, last_seq bigint NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id));
INSERT INTO $schema.agg SELECT 'ORD', 'old' || g, 1 FROM generate_series(1, $rows) g;
CREATE TABLE $schema.seqs (from_position bigint PRIMARY KEY, positions bigint[] NOT NULL, seqs bigint[] NOT NULL);
CREATE SEQUENCE $schema.batch_seq;
VACUUM ANALYZE $schema.ev;
VACUUM ANALYZE $schema.agg;
SQL
# pgbench scripts. The read's start and the old aggregates' first are random batches of the table.
cat >"$work/read.sql" <<SQL
\set p random(0, $((rows - batch)))
SELECT position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,
    previous_payload, metadata, actor, date_part('epoch', created_at) FROM $schema.ev
    WHERE position > :p ORDER BY position LIMIT $batch;
SQL
seq_sql() { # PREFIX FIRST-EXPR -> the statement giving a batch of aggregates their seqs, kept
    cat <<SQL
\set b random(0, $((rows / batch - 1)))
WITH a AS (SELECT 'ORD'::text AS t, '$1' || g AS id, g AS position
        FROM generate_series(:b * $batch + 1, :b * $batch + $batch) g),
    c AS (INSERT INTO $schema.agg AS x (aggregate_type, aggregate_id, last_seq) SELECT t, id, 1 FROM a
        ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = x.last_seq + 1
        RETURNING x.aggregate_id, x.last_seq)
INSERT INTO $schema.seqs SELECT nextval('$schema.batch_seq'), array_agg(a.position ORDER BY a.position),
    array_agg(c.last_seq ORDER BY a.position) FROM a JOIN c ON c.aggregate_id = a.id;
SQL
}
# New aggregates: a name no earlier batch used (the batch number and a per-run counter).
seq_sql "new' || :client_id || '-' || (extract(epoch from clock_timestamp()) * 1000000)::bigint || '-" >"$work/seq-new.sql"
seq_sql "old" >"$work/seq-old.sql"
cat >"$work/count-new.sql" <<SQL
\set b random(0, $((rows / batch - 1)))
INSERT INTO $schema.agg AS x (aggregate_type, aggregate_id, last_seq)
    SELECT 'ORD', 'cnt' || :client_id || '-' || (extract(epoch from clock_timestamp()) * 1000000)::bigint || '-' || g, 1
    FROM generate_series(1, $batch) g
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = x.last_seq + 1;
SQL
sides=(read seq-new seq-old count-new)
pg_cpu_ticks() { # user+system ticks of every postgres process, and of the reaped backends
    local total=0 pid f
    for pid in $(pgrep -x postgres); do
        f=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        f=${f##*) }
        read -ra v <<<"$f"
        total=$((total + v[11] + v[12] + v[13] + v[14]))
    done
    echo "$total"
}
hz=$(getconf CLK_TCK)
: >"$work/rows"
for ((k = 1; k <= rounds; k++)); do
    for side in "${sides[@]}"; do
        psql "$OUTBOX_PG_URL" -qc "CHECKPOINT" >/dev/null
        sleep 0.5 # the CHECKPOINT's backend reaped before the count starts
        s0=$(cpu)
        c0=$(pg_cpu_ticks)
        res=$(pgbench -n -M prepared -c 1 -j 1 -T "$seconds" -f "$work/$side.sql" "$OUTBOX_PG_URL" 2>"$work/err") ||
            { cat "$work/err" >&2; outbox_die "pgbench failed on side $side"; }
        sleep 0.5 # pgbench's backend reaped, its CPU in the postmaster's cutime
        c1=$(pg_cpu_ticks)
        st=$(steal "$s0" "$(cpu)")
        n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$res")
        lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$res")
        [[ -n "$n" && -n "$lat" ]] || { echo "$res" >&2; outbox_die "no figures from pgbench on side $side"; }
        echo "$k $side $n $lat $((c1 - c0)) $st" >>"$work/rows"
        outbox_log "round $k, $side: $n batches, $lat ms a batch, $((c1 - c0)) ticks of postgres, $st% stolen"
    done
done
mkdir -p "$(dirname -- "$out")"
python3 - "$work/rows" "$out" "$rev" "$rounds" "$seconds" "$batch" "$hz" <<'PY'
import collections, datetime, statistics, sys
rows_file, out, rev, rounds, seconds, batch, hz = sys.argv[1:]
batch, hz = int(batch), int(hz)
sides = ["read", "seq-new", "seq-old", "count-new"]
per = collections.defaultdict(list)  # side -> [(us a batch, server cpu us an event, stolen)]
for k, side, n, lat, ticks, st in (line.split() for line in open(rows_file)):
    n = int(n)
    per[side].append((float(lat) * 1000 / batch, 1e6 * int(ticks) / hz / max(1, n * batch), st))
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
lines = [f"# Issue 30: what a seq given by the relay would cost the drain ({now})", "",
         f"Measured the code of commit {rev}, its scripts (`bench/experiments/relay_seq.sh --rounds {rounds} "
         f"--seconds {seconds}`): pgbench, prepared statements, one client, batches of {batch} events. Per event: "
         "the statement's time (pgbench's latency over the batch) and PostgreSQL's CPU (every postgres process, "
         "from /proc).", "",
         "| side | what one statement does |", "|---|---|",
         f"| read | the relay's read of a batch: {batch} event rows (256-byte payload) past a position |",
         f"| seq-new | the counters of {batch} new aggregates (INSERT ... ON CONFLICT DO UPDATE), the batch's positions and seqs kept in one row |",
         "| seq-old | the same, every aggregate already counted (the update path) |",
         f"| count-new | the counters of {batch} new aggregates alone (the upsert, nothing returned or kept) |", "",
         "| round | " + " | ".join(sides) + " |", "|---" * (len(sides) + 1) + "|"]
for k in range(int(rounds)):
    cells = []
    for s in sides:
        t, c, st = per[s][k]
        cells.append(f"{t:.2f} µs, CPU {c:.2f} µs ({st}% stolen)")
    lines.append(f"| {k + 1} | " + " | ".join(cells) + " |")
med = {s: (statistics.median(x[0] for x in per[s]), statistics.median(x[1] for x in per[s])) for s in sides}
lines += ["", "Medians per event (time, PostgreSQL's CPU): " +
          ", ".join(f"{s} {med[s][0]:.2f} µs, {med[s][1]:.2f} µs" for s in sides) + ".", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
