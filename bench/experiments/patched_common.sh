# shellcheck shell=bash
# Sourced by the experiments that measure a patched build of HEAD (write_lock.sh,
# relay_seq_drain.sh): their options and the services (bench/experiment_lib.sh), and relay_bench
# built with the patch. Before sourcing, the script sets root, name (its name), pairs, out,
# help_lines (the lines of its header that --help prints), patch (the patch, under
# bench/experiments), extra (its one other option, e.g. --sides) and that option's default, in the
# variable named as the option without its leading dashes, - as _ (sides; drain_sizes); it sources
# this with its own arguments. After: rev (the commit measured), tree (a worktree of HEAD with the
# patch, removed on exit), bin (its relay_bench, relay_drain beside it) and work (a scratch
# directory, removed on exit).
options="--pairs --out $extra"
# shellcheck source=bench/experiment_lib.sh
source "$root/bench/experiment_lib.sh" "$@"
tree="$OUTBOX_RUN_DIR/exp-${name%.sh}"
git -C "$root" worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
git -C "$root" worktree prune
git -C "$root" worktree add --detach "$tree" HEAD >&2
trap 'git -C "$root" worktree remove --force "$tree" 2>/dev/null || true; rm -rf "$work"' EXIT
git -C "$tree" apply "$root/bench/experiments/$patch"
cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOUTBOX_BUILD_TESTS=OFF \
    -DOUTBOX_BUILD_CLI=OFF -DOUTBOX_BUILD_FAULTS=OFF >/dev/null
cmake --build "$tree/build" --target relay_bench relay_drain >&2
bin="$tree/build/bench/relay_bench"
