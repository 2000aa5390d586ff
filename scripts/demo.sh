#!/usr/bin/env bash
# The main job, end to end on throwaway local services: installs what is missing, builds and
# installs the library, migrates the schema with the `outbox` CLI, then runs the C writer
# example (a product row and its ProductCreated event in one transaction) built against the
# installed library with pkg-config, and shows the event row.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$OUTBOX_REPO_ROOT
cd "$root"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,6p' "$0"; exit 0; fi

"$root/scripts/deps.sh"
"$root/scripts/services.sh" up
eval "$("$root/scripts/services.sh" env)"
export OUTBOX_PG_URL OUTBOX_AMQP_URL
"$root/scripts/build.sh" release
prefix=$root/_install
export PATH="$prefix/bin:$PATH"

echo "=== outbox migrate"
outbox migrate

echo "=== C writer example (built against the installed library with pkg-config)"
build=$root/build/examples-c
rm -rf "$build"; mkdir -p "$build"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -s -C "$root/examples/c" O="$build" >/dev/null
"$build/writer" "$OUTBOX_PG_URL" "Widget Pro"

echo "=== the event in the outbox table"
"$root/scripts/services.sh" psql -c "SELECT outbox_id, event_type, aggregate_type, aggregate_id, seq, status, payload FROM outbox ORDER BY created_at DESC LIMIT 1"
