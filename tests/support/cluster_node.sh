#!/usr/bin/env bash
# Node kills for the consumer tests, on the RabbitMQ cluster scripts/test.sh starts for the C++,
# Python and Node suites (scripts/cluster.sh with OUTBOX_CLUSTER_SERVICES=rabbitmq; its directory and
# base port in OUTBOX_TEST_CLUSTER_DIR and OUTBOX_TEST_CLUSTER_BASE_PORT):
#   cluster_node.sh kill-node-of PATTERN   kill -9 the node holding every connection whose client-given
#                                          name (connection_name) contains PATTERN; prints its number.
#                                          Exit 1 when no connection matches, 3 when they are on several
#                                          nodes (nothing killed then)
#   cluster_node.sh ensure                 start every node that is down and wait until the cluster
#                                          runs its 3 nodes (a test calls it before and after a kill)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
: "${OUTBOX_TEST_CLUSTER_DIR:?the test cluster is not up: run the suite through scripts/test.sh}"
export OUTBOX_CLUSTER_DIR=$OUTBOX_TEST_CLUSTER_DIR OUTBOX_CLUSTER_BASE_PORT=${OUTBOX_TEST_CLUSTER_BASE_PORT:?} \
    OUTBOX_CLUSTER_SERVICES=rabbitmq
cluster() { "$root/scripts/cluster.sh" "$@"; }

# The CLI of the first node that answers (one may be down on purpose).
ctl() {
    local n
    for n in 1 2 3; do
        if cluster rabbitmqctl "$n" -q "$@" 2>/dev/null; then return 0; fi
    done
    return 1
}

kill_node_of() {
    local pattern=$1 nodes
    nodes=$(ctl list_connections pid client_properties |
        awk -F'\t' -v p="$pattern" 'index($2, p) { if (match($1, /outbox-c[0-9]@/)) print substr($1, RSTART + 8, 1) }' |
        sort -u)
    [[ -n "$nodes" ]] || { echo "no connection named like '$pattern'" >&2; return 1; }
    [[ "$nodes" != *$'\n'* ]] || { echo "connections named like '$pattern' are on nodes $(echo $nodes)" >&2; return 3; }
    cluster kill-node "$nodes" >&2
    echo "$nodes"
}

ensure() {
    local n
    for n in 1 2 3; do
        if [[ "$(cluster status 2>/dev/null | sed -n "${n}p")" != *" up" ]]; then
            cluster start-node "$n" >&2
        fi
    done
    ctl await_online_nodes 3 --timeout 60 >/dev/null
}

case "${1:-}" in
    kill-node-of) kill_node_of "${2:?usage: cluster_node.sh kill-node-of PATTERN}" ;;
    ensure) ensure ;;
    *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
