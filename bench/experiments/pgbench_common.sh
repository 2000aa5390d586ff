# shellcheck shell=bash
# Sourced by the pgbench experiments (write_server.sh, relay_seq.sh): their options and the services
# (bench/experiment_lib.sh), a scratch schema dropped on exit, and the CPU stolen around a side.
# Before sourcing, the script sets root, name (its name, with underscores), rounds, seconds, out and
# help_lines (the lines of its header that --help prints); it sources this with its own arguments.
options="--rounds --seconds --out"
# shellcheck source=bench/experiment_lib.sh
source "$root/bench/experiment_lib.sh" "$@"
schema="exp_${name}_$$"
trap 'psql "$OUTBOX_PG_URL" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
# A 256-byte payload, as bench W's.
payload='{"order_id":12345,"customer":"someone","items":[1,2,3],"note":"'"$(printf '%*s' 190 '' | tr ' ' x)"'"}'

cpu() { head -1 /proc/stat; }
steal() { # /proc/stat cpu lines before and after -> percent stolen
    python3 -c 'import sys; a = sys.argv[1].split()[1:]; b = sys.argv[2].split()[1:]
d = [int(y) - int(x) for x, y in zip(a, b)]; print(f"{100 * d[7] / max(1, sum(d)):.1f}")' "$1" "$2"
}
