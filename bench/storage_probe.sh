#!/usr/bin/env bash
# What each part of the event row's storage costs a writer: the measurements behind the storage
# design of issue 19 (the write goal: business transaction + outbox_write >= 0.90 x the same
# transaction + a bare INSERT of the same event row).
#
#   bench/storage_probe.sh [--seconds S] [--rounds N] [--out FILE]
#
# Runs pgbench (4 clients, 2 threads, prepared statements, synchronous_commit on) on the throwaway
# PostgreSQL of scripts/services.sh, in a schema of its own (storage_probe, dropped before and after), with
# the modes below interleaved round by round, and writes a Markdown report (default
# bench/results/issue-19/storage_probe.md) with each mode's median TPS over the rounds and its
# ratio to the floor ("row") measured in the same run. Each round starts at the next mode in turn,
# with a CHECKPOINT before each measurement. Every transaction is the W scenario's
# business row (a 256-byte text column) plus, by mode:
#   biz          nothing more
#   row          the event row into a bare copy of the table (no key, no index): the floor
#   row+ctr      the row, plus the per-aggregate counter upsert (defined; not in the modes run)
#   v1           today's write statement: counter upsert + the event row into a table with the
#                schema-v1 keys and partial indexes (outbox_id, (aggregate, seq), pending,
#                unpublished, published_at, failed, idempotency key)
#   pos          an event row keyed only by a position from a sequence, no counter
#   pos+ctr      the same with the counter upsert
#   part         the position-keyed row into a table range-partitioned on position (partitions
#                of 1M positions and a default one), no counter
#   part+ctr     the same with the counter upsert: storage version 2's write statement
#   part+ctrC    part+ctr with the counter's key columns in the "C" collation
#   part+lockn   part+lock on a number the client computed (no hashing in the server)
#   part+lock    the position-keyed row into the partitioned table, after a transaction-scoped
#                advisory lock on the aggregate (no counter row; issue 30's direction)
#   part+ctrU    part+ctr with an UNLOGGED counter table (what the counter's WAL costs; not safe)
#   part+ctrF    part+ctr with the counter table at fillfactor 70
#   part+ctr2    part+ctr as two statements: the counter upsert, then the event row by VALUES
# A new aggregate per transaction, as in bench W; event ids are time-ordered (like uuid v7).
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
seconds=8
rounds=5
out="$root/bench/results/issue-19/storage_probe.md"
name=storage_probe
help_lines='2,24p'
options="--seconds --rounds --out"
# shellcheck source=bench/experiment_lib.sh
source "$root/bench/experiment_lib.sh" "$@"
pgbench="$(command -v pgbench || true)"
[[ -n "$pgbench" ]] || pgbench="$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | tail -1)"
[[ -x "$pgbench" ]] || { echo "storage_probe: pgbench not found (Debian: postgresql-client)" >&2; exit 1; }
trap 'rm -rf -- "$work"' EXIT

psql "$OUTBOX_PG_URL" -q -v ON_ERROR_STOP=1 <<'SQL'
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS storage_probe CASCADE;
CREATE SCHEMA storage_probe;
SET search_path = storage_probe;
CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL,
                     body text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE v1 (
    outbox_id uuid PRIMARY KEY, event_type text NOT NULL, aggregate_type text NOT NULL,
    aggregate_id text NOT NULL, seq bigint NOT NULL,
    operation text NOT NULL CHECK (operation IN ('POST', 'PUT', 'PATCH', 'DELETE')),
    payload json NOT NULL, previous_payload json, metadata json NOT NULL DEFAULT '{}', actor text,
    created_at timestamptz NOT NULL DEFAULT now(), published_at timestamptz,
    status text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'PUBLISHED', 'FAILED')),
    retry_count integer NOT NULL DEFAULT 0, error_message text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(), idempotency_key text,
    UNIQUE (aggregate_type, aggregate_id, seq));
CREATE INDEX ON v1 (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX ON v1 (aggregate_type, aggregate_id, seq) WHERE status <> 'PUBLISHED';
CREATE INDEX ON v1 (published_at) WHERE status = 'PUBLISHED';
CREATE INDEX ON v1 (created_at) WHERE status = 'FAILED';
CREATE UNIQUE INDEX ON v1 (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE TABLE row_bare (LIKE v1 INCLUDING DEFAULTS);
CREATE TABLE row_ctr (LIKE v1 INCLUDING DEFAULTS);
CREATE SEQUENCE position_seq;
CREATE TABLE pos (
    position bigint PRIMARY KEY, outbox_id uuid NOT NULL, event_type text NOT NULL,
    aggregate_type text NOT NULL, aggregate_id text NOT NULL, seq bigint NOT NULL,
    operation text NOT NULL CHECK (operation IN ('POST', 'PUT', 'PATCH', 'DELETE')),
    payload json NOT NULL, previous_payload json, metadata json NOT NULL DEFAULT '{}', actor text,
    created_at timestamptz NOT NULL DEFAULT now(), idempotency_key text);
CREATE TABLE pos_ctr (LIKE pos INCLUDING ALL);
CREATE SEQUENCE part_seq;
CREATE TABLE part (LIKE pos INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (position))
    PARTITION BY RANGE (position);
CREATE TABLE part_p0 PARTITION OF part FOR VALUES FROM (0) TO (1000000);
CREATE TABLE part_p1 PARTITION OF part FOR VALUES FROM (1000000) TO (2000000);
CREATE TABLE part_p2 PARTITION OF part FOR VALUES FROM (2000000) TO (3000000);
CREATE TABLE part_default PARTITION OF part DEFAULT;
CREATE TABLE part_ctr (LIKE part INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (position))
    PARTITION BY RANGE (position);
CREATE TABLE part_ctr_p0 PARTITION OF part_ctr FOR VALUES FROM (0) TO (1000000);
CREATE TABLE part_ctr_p1 PARTITION OF part_ctr FOR VALUES FROM (1000000) TO (2000000);
CREATE TABLE part_ctr_p2 PARTITION OF part_ctr FOR VALUES FROM (2000000) TO (3000000);
CREATE TABLE part_ctr_default PARTITION OF part_ctr DEFAULT;
CREATE TABLE counters_v1 (aggregate_type text, aggregate_id text, last_seq bigint NOT NULL,
                          PRIMARY KEY (aggregate_type, aggregate_id));
CREATE TABLE counters_row (LIKE counters_v1 INCLUDING ALL);
CREATE TABLE counters_pos (LIKE counters_v1 INCLUDING ALL);
CREATE TABLE counters_part (LIKE counters_v1 INCLUDING ALL);
CREATE TABLE counters_partc (aggregate_type text COLLATE "C", aggregate_id text COLLATE "C", last_seq bigint NOT NULL,
                             PRIMARY KEY (aggregate_type, aggregate_id));
CREATE UNLOGGED TABLE counters_partu (LIKE counters_v1 INCLUDING ALL);
CREATE TABLE counters_part2 (LIKE counters_v1 INCLUDING ALL);
CREATE TABLE counters_partf (LIKE counters_v1 INCLUDING ALL) WITH (fillfactor = 70);
SQL

payload="{\"p\":\"$(printf 'x%.0s' $(seq 1 240))\"}"
id="CAST(lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || substr(md5(random()::text), 1, 20) AS uuid)"
agg="'a' || :client_id || '-' || :r"
cols="event_type, operation, payload, metadata, actor, created_at"
vals="'OrderCreated', 'POST', CAST('$payload' AS json), CAST('{\"m\":1}' AS json), 'u', now()"
counter() { # the write's counter upsert as a CTE named s
    echo "WITH s AS (INSERT INTO storage_probe.$1 AS a (aggregate_type, aggregate_id, last_seq) VALUES ('ORD', $agg, 1) ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1 RETURNING a.aggregate_type, a.aggregate_id, a.last_seq)"
}
mode_sql() {
    case "$1" in
        biz) ;;
        row) echo "INSERT INTO storage_probe.row_bare (aggregate_type, aggregate_id, seq, outbox_id, next_attempt_at, $cols) VALUES ('ORD', $agg, 1, $id, now(), $vals);" ;;
        row+ctr) echo "$(counter counters_row) INSERT INTO storage_probe.row_ctr (aggregate_type, aggregate_id, seq, outbox_id, next_attempt_at, $cols) SELECT s.aggregate_type, s.aggregate_id, s.last_seq, $id, now(), $vals FROM s RETURNING seq;" ;;
        v1) echo "$(counter counters_v1) INSERT INTO storage_probe.v1 (aggregate_type, aggregate_id, seq, outbox_id, next_attempt_at, $cols) SELECT s.aggregate_type, s.aggregate_id, s.last_seq, $id, now(), $vals FROM s RETURNING seq;" ;;
        pos) echo "INSERT INTO storage_probe.pos (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) VALUES (nextval('storage_probe.position_seq'), 'ORD', $agg, 1, $id, $vals) RETURNING seq;" ;;
        pos+ctr) echo "$(counter counters_pos) INSERT INTO storage_probe.pos_ctr (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) SELECT nextval('storage_probe.position_seq'), s.aggregate_type, s.aggregate_id, s.last_seq, $id, $vals FROM s RETURNING seq;" ;;
        part) echo "INSERT INTO storage_probe.part (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) VALUES (nextval('storage_probe.part_seq'), 'ORD', $agg, 1, $id, $vals) RETURNING seq;" ;;
        part+ctrC) echo "$(counter counters_partc) INSERT INTO storage_probe.part_ctr (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) SELECT nextval('storage_probe.part_seq'), s.aggregate_type, s.aggregate_id, s.last_seq, $id, $vals FROM s RETURNING seq;" ;;
        part+lockn) echo "INSERT INTO storage_probe.part (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) SELECT nextval('storage_probe.part_seq'), 'ORD', $agg, 1, $id, $vals FROM (SELECT pg_advisory_xact_lock(:client_id * 1000000000000 + :r)) AS l RETURNING seq;" ;;
        part+lock) echo "INSERT INTO storage_probe.part (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) SELECT nextval('storage_probe.part_seq'), 'ORD', $agg, 1, $id, $vals FROM (SELECT pg_advisory_xact_lock(hashtextextended('ORD' || chr(31) || $agg, 0))) AS l RETURNING seq;" ;;
        part+ctrU) echo "$(counter counters_partu) INSERT INTO storage_probe.part_ctr (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) SELECT nextval('storage_probe.part_seq'), s.aggregate_type, s.aggregate_id, s.last_seq, $id, $vals FROM s RETURNING seq;" ;;
        part+ctrF) echo "$(counter counters_partf) INSERT INTO storage_probe.part_ctr (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) SELECT nextval('storage_probe.part_seq'), s.aggregate_type, s.aggregate_id, s.last_seq, $id, $vals FROM s RETURNING seq;" ;;
        part+ctr2) printf '%s\n%s\n' "INSERT INTO storage_probe.counters_part2 AS a (aggregate_type, aggregate_id, last_seq) VALUES ('ORD', $agg, 1) ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1 RETURNING a.last_seq \\gset" \
            "INSERT INTO storage_probe.part_ctr (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) VALUES (nextval('storage_probe.part_seq'), 'ORD', $agg, :last_seq, $id, $vals) RETURNING seq;" ;;
        part+ctr) echo "$(counter counters_part) INSERT INTO storage_probe.part_ctr (position, aggregate_type, aggregate_id, seq, outbox_id, $cols) SELECT nextval('storage_probe.part_seq'), s.aggregate_type, s.aggregate_id, s.last_seq, $id, $vals FROM s RETURNING seq;" ;;
    esac
}
modes=(${PROBE_MODES:-biz row v1 pos pos+ctr part part+ctr part+lock})
for m in "${modes[@]}"; do
    {
        echo '\set r random(1, 1000000000000)'
        echo 'BEGIN;'
        echo "INSERT INTO storage_probe.orders (customer, amount, body) VALUES (:client_id || '-' || :r, 99.99, repeat('b', 256));"
        mode_sql "$m"
        echo 'COMMIT;'
    } > "$work/$m.pgb"
done
for ((r = 1; r <= rounds; r++)); do
    # Each round starts at another mode, so no mode always runs after the same one; a CHECKPOINT
    # before each measurement keeps the previous mode's dirty pages out of it.
    n=${#modes[@]}
    for ((j = 0; j < n; j++)); do
        m="${modes[$(((j + r - 1) % n))]}"
        psql "$OUTBOX_PG_URL" -qc CHECKPOINT
        res="$(timeout $((seconds + 60)) "$pgbench" -n -M prepared -c 4 -j 2 -T "$seconds" -f "$work/$m.pgb" "$OUTBOX_PG_URL" 2>&1)" ||
            { echo "storage_probe: pgbench failed in mode $m: $res" >&2; exit 1; }
        tps="$(grep -oP 'tps = \K[0-9.]+(?= \(without)' <<<"$res")"
        [[ -n "$tps" ]] || { echo "storage_probe: no TPS from pgbench in mode $m: $res" >&2; exit 1; }
        echo "$m $tps" >> "$work/tps"
        echo "storage_probe: round $r $m $tps TPS" >&2
    done
done
psql "$OUTBOX_PG_URL" -qc "SET client_min_messages = warning; DROP SCHEMA storage_probe CASCADE"
commit="$(git -C "$root" rev-parse --short=12 HEAD)"
[[ -z "$(git -C "$root" status --porcelain -- core capi bench scripts ':!bench/results')" ]] || commit="$commit+uncommitted changes"
mkdir -p "$(dirname -- "$out")"
python3 - "$work/tps" "$out" "$commit" "$seconds" "$rounds" "${modes[@]}" <<'PY'
import statistics, sys, datetime
path, out, commit, seconds, rounds, *modes = sys.argv[1:]
tps = {}
for line in open(path):
    m, v = line.split()
    tps.setdefault(m, []).append(float(v))
med = {m: statistics.median(v) for m, v in tps.items()}
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
lines = [f"# Storage probe: what each part of the event row costs a writer ({now})", "",
         f"Measured the code of commit {commit}.", "",
         f"Written by `bench/storage_probe.sh`: pgbench, 4 clients, prepared, synchronous_commit on, "
         f"{rounds} rounds of {seconds} s per mode, modes interleaved (each round starting at the next mode, "
         f"a CHECKPOINT before each measurement); median TPS per mode; ratios against "
         f"`row` (the floor) and `biz` of the same run. Every transaction is one business row plus the mode's "
         f"statement; a new aggregate per transaction (bench W's worst case for the counter).", "",
         "| mode | median TPS | vs row (floor) | vs biz | TPS per round |", "|---|---|---|---|---|"]
for m in modes:
    lines.append(f"| {m} | {med[m]:,.0f} | {med[m] / med['row']:.2f} | {med[m] / med['biz']:.2f} | "
                 + ", ".join(f"{v:,.0f}" for v in tps[m]) + " |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
