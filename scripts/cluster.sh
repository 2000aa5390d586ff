#!/usr/bin/env bash
# Throwaway local clusters for cluster tests and faults (the single-node scripts/services.sh stays the
# default for the demo and most tests):
#   - a 3-node RabbitMQ cluster (nodes outbox-c1..3@localhost joined into one; quorum queues replicate
#     on all three; rabbitmq_consistent_hash_exchange enabled);
#   - a PostgreSQL primary with a streaming standby, replication synchronous (a COMMIT that returned
#     is on the standby).
# Each node is one scripts/services.sh instance with a run directory and ports of its own.
#
# Usage: scripts/cluster.sh COMMAND
#   up                   start everything (idempotent), join the nodes, wait until the standby is
#                        synchronous; prints the env
#   down [--purge]       stop everything (--purge: delete the cluster's data too)
#   status               each node, the cluster's members, the PostgreSQL roles and sync state
#   env                  export OUTBOX_CLUSTER_AMQP_URL (the 3 nodes, a list) and OUTBOX_CLUSTER_PG_URL
#                        (both servers, target_session_attrs=read-write), then OUTBOX_AMQP_URL and
#                        OUTBOX_PG_URL set to them: the names the outbox command, outbox_config_from_env(),
#                        the Python package, Node's Relay and the examples read
#   kill-node N          kill -9 RabbitMQ node N (1-3);  start-node N  starts it again (it rejoins)
#   cut-node N           cut RabbitMQ node N off the other two (nftables: their Erlang distribution
#                        traffic is dropped; clients still reach every node); needs root.  heal  undoes it
#   kill-primary         kill -9 the PostgreSQL primary's postmaster
#   promote              promote the standby (pg_ctl promote); it runs alone, asynchronously, until
#   rebuild-standby      turns the old primary into the new standby (pg_basebackup) and makes
#                        replication synchronous again
#   rabbitmqctl N ARGS   rabbitmqctl for node N;  psql a|b ARGS  psql on server a or b
# OUTBOX_CLUSTER_SERVICES=rabbitmq: up, down and status leave PostgreSQL out (the RabbitMQ cluster alone,
# as the consumer tests of scripts/test.sh use it).
# Ports (override with OUTBOX_CLUSTER_BASE_PORT, default 27000: below the
# kernel's ephemeral range, so an outgoing connection never holds one): epmd base+1; RabbitMQ node N AMQP
# base+10N, AMQPS +1, distribution +2, CLI +3..+8; PostgreSQL a base+40, b base+41. Data under
# $OUTBOX_CLUSTER_DIR (default $OUTBOX_RUN_DIR/cluster; OUTBOX_RUN_DIR defaults to .run). Node N opens
# its connections to the other nodes from 127.0.1.N (all of 127/8 is loopback), so a cut can tell
# them from client and CLI connections; the nodes' net_ticktime is 10 s, so a cut node notices within about 12 s and pauses (pause_minority).
set -euo pipefail
here="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$here/lib.sh"

base=${OUTBOX_CLUSTER_BASE_PORT:-27000}
cdir=${OUTBOX_CLUSTER_DIR:-$OUTBOX_RUN_DIR/cluster}
user=${OUTBOX_RABBIT_USER:-outbox}
password=${OUTBOX_RABBIT_PASSWORD:-outbox}
pg_user=${OUTBOX_PG_USER:-outbox}
pg_password=${OUTBOX_PG_PASSWORD:-outbox}
host=${OUTBOX_SERVICES_HOST:-127.0.0.1}
with_pg=1
[[ "${OUTBOX_CLUSTER_SERVICES:-rabbitmq pg}" == *pg* ]] || with_pg=0
log() { outbox_log "$@"; }
die() { outbox_die "$@"; }

amqp_port() { echo $((base + 10 * $1)); }
pg_port() { if [[ $1 == a ]]; then echo $((base + 40)); else echo $((base + 41)); fi; }
other() { if [[ $1 == a ]]; then echo b; else echo a; fi; }
primary() { cat "$cdir/pg-primary" 2>/dev/null || echo a; }

# scripts/services.sh for RabbitMQ node N (1-3).
rabbit_node() {
    local n=$1
    shift
    local p
    p=$(amqp_port "$n")
    OUTBOX_SERVICES=rabbitmq OUTBOX_RUN_DIR="$cdir/rabbit$n" OUTBOX_AMQP_PORT=$p OUTBOX_AMQPS_PORT=$((p + 1)) \
        OUTBOX_RABBIT_DIST_PORT=$((p + 2)) OUTBOX_RABBIT_CTL_PORT_MIN=$((p + 3)) \
        OUTBOX_RABBIT_CTL_PORT_MAX=$((p + 8)) OUTBOX_EPMD_PORT=$((base + 1)) \
        OUTBOX_RABBIT_NODENAME="outbox-c$n@localhost" OUTBOX_RABBIT_PLUGINS=rabbitmq_consistent_hash_exchange \
        OUTBOX_EPMD_SHARED=1 \
        OUTBOX_RABBIT_ERL_ARGS="-kernel inet_dist_connect_options [{ip,{127,0,1,$n}}] -kernel net_ticktime 10" \
        "$here/services.sh" "$@"
}

# scripts/services.sh for PostgreSQL server a or b.
pg_node() {
    local s=$1
    shift
    OUTBOX_SERVICES=pg OUTBOX_RUN_DIR="$cdir/pg-$s" OUTBOX_PG_PORT=$(pg_port "$s") "$here/services.sh" "$@"
}

pg_sql() { # server SQL: as the superuser postgres over TCP
    "$(outbox_pg_bindir)/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$host" -p "$(pg_port "$1")" -U postgres -d postgres -c "$2"
}

as_pg() { if ((EUID == 0)); then runuser -u "${OUTBOX_PG_OS_USER:-postgres}" -- "$@"; else "$@"; fi; }

prepare_rabbit_dirs() {
    # One Erlang cookie for the three nodes (and their CLI calls); partition handling for a cut-off node.
    mkdir -p "$cdir"
    if [[ ! -s "$cdir/erlang.cookie" ]]; then
        (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F >"$cdir/erlang.cookie")
    fi
    local n home
    for n in 1 2 3; do
        home="$cdir/rabbit$n/rabbitmq/home"
        mkdir -p "$home" "$cdir/rabbit$n/rabbitmq/conf.d"
        chmod 0700 "$home"
        if ! cmp -s "$cdir/erlang.cookie" "$home/.erlang.cookie"; then
            rm -f "$home/.erlang.cookie"
            install -m 0400 "$cdir/erlang.cookie" "$home/.erlang.cookie"
        fi
        printf 'cluster_partition_handling = pause_minority\n' >"$cdir/rabbit$n/rabbitmq/conf.d/20-cluster.conf"
    done
}

join_nodes() {
    local n
    for n in 2 3; do
        if rabbit_node "$n" rabbitmqctl -q cluster_status 2>/dev/null | grep -q "outbox-c1@localhost"; then
            continue
        fi
        log "rabbitmq: joining outbox-c$n@localhost to outbox-c1@localhost"
        rabbit_node "$n" rabbitmqctl -q stop_app >/dev/null
        rabbit_node "$n" rabbitmqctl -q reset >/dev/null
        rabbit_node "$n" rabbitmqctl -q join_cluster outbox-c1@localhost >/dev/null
        rabbit_node "$n" rabbitmqctl -q start_app >/dev/null
    done
    rabbit_node 1 rabbitmqctl -q await_online_nodes 3 --timeout 60 >/dev/null \
        || die "rabbitmq: the cluster does not have 3 running nodes"
}

# The standby of server s: a base backup of the primary, streaming from it (recovery settings by -R).
make_standby() {
    local s=$1 p
    p=$(other "$s")
    local data="$cdir/pg-$s/pg/data"
    log "pg: $s becomes the standby of $p (pg_basebackup)"
    pg_node "$s" down >/dev/null 2>&1 || true
    mkdir -p "$cdir/pg-$s/pg"
    if ((EUID == 0)); then chown -R "${OUTBOX_PG_OS_USER:-postgres}:" "$cdir/pg-$s"; fi
    as_pg rm -rf "$data"
    as_pg "$(outbox_pg_bindir)/pg_basebackup" -h "$host" -p "$(pg_port "$p")" -U postgres -D "$data" -R \
        -X stream -c fast -d "application_name=outbox_standby_$s" >"$cdir/basebackup-$s.log" 2>&1 \
        || { tail -20 "$cdir/basebackup-$s.log" >&2; die "pg: pg_basebackup from $p failed"; }
    pg_node "$s" up >/dev/null
}

make_synchronous() { # the primary waits for its standby at every COMMIT
    local p
    p=$(primary)
    pg_sql "$p" "ALTER SYSTEM SET synchronous_standby_names = '*'" >/dev/null
    pg_sql "$p" "SELECT pg_reload_conf()" >/dev/null
    local t=0
    until [[ "$(pg_sql "$p" "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")" == 1 ]]; do
        ((t++ < 120)) || die "pg: the standby of $p did not become synchronous within 60 s"
        sleep 0.5
    done
    log "pg: $p is the primary, $(other "$p") its synchronous standby"
}

cmd_up() {
    local start=$SECONDS
    prepare_rabbit_dirs
    local pids=() n rc=0
    for n in 1 2 3; do
        rabbit_node "$n" up >"$cdir/up-rabbit$n.log" 2>&1 &
        pids+=($!)
    done
    ((with_pg == 0)) || pg_up
    for n in 0 1 2; do wait "${pids[$n]}" || { cat "$cdir/up-rabbit$((n + 1)).log" >&2; rc=1; }; done
    ((rc == 0)) || die "rabbitmq: a node did not start"
    join_nodes
    ((with_pg == 0)) || pg_replicate
    log "cluster up in $((SECONDS - start)) s"
    cmd_env
}

pg_up() {
    local p s
    p=$(primary)
    s=$(other "$p")
    # A synchronous primary waits at every write for its standby: start an existing standby first
    # (it retries streaming until the primary is up), and a primary without one runs asynchronously.
    if [[ -f "$cdir/pg-$s/pg/data/standby.signal" ]]; then
        pg_node "$s" up >"$cdir/up-pg-$s.log" 2>&1 || { cat "$cdir/up-pg-$s.log" >&2; die "pg: standby $s did not start"; }
    elif [[ -f "$cdir/pg-$p/pg/data/postgresql.auto.conf" ]]; then
        as_pg sed -i '/^synchronous_standby_names/d' "$cdir/pg-$p/pg/data/postgresql.auto.conf"
    fi
    pg_node "$p" up >"$cdir/up-pg-$p.log" 2>&1 || { cat "$cdir/up-pg-$p.log" >&2; die "pg: $p did not start"; }
}

pg_replicate() {
    local s
    s=$(other "$(primary)")
    if [[ ! -f "$cdir/pg-$s/pg/data/standby.signal" ]]; then
        make_standby "$s"
    fi
    make_synchronous
}

cmd_down() {
    local n s
    for n in 3 2 1; do rabbit_node "$n" down "$@" >/dev/null 2>&1 || log "rabbitmq node $n: down reported errors"; done
    ((with_pg == 0)) || for s in a b; do pg_node "$s" down "$@" >/dev/null 2>&1 || log "pg $s: down reported errors"; done
    if [[ "${1:-}" == --purge ]]; then rm -rf -- "$cdir"; fi
    log "cluster down"
}

cmd_env() {
    local urls="" n
    for n in 1 2 3; do urls+="${urls:+,}amqp://$user:$password@$host:$(amqp_port "$n")/%2f"; done
    printf "export OUTBOX_CLUSTER_AMQP_URL='%s'\n" "$urls"
    printf "export OUTBOX_CLUSTER_PG_URL='postgresql://%s:%s@%s:%s,%s:%s/outbox?target_session_attrs=read-write'\n" \
        "$pg_user" "$pg_password" "$host" "$(pg_port a)" "$host" "$(pg_port b)"
    # The names the library reads (core/config.cpp: pg.url and amqp.url fall back to them). Written
    # as references, not as 'quoted values': tests/faults/run takes only the OUTBOX_CLUSTER_* lines.
    # shellcheck disable=SC2016
    printf 'export OUTBOX_AMQP_URL="$OUTBOX_CLUSTER_AMQP_URL"\n'
    # shellcheck disable=SC2016
    printf 'export OUTBOX_PG_URL="$OUTBOX_CLUSTER_PG_URL"\n'
}

cmd_status() {
    local n s rc=0 up=()
    for n in 1 2 3; do
        printf 'rabbitmq node %s (port %s): ' "$n" "$(amqp_port "$n")"
        if outbox_amqp_handshake "$host" "$(amqp_port "$n")"; then echo up; up+=("$n"); else echo down; rc=3; fi
    done
    local running=""
    # Only nodes that answered: rabbitmqctl for a node never started (no home yet) makes Erlang
    # write erl_crash.dump into the current directory.
    for n in "${up[@]}"; do
        running=$(rabbit_node "$n" rabbitmqctl -q cluster_status --formatter json 2>/dev/null |
            python3 -c 'import json,sys; print(" ".join(sorted(json.load(sys.stdin)["running_nodes"])))' 2>/dev/null) && break
    done
    echo "rabbitmq running nodes: ${running:-none reachable}"
    ((with_pg == 1)) || return "$rc"
    for s in a b; do
        printf 'postgresql %s (port %s): ' "$s" "$(pg_port "$s")"
        if r=$(pg_sql "$s" "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END" 2>/dev/null); then
            echo "$r"
        else
            echo down
            rc=3
        fi
    done
    pg_sql "$(primary)" "SELECT application_name, state, sync_state FROM pg_stat_replication" 2>/dev/null || true
    return "$rc"
}

node_pid() { head -n 1 "$cdir/rabbit$1/rabbitmq/rabbitmq.pid" 2>/dev/null; }

cmd_kill_node() {
    local n=${1:?node number 1-3} pid
    pid=$(node_pid "$n")
    [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null && log "rabbitmq: killed node $n (pid $pid)" || log "rabbitmq: node $n was not running"
}

cmd_kill_primary() {
    local p pid
    p=$(primary)
    pid=$(head -n 1 "$cdir/pg-$p/pg/data/postmaster.pid" 2>/dev/null || true)
    [[ -n "$pid" ]] || die "pg: primary $p is not running"
    kill -KILL "$pid"
    log "pg: killed the primary $p (postmaster $pid)"
}

cmd_promote() {
    local p s
    p=$(primary)
    s=$(other "$p")
    as_pg "$(outbox_pg_bindir)/pg_ctl" -D "$cdir/pg-$s/pg/data" -w -t 60 promote >/dev/null
    echo "$s" >"$cdir/pg-primary"
    # Alone until rebuild-standby: a synchronous setting inherited from the old primary would block every COMMIT.
    pg_sql "$s" "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null
    pg_sql "$s" "SELECT pg_reload_conf()" >/dev/null
    log "pg: $s promoted; it is the primary now (alone until rebuild-standby)"
}

dist_port() { echo $(($(amqp_port "$1") + 2)); }

cmd_cut_node() {
    local n=${1:?node number 1-3} all
    [[ $n =~ ^[123]$ ]] || die "cut-node: expected a node number 1-3, got '$n'"
    command -v nft >/dev/null || die "cut-node: nft is not installed (scripts/deps.sh installs nftables)"
    all="{ $(dist_port 1), $(dist_port 2), $(dist_port 3) }"
    # Both directions of both kinds of node-to-node connection: the ones node n opened (from its
    # address 127.0.1.n) and the ones the others opened to its distribution port.
    nft -f - <<EOF || die "cut-node: nftables refused the rules (root needed)"
table inet outbox_cluster_cut
delete table inet outbox_cluster_cut
table inet outbox_cluster_cut {
    chain out {
        type filter hook output priority 0; policy accept;
        ip saddr 127.0.1.$n tcp dport $all drop
        ip daddr 127.0.1.$n tcp sport $all drop
        ip saddr 127.0.1.0/24 tcp dport $(dist_port "$n") drop
        ip daddr 127.0.1.0/24 tcp sport $(dist_port "$n") drop
    }
}
EOF
    log "rabbitmq: node $n cut off the other nodes"
}

cmd_heal() {
    if nft list table inet outbox_cluster_cut >/dev/null 2>&1; then
        nft delete table inet outbox_cluster_cut || die "heal: nftables refused to delete the cut"
        log "rabbitmq: cut healed"
    fi
}

cmd_rebuild_standby() {
    local p
    p=$(primary)
    make_standby "$(other "$p")"
    make_synchronous
}

main() {
    local cmd=${1:-}
    (($#)) && shift
    case "$cmd" in
        up) cmd_up ;;
        down) cmd_down "$@" ;;
        status) cmd_status ;;
        env) cmd_env ;;
        kill-node) cmd_kill_node "$@" ;;
        start-node) prepare_rabbit_dirs; rabbit_node "${1:?node number 1-3}" up >/dev/null ;;
        cut-node) cmd_cut_node "$@" ;;
        heal) cmd_heal ;;
        kill-primary) cmd_kill_primary ;;
        promote) cmd_promote ;;
        rebuild-standby) cmd_rebuild_standby ;;
        rabbitmqctl) local n=${1:?node number}; shift; rabbit_node "$n" rabbitmqctl "$@" ;;
        psql) local s=${1:?a or b}; shift; pg_node "$s" psql "$@" ;;
        -h | --help | help) sed -n '2,/^set -euo/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' ;;
        *) sed -n '2,/^set -euo/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
}

main "$@"
