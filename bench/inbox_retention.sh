#!/usr/bin/env bash
# Inbox retention at size (issue 19, goal 3, "the inbox gets the same treatment"): the partitioned
# inbox of schema version 3 against the version-2 table, with the same rows and the same load.
#
#   bench/inbox_retention.sh [--rows-per-hour N] [--rate TPS] [--out FILE]
#
# For each mode, in a schema of its own on the throwaway PostgreSQL of scripts/services.sh:
#   v2  the version-2 inbox (one table), purged by the version-2 statement (DELETE in batches
#       of 5,000 by processed_at)
#   v3  the partitioned inbox made by `outbox migrate` (inbox.partition_s=3600), purged by
#       `outbox purge-inbox` as the tables' owner
# the same 2.01M rows are recorded over the last 21 hours (hour 0: 10,000 rows; hours 1-10:
# 100,000 each; hours 11-20: 100,000 each), with uuid v7 ids of their hour. Then, while pgbench
# records new events at --rate transactions/s (4 clients; each the mode's dedupe statement with a
# new uuid v7 id), the oldest 10,000 (hour 0) are removed, then the next 1,000,000 (hours 1-10).
# The report (default bench/results/issue-19/inbox_retention.md) gives each removal's time, the
# dedupe statements' p99 latency from its start to its end or 5 s, whichever is later, against the
# 10 s before it, and the size on disk.
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
per_hour=100000
rate=400
out="$root/bench/results/issue-19/inbox_retention.md"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rows-per-hour) per_hour="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "inbox_retention: unknown option $1" >&2; exit 2 ;;
    esac
done
"$root/scripts/services.sh" up >&2
eval "$("$root/scripts/services.sh" env)"
cli="$root/build/release/cli/outbox"
[[ -x "$cli" ]] || "$root/scripts/build.sh" release >&2
pgbench="$(command -v pgbench || true)"
[[ -n "$pgbench" ]] || pgbench="$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | tail -1)"
[[ -x "$pgbench" ]] || { echo "inbox_retention: pgbench not found (Debian: postgresql-client)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf -- "$work"; psql "$OUTBOX_PG_URL" -q -c "DROP SCHEMA IF EXISTS ibr_v2 CASCADE" -c "DROP SCHEMA IF EXISTS ibr_v3 CASCADE" >/dev/null 2>&1 || true' EXIT
q() { psql "$OUTBOX_PG_URL" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
now_ms() { q -c "SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS bigint)"; }

# The hour boundaries: hour k of the 21 covers [h0 + k h, h0 + (k+1) h); the last ends at the
# current hour's start.
hour=3600000
current=$(( $(now_ms) / hour * hour ))
h0=$(( current - 21 * hour ))
rows_in_hour() { if (( $1 == 0 )); then echo 10000; else echo "$per_hour"; fi; }

# Rows of hour k as (consumer, outbox_id, processed_at, id_ms), ids spread over the hour.
fill_sql() {
    local table=$1 with_ms=$2 k n
    for k in $(seq 0 20); do
        n=$(rows_in_hour "$k")
        local cols="consumer, outbox_id, aggregate_type, aggregate_id, seq, processed_at"
        local ms="($h0 + $k * $hour + (CAST(g AS bigint) * ($hour - 1)) / $n)"
        local vals="'search', CAST(lpad(to_hex($ms), 12, '0') || '7' || lpad(to_hex(g), 7, '0') || 'a' || substr(md5(CAST(g AS text) || '$k'), 1, 11) AS uuid), 'PRD', CAST(g % 1000 AS text), g, to_timestamp(($ms) / 1000.0)"
        if (( with_ms )); then cols+=", id_ms"; vals+=", $ms"; fi
        echo "INSERT INTO $table ($cols) SELECT $vals FROM generate_series(0, $n - 1) g;"
    done
}

# On disk, summed over the partitions (pg_partition_tree gives no rows for a plain table).
size_of() { q -c "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(CAST('$1' AS regclass))), pg_total_relation_size(CAST('$1' AS regclass)))"; }

setup_v2() {
    q <<SQL
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS ibr_v2 CASCADE;
CREATE SCHEMA ibr_v2;
-- The version-2 inbox, as core/schema.cpp's first inbox step makes it.
CREATE TABLE ibr_v2.outbox_inbox (consumer text NOT NULL, outbox_id uuid NOT NULL, aggregate_type text,
    aggregate_id text, seq bigint, processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, outbox_id));
CREATE INDEX outbox_inbox_processed_at_idx ON ibr_v2.outbox_inbox (processed_at);
SQL
    fill_sql ibr_v2.outbox_inbox 0 | q
}

setup_v3() {
    q -c "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS ibr_v3 CASCADE"
    "$cli" migrate --schema ibr_v3 --only inbox --set inbox.partition_s=3600 >&2
    # The 21 past hours' partitions, as a table partitioned since then would have them: _before
    # (empty) ends where they begin.
    local k from
    {
        echo "DROP TABLE ibr_v3.outbox_inbox_before;"
        echo "CREATE TABLE ibr_v3.outbox_inbox_before PARTITION OF ibr_v3.outbox_inbox FOR VALUES FROM (MINVALUE) TO ($h0);"
        for k in $(seq 0 20); do
            from=$(( h0 + k * hour ))
            echo "CREATE TABLE ibr_v3.outbox_inbox_past$k PARTITION OF ibr_v3.outbox_inbox FOR VALUES FROM ($from) TO ($(( from + hour )));"
        done
        fill_sql ibr_v3.outbox_inbox 1
    } | q
}

# The mode's dedupe statement for pgbench: a new uuid v7 id of the current millisecond.
dedupe_script() {
    local v='WITH t AS (SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS bigint) AS ms),'
    v+=" v AS (SELECT 'search' AS consumer, ms, CAST(lpad(to_hex(ms), 12, '0') || '7' || substr(md5(CAST(random() AS text)), 1, 3) || 'a' || substr(md5(CAST(random() AS text)), 1, 15) AS uuid) AS outbox_id FROM t)"
    if [[ $1 == v2 ]]; then
        echo "$v INSERT INTO ibr_v2.outbox_inbox (consumer, outbox_id, aggregate_type, aggregate_id, seq) SELECT consumer, outbox_id, 'PRD', '1', 1 FROM v ON CONFLICT (consumer, outbox_id) DO NOTHING;"
    else
        echo "$v INSERT INTO ibr_v3.outbox_inbox (consumer, outbox_id, aggregate_type, aggregate_id, seq, id_ms) SELECT consumer, outbox_id, 'PRD', '1', 1, ms FROM v WHERE NOT EXISTS (SELECT 1 FROM ibr_v3.outbox_inbox_v1 o WHERE o.consumer = v.consumer AND o.outbox_id = v.outbox_id) ON CONFLICT (consumer, outbox_id, id_ms) DO NOTHING;"
    fi
}

# Removes rows processed before `cutoff_ms`: v2 by the version-2 statement, v3 by the CLI.
purge() {
    local mode=$1 cutoff=$2
    if [[ $mode == v2 ]]; then
        local n total=0
        while :; do
            n=$(q -c "WITH d AS (DELETE FROM ibr_v2.outbox_inbox WHERE ctid = ANY(ARRAY(SELECT ctid FROM ibr_v2.outbox_inbox WHERE processed_at < to_timestamp($cutoff / 1000.0) LIMIT 5000)) RETURNING 1) SELECT count(*) FROM d")
            total=$(( total + n ))
            (( n == 5000 )) || break
        done
        echo "$total"
    else
        local age=$(( ($(now_ms) - cutoff) / 1000 ))
        "$cli" purge-inbox --schema ibr_v3 --older-than "${age}s" --set inbox.retention_s=0 \
            --set inbox.partition_s=3600 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["deleted"])'
    fi
}

# p99 (ms) of the pgbench log's transactions that ended in [from_s, to_s) (epoch seconds).
p99() {
    python3 - "$1" "$2" "$3" <<'PY'
import glob, sys
pattern, lo, hi = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
lat = []
for path in glob.glob(pattern):
    for line in open(path):
        f = line.split()
        if len(f) < 6 or not f[5].isdigit():
            continue  # a line pgbench is still writing
        end = int(f[4]) + int(f[5]) / 1e6
        if lo <= end < hi:
            lat.append(int(f[2]) / 1000.0)
lat.sort()
print(f"{lat[min(len(lat) - 1, int(len(lat) * 0.99))]:.1f} {len(lat)}" if lat else "nan 0")
PY
}

results=()
for mode in v2 v3; do
    echo "inbox_retention: $mode: recording $(( 10000 + 20 * per_hour )) rows" >&2
    t0=$(date +%s.%N)
    "setup_$mode"
    q -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
    fill_s=$(python3 -c "import time; print(f'{time.time() - $t0:.0f}')")
    size_before=$(size_of "ibr_$mode.outbox_inbox")
    dedupe_script "$mode" >"$work/dedupe_$mode.sql"
    rm -f "$work"/pgbench_log*
    (cd "$work" && "$pgbench" -n -c 4 -j 2 -R "$rate" -T 600 -l --log-prefix="$work/pgbench_log" \
        -f "$work/dedupe_$mode.sql" "$OUTBOX_PG_URL" >"$work/pgbench_$mode.out" 2>&1) &
    bench_pid=$!
    sleep 12
    kill -0 "$bench_pid" 2>/dev/null || { cat "$work/pgbench_$mode.out" >&2; echo "inbox_retention: pgbench stopped" >&2; exit 1; }
    for step in hour0 hours1-10; do
        if [[ $step == hour0 ]]; then cutoff=$(( h0 + hour )); else cutoff=$(( h0 + 11 * hour )); fi
        before_from=$(python3 -c 'import time; print(time.time() - 10)')
        start=$(date +%s.%N)
        removed=$(purge "$mode" "$cutoff")
        end=$(date +%s.%N)
        # The window: the removal, and at least 5 s from its start (what follows a drop, such as
        # the statements' new plans, counts too; a short window holds too few statements).
        window_end=$(python3 -c "print(max($end, $start + 5))")
        sleep 6
        read -r base_p99 base_n < <(p99 "$work/pgbench_log*" "$before_from" "$start")
        read -r during_p99 during_n < <(p99 "$work/pgbench_log*" "$start" "$window_end")
        secs=$(python3 -c "print(f'{$end - $start:.2f}')")
        results+=("$mode|$step|$removed|$secs|$base_p99|$during_p99|$during_n")
        echo "inbox_retention: $mode: removed $removed ($step) in $secs s; dedupe p99 $base_p99 ms before, $during_p99 ms during ($during_n statements)" >&2
        sleep 10
    done
    kill "$bench_pid" 2>/dev/null || true
    wait "$bench_pid" 2>/dev/null || true
    size_after=$(size_of "ibr_$mode.outbox_inbox")
    results+=("$mode|size|$size_before|$size_after|$fill_s")
done

commit=$(git -C "$root" rev-parse --short=12 HEAD)
dirty=""
[[ -z "$(git -C "$root" status --porcelain -- core capi cli bench/inbox_retention.sh)" ]] || dirty=" +uncommitted changes"
{
    echo "# Inbox retention at size: the partitioned inbox (schema v3) against the version-2 table"
    echo
    echo "Measured the code of commit $commit$dirty, $(date -u '+%Y-%m-%d %H:%M UTC'), by \`bench/inbox_retention.sh --rows-per-hour $per_hour --rate $rate\`."
    echo "PostgreSQL $(q -c 'SHOW server_version'), $(nproc) CPUs. $(( 10000 + 20 * per_hour )) rows over 21 hours; pgbench records new events at $rate statements/s (4 clients) throughout."
    echo
    echo "| mode | removed | rows | seconds | dedupe p99 10 s before (ms) | dedupe p99 during (ms, at least 5 s) | ratio | statements during |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    for r in "${results[@]}"; do
        IFS='|' read -r mode step a b c d e <<<"$r"
        [[ $step == size ]] && continue
        ratio=$(python3 -c "print(f'{float(\"$d\") / float(\"$c\"):.2f}' if '$c' not in ('nan','0.0') and '$d' != 'nan' else 'n/a')")
        echo "| $mode | $step | $a | $b | $c | $d | $ratio | $e |"
    done
    echo
    echo "| mode | size before (MB) | size after (MB) | after / before | share removed | fill (s) |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: |"
    for r in "${results[@]}"; do
        IFS='|' read -r mode step a b c <<<"$r"
        [[ $step == size ]] || continue
        total=$(( 10000 + 20 * per_hour ))
        echo "| $mode | $(( a / 1048576 )) | $(( b / 1048576 )) | $(python3 -c "print(f'{$b / $a:.2f}')") | $(python3 -c "print(f'{(10000 + 10 * $per_hour) / $total:.2f}')") | $c |"
    done
} >"$out"
echo "inbox_retention: wrote $out" >&2
cat "$out"
