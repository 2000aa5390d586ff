# shellcheck shell=bash
# Sourced by the experiments that measure a patched build of HEAD (write_lock.sh,
# relay_seq_drain.sh): their options, the services, and relay_bench built with the patch. Before
# sourcing, the script sets root, name (its name), pairs, out, help_lines (the lines of its header
# that --help prints), patch (the patch, under bench/experiments), extra (its one other option,
# e.g. --sides) and that option's default, in the variable named as the option without its leading
# dashes, - as _ (sides; drain_sizes); it sources this with its own arguments. After: OUTBOX_PG_URL and OUTBOX_AMQP_URL exported, rev (the commit measured), tree (a
# worktree of HEAD with the patch, removed on exit), bin (its relay_bench, relay_drain beside it)
# and work (a scratch directory, removed on exit).
while [[ $# -gt 0 ]]; do
    case "$1" in
        --pairs) pairs="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        "$extra") var=${extra#--}; printf -v "${var//-/_}" '%s' "$2"; shift 2 ;;
        -h|--help) sed -n "$help_lines" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "$name: unknown option $1" >&2; exit 2 ;;
    esac
done
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
"$root/scripts/services.sh" up >&2
eval "$("$root/scripts/services.sh" env)"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
rev="$("$root/scripts/source_rev.sh")"
tree="$OUTBOX_RUN_DIR/exp-${name%.sh}"
git -C "$root" worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
git -C "$root" worktree prune
git -C "$root" worktree add --detach "$tree" HEAD >&2
work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$tree" 2>/dev/null || true; rm -rf "$work"' EXIT
git -C "$tree" apply "$root/bench/experiments/$patch"
cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOUTBOX_BUILD_TESTS=OFF \
    -DOUTBOX_BUILD_CLI=OFF -DOUTBOX_BUILD_FAULTS=OFF >/dev/null
cmake --build "$tree/build" --target relay_bench relay_drain >&2
bin="$tree/build/bench/relay_bench"
