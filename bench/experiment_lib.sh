# shellcheck shell=bash
# Sourced by bench's measuring scripts outside bench/run (storage_probe.sh, bench/experiments/*):
# their options, the services, the commit measured and a scratch directory. Before sourcing, the
# script sets root, name (its name), help_lines (the lines of its header that --help prints),
# options (the options that take a value, e.g. "--rounds --seconds --out") and each option's default
# in the variable named as the option without its leading dashes, - as _ (rounds, drain_sizes); it
# sources this with its own arguments. After: OUTBOX_PG_URL and OUTBOX_AMQP_URL exported, rev (what
# scripts/source_rev.sh prints) and work (a scratch directory; the script removes it on exit).
while [[ $# -gt 0 ]]; do
    if [[ " $options " == *" $1 "* ]]; then
        [[ $# -ge 2 ]] || { echo "$name: $1 needs a value" >&2; exit 2; }
        var=${1#--}
        printf -v "${var//-/_}" '%s' "$2"
        shift 2
        continue
    fi
    case "$1" in
        -h|--help) sed -n "$help_lines" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "$name: unknown option $1 (options: $options)" >&2; exit 2 ;;
    esac
done
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
"$root/scripts/services.sh" up >&2
eval "$("$root/scripts/services.sh" env)"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
rev="$("$root/scripts/source_rev.sh")"
work="$(mktemp -d)"
