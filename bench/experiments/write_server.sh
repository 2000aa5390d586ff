#!/usr/bin/env bash
# Issue 30's write, at the server alone: what each part of the write costs PostgreSQL, without the
# library's client side (pgbench, prepared statements, 4 clients). Each side is one business row
# (bench W's bench_orders row) plus:
#   bare     the event row in a copy of the events table without key, index or partitions (W-row)
#   pk       the event row with its position from a sequence, into a table with its primary key
#   part     the same into a range-partitioned table like the events table (the row alone of the write)
#   params   part as the library sends it: INSERT ... SELECT, every value a text parameter cast to
#            its type (uuid, json, timestamptz), as outbox_write's statement does
#   lock     part, after a transaction-scoped advisory lock on the aggregate (no counter)
#   counter  part, after the aggregate's counter row by INSERT ... ON CONFLICT DO UPDATE (this
#            release's write statement), a new aggregate per event
#   counter-100  the same, about 100 events per aggregate (200 per client: the counter's update path)
#
#   bench/experiments/write_server.sh [--rounds N] [--seconds S] [--out FILE]
#
# Rounds (default 3) of every side in turn, S seconds each (default 15), each after a CHECKPOINT,
# with the CPU stolen around each. Writes a Markdown report (default bench/results/issue-30/write_server.md): TPS per side and
# round, each side's median ratio to bare. Needs the services of scripts/services.sh (started if down).
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)"
name=write_server
rounds=3
seconds=15
out="$root/bench/results/issue-30/write_server.md"
help_lines='2,19p'
# shellcheck source=bench/experiments/pgbench_common.sh
source "$root/bench/experiments/pgbench_common.sh" "$@"
psql "$OUTBOX_PG_URL" -v ON_ERROR_STOP=1 -q <<SQL
CREATE SCHEMA $schema;
CREATE TABLE $schema.orders (id bigserial PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL,
    body text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE $schema.shape (position bigint NOT NULL, outbox_id uuid NOT NULL, event_type text NOT NULL,
    aggregate_type text NOT NULL, aggregate_id text NOT NULL, seq bigint NOT NULL, operation text NOT NULL,
    payload json NOT NULL, previous_payload json, metadata json NOT NULL DEFAULT '{}', actor text,
    created_at timestamptz NOT NULL DEFAULT now(), idempotency_key text);
CREATE TABLE $schema.bare (LIKE $schema.shape INCLUDING DEFAULTS);
CREATE TABLE $schema.pk (LIKE $schema.shape INCLUDING DEFAULTS, PRIMARY KEY (position));
CREATE TABLE $schema.part (LIKE $schema.shape INCLUDING DEFAULTS, PRIMARY KEY (position)) PARTITION BY RANGE (position);
CREATE TABLE $schema.part_d PARTITION OF $schema.part DEFAULT;
CREATE TABLE $schema.part_1 PARTITION OF $schema.part FOR VALUES FROM (0) TO (1000000000);
CREATE TABLE $schema.part_2 PARTITION OF $schema.part FOR VALUES FROM (1000000000) TO (2000000000);
CREATE SEQUENCE $schema.position_seq;
CREATE TABLE $schema.agg (aggregate_type text, aggregate_id text, last_seq bigint NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id));
SQL
biz="INSERT INTO $schema.orders (customer, amount, body) VALUES ('c', 12.50, repeat('w', 256));"
cols="(position, aggregate_type, aggregate_id, seq, outbox_id, event_type, operation, payload, metadata, actor, created_at)"
vals="gen_random_uuid(), 'OrderCreated', 'POST', '$payload', '{\"k\":\"v\"}', 'user', now()"
agg="'a' || :client_id || '-' || :r"
side_sql() { # SIDE -> the pgbench script
    local agg_set='\set r random(1, 1000000000)'
    [[ $1 == counter-100 ]] && agg_set='\set r random(1, 200)'
    printf '%s\nBEGIN;\n%s\n' "$agg_set" "$biz"
    case $1 in
        bare) echo "INSERT INTO $schema.bare $cols VALUES (0, 'ORD', $agg, 1, $vals);" ;;
        pk) echo "INSERT INTO $schema.pk $cols VALUES (nextval('$schema.position_seq'), 'ORD', $agg, 1, $vals);" ;;
        part) echo "INSERT INTO $schema.part $cols VALUES (nextval('$schema.position_seq'), 'ORD', $agg, 1, $vals);" ;;
        params) echo "INSERT INTO $schema.part $cols SELECT nextval('$schema.position_seq'), CAST(:atype AS text)," \
                     "CAST('a' || :client_id || '-' || :r AS text), 0, CAST(CAST(:uuid AS text) AS uuid)," \
                     "CAST(:etype AS text), CAST(:op AS text), CAST(CAST(:payload AS text) AS json)," \
                     "CAST(CAST(:meta AS text) AS json), CAST(:actor AS text), CAST(CAST(:created AS text) AS timestamptz);" ;;
        lock) echo "INSERT INTO $schema.part $cols SELECT nextval('$schema.position_seq'), 'ORD', $agg, 0, $vals FROM" \
                   "(SELECT pg_advisory_xact_lock(hashtextextended('ORD' || chr(31) || $agg, 0))) AS l;" ;;
        counter | counter-100)
            echo "WITH s AS (INSERT INTO $schema.agg AS a (aggregate_type, aggregate_id, last_seq) VALUES ('ORD', $agg, 1)" \
                 "ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1" \
                 "RETURNING a.aggregate_type, a.aggregate_id, a.last_seq) INSERT INTO $schema.part $cols SELECT" \
                 "nextval('$schema.position_seq'), s.aggregate_type, s.aggregate_id, s.last_seq, $vals FROM s;" ;;
    esac
    echo "COMMIT;"
}
sides=(bare pk part params lock counter counter-100)
# The values of params' parameters (pgbench -D: sent as text parameters of the prepared statement).
defs=(-D "atype=ORD" -D "uuid=0190f3c4-7b1e-7c2d-8e3f-0123456789ab" -D "etype=OrderCreated" -D "op=POST"
      -D "payload=$payload" -D 'meta={"k":"v"}' -D "actor=user" -D "created=2026-11-27T12:00:00.123456Z")
for side in "${sides[@]}"; do side_sql "$side" >"$work/$side.sql"; done
: >"$work/rows"
for ((k = 1; k <= rounds; k++)); do
    for side in "${sides[@]}"; do
        # Each side starts after a checkpoint, so none pays for one the side before it left.
        psql "$OUTBOX_PG_URL" -qc "CHECKPOINT" >/dev/null
        s0=$(cpu)
        tps=$(pgbench -n -M prepared -c 4 -j 2 -T "$seconds" "${defs[@]}" -f "$work/$side.sql" "$OUTBOX_PG_URL" 2>"$work/err" |
            sed -n 's/^tps = \([0-9.]*\) .*/\1/p') || true
        [[ -n "$tps" ]] || { cat "$work/err" >&2; outbox_die "pgbench failed on side $side"; }
        st=$(steal "$s0" "$(cpu)")
        echo "$k $side $tps $st" >>"$work/rows"
        outbox_log "round $k, $side: $tps TPS, $st% stolen"
    done
done
mkdir -p "$(dirname -- "$out")"
python3 - "$work/rows" "$out" "$rev" "$rounds" "$seconds" <<'PY'
import collections, datetime, statistics, sys
rows_file, out, rev, rounds, seconds = sys.argv[1:]
rows = [line.split() for line in open(rows_file)]
tps = collections.defaultdict(dict)
for k, side, t, st in rows:
    tps[int(k)][side] = (float(t), st)
sides = ["bare", "pk", "part", "params", "lock", "counter", "counter-100"]
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
lines = [f"# Issue 30: what the write costs the server, part by part ({now})", "",
         f"Measured the code of commit {rev}, its scripts (`bench/experiments/write_server.sh --rounds {rounds} "
         f"--seconds {seconds}`): pgbench, prepared statements, 4 clients, no library code. Each transaction is "
         "bench W's business row plus the side's event write; ratios are to `bare` in the same round (the "
         "event row into a table without key or index: W-row's statement).", "",
         "| side | what the transaction adds to the business row |", "|---|---|",
         "| bare | the event row, no key, no index, no partitions (W-row) |",
         "| pk | the event row, its position from a sequence, a primary key |",
         "| part | the same into a range-partitioned table, as the events table is |",
         "| params | part as outbox_write sends it: INSERT ... SELECT, every value a text parameter cast to its type |",
         "| lock | part, after an advisory lock on the aggregate (no counter, seq 0) |",
         "| counter | part, after the aggregate's counter row (INSERT ... ON CONFLICT DO UPDATE; a new aggregate each) |",
         "| counter-100 | the same, 100 events per aggregate (the counter's update path) |", "",
         "| round | " + " | ".join(sides) + " |", "|---" * (len(sides) + 1) + "|"]
ratios = collections.defaultdict(list)
for k in sorted(tps):
    base = tps[k]["bare"][0]
    cells = []
    for s in sides:
        t, st = tps[k][s]
        ratios[s].append(t / base)
        cells.append(f"{t:.0f} TPS ({t / base:.2f}; {st}% stolen)")
    lines.append(f"| {k} | " + " | ".join(cells) + " |")
lines += ["", "Median ratio to bare: " + ", ".join(f"{s} {statistics.median(ratios[s]):.3f}" for s in sides) + ".", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
