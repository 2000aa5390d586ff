# shellcheck shell=bash
# shellcheck disable=SC2034  # variables are used by the scripts that source this file
# Shared settings and helpers for scripts/*.sh.  Source it, do not execute it:
#
#     # shellcheck source=scripts/lib.sh
#     source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Everything the project's throwaway services use (ports, directories, URLs)
# is defined here once.  Each OUTBOX_* setting below may be overridden from the
# environment; the defaults never clash with system-wide PostgreSQL/RabbitMQ.
#
# The URLs of the local services are OUTBOX_LOCAL_PG_URL / OUTBOX_LOCAL_AMQP_URL.
# Tests read OUTBOX_PG_URL / OUTBOX_AMQP_URL; a test runner should default
# those to the local ones:  : "${OUTBOX_PG_URL:=$OUTBOX_LOCAL_PG_URL}"

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    echo "scripts/lib.sh holds shared settings for scripts/*.sh; source it, do not run it." >&2
    exit 2
fi
if [[ -n "${OUTBOX_LIB_SH_LOADED:-}" ]]; then
    return 0
fi
OUTBOX_LIB_SH_LOADED=1

# ---------------------------------------------------------------- locations
OUTBOX_SCRIPTS_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
OUTBOX_REPO_ROOT="$(cd -- "$OUTBOX_SCRIPTS_DIR/.." && pwd -P)"

OUTBOX_RUN_DIR="${OUTBOX_RUN_DIR:-$OUTBOX_REPO_ROOT/.run}"
[[ "$OUTBOX_RUN_DIR" == /* ]] || OUTBOX_RUN_DIR="$PWD/$OUTBOX_RUN_DIR"
while [[ "$OUTBOX_RUN_DIR" == */ && "$OUTBOX_RUN_DIR" != / ]]; do
    OUTBOX_RUN_DIR="${OUTBOX_RUN_DIR%/}"
done

# ---------------------------------------------------------------- ports
# PostgreSQL, AMQP, Erlang distribution of the RabbitMQ node, its own epmd,
# and the range used by rabbitmqctl's (short-lived) Erlang distribution.
OUTBOX_PG_PORT="${OUTBOX_PG_PORT:-54329}"
OUTBOX_AMQP_PORT="${OUTBOX_AMQP_PORT:-56729}"
OUTBOX_RABBIT_DIST_PORT="${OUTBOX_RABBIT_DIST_PORT:-56730}"
OUTBOX_EPMD_PORT="${OUTBOX_EPMD_PORT:-56731}"
OUTBOX_RABBIT_CTL_PORT_MIN="${OUTBOX_RABBIT_CTL_PORT_MIN:-56740}"
OUTBOX_RABBIT_CTL_PORT_MAX="${OUTBOX_RABBIT_CTL_PORT_MAX:-56759}"
# RabbitMQ's TLS listener (amqps://); PostgreSQL takes TLS on its own port (ssl = on).
OUTBOX_AMQPS_PORT="${OUTBOX_AMQPS_PORT:-56732}"
OUTBOX_SERVICES_HOST=127.0.0.1

# ---------------------------------------------------------------- PostgreSQL
OUTBOX_PG_DIR="$OUTBOX_RUN_DIR/pg"
OUTBOX_PG_DATA="$OUTBOX_PG_DIR/data"
OUTBOX_PG_LOG_DIR="$OUTBOX_PG_DIR/log"
OUTBOX_PG_LOG="$OUTBOX_PG_LOG_DIR/postgresql.log"
OUTBOX_PG_SOCK_DIR="$OUTBOX_PG_DIR/sock"
# A unix socket path must fit in sun_path (107 bytes); with a deep checkout
# fall back to a per-run-dir directory under /tmp.
if (( ${#OUTBOX_PG_SOCK_DIR} + ${#OUTBOX_PG_PORT} + 10 > 100 )); then
    OUTBOX_PG_SOCK_DIR="/tmp/outbox-pg-$(printf '%s' "$OUTBOX_RUN_DIR" | cksum | cut -d' ' -f1)"
fi
OUTBOX_PG_USER="${OUTBOX_PG_USER:-outbox}"
OUTBOX_PG_PASSWORD="${OUTBOX_PG_PASSWORD:-outbox}"
OUTBOX_PG_DB="${OUTBOX_PG_DB:-outbox}"
# OS account that runs the server when the scripts run as root.
OUTBOX_PG_OS_USER="${OUTBOX_PG_OS_USER:-postgres}"
OUTBOX_LOCAL_PG_URL="postgresql://$OUTBOX_PG_USER:$OUTBOX_PG_PASSWORD@$OUTBOX_SERVICES_HOST:$OUTBOX_PG_PORT/$OUTBOX_PG_DB"

# ---------------------------------------------------------------- RabbitMQ
OUTBOX_RABBIT_DIR="$OUTBOX_RUN_DIR/rabbitmq"
OUTBOX_RABBIT_HOME="$OUTBOX_RABBIT_DIR/home"        # holds the private .erlang.cookie
OUTBOX_RABBIT_MNESIA_BASE="$OUTBOX_RABBIT_DIR/mnesia"
OUTBOX_RABBIT_LOG_DIR="$OUTBOX_RABBIT_DIR/log"
OUTBOX_RABBIT_CONF="$OUTBOX_RABBIT_DIR/rabbitmq.conf"
OUTBOX_RABBIT_PID_FILE="$OUTBOX_RABBIT_DIR/rabbitmq.pid"
OUTBOX_RABBIT_NODENAME="${OUTBOX_RABBIT_NODENAME:-outbox@localhost}"
OUTBOX_RABBIT_USER="${OUTBOX_RABBIT_USER:-outbox}"
OUTBOX_RABBIT_PASSWORD="${OUTBOX_RABBIT_PASSWORD:-outbox}"
OUTBOX_LOCAL_AMQP_URL="amqp://$OUTBOX_RABBIT_USER:$OUTBOX_RABBIT_PASSWORD@$OUTBOX_SERVICES_HOST:$OUTBOX_AMQP_PORT/%2f"

# ---------------------------------------------------------------- TLS
# A throwaway CA and a server certificate for localhost / 127.0.0.1, made by `services.sh up`
# with openssl whenever a service starts; tests verify the servers against ca.crt.
OUTBOX_TLS_DIR="$OUTBOX_RUN_DIR/tls"
OUTBOX_LOCAL_AMQPS_URL="amqps://$OUTBOX_RABBIT_USER:$OUTBOX_RABBIT_PASSWORD@localhost:$OUTBOX_AMQPS_PORT/%2f"

# Every daemon we start carries OUTBOX_SERVICES_MARK=<run dir> in its
# environment; that is how `services.sh down` finds (only) our processes.
OUTBOX_SERVICES_MARK="$OUTBOX_RUN_DIR"

# ---------------------------------------------------------------- helpers
outbox_log() { printf '[%s] %s\n' "${0##*/}" "$*" >&2; }
outbox_die() { printf '[%s] ERROR: %s\n' "${0##*/}" "$*" >&2; exit 1; }

# Directory with initdb/pg_ctl/postgres/psql (newest installed major version).
outbox_pg_bindir() {
    if [[ -n "${OUTBOX_PG_BINDIR:-}" ]]; then
        printf '%s\n' "$OUTBOX_PG_BINDIR"
        return 0
    fi
    local d best=""
    for d in /usr/lib/postgresql/*/bin; do
        [[ -x "$d/pg_ctl" ]] || continue
        if [[ -z "$best" ]] || (( ${d//[^0-9]/} > ${best//[^0-9]/} )); then best="$d"; fi
    done
    if [[ -z "$best" ]] && command -v pg_ctl >/dev/null 2>&1; then
        best="$(dirname -- "$(command -v pg_ctl)")"
    fi
    [[ -n "$best" ]] || return 1
    printf '%s\n' "$best"
}

# Directory with rabbitmq-server/rabbitmqctl (not the /usr/sbin wrappers,
# which switch to the rabbitmq system user).
outbox_rabbit_bindir() {
    local d="${OUTBOX_RABBIT_BINDIR:-/usr/lib/rabbitmq/bin}"
    [[ -x "$d/rabbitmq-server" ]] || return 1
    printf '%s\n' "$d"
}

# Export the environment our RabbitMQ node and its CLI tools need.  Changes
# HOME, so call it in a subshell.
outbox_rabbit_env() {
    export HOME="$OUTBOX_RABBIT_HOME"
    export OUTBOX_SERVICES_MARK
    export RABBITMQ_NODENAME="$OUTBOX_RABBIT_NODENAME"
    export RABBITMQ_USE_LONGNAME=false
    export RABBITMQ_DIST_PORT="$OUTBOX_RABBIT_DIST_PORT"
    export RABBITMQ_CTL_DIST_PORT_MIN="$OUTBOX_RABBIT_CTL_PORT_MIN"
    export RABBITMQ_CTL_DIST_PORT_MAX="$OUTBOX_RABBIT_CTL_PORT_MAX"
    export ERL_EPMD_PORT="$OUTBOX_EPMD_PORT"
    export ERL_EPMD_ADDRESS="$OUTBOX_SERVICES_HOST"
    export RABBITMQ_CONF_ENV_FILE="$OUTBOX_RABBIT_DIR/rabbitmq-env.conf"
    export RABBITMQ_CONFIG_FILE="$OUTBOX_RABBIT_CONF"
    export RABBITMQ_CONFIG_FILES="$OUTBOX_RABBIT_DIR/conf.d"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$OUTBOX_RABBIT_DIR/advanced.config"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$OUTBOX_RABBIT_DIR/enabled_plugins"
    export RABBITMQ_MOTD_FILE="$OUTBOX_RABBIT_DIR/motd"
    export RABBITMQ_MNESIA_BASE="$OUTBOX_RABBIT_MNESIA_BASE"
    export RABBITMQ_LOG_BASE="$OUTBOX_RABBIT_LOG_DIR"
    export RABBITMQ_PID_FILE="$OUTBOX_RABBIT_PID_FILE"
    # Erlang distribution of the node and of the CLI only on loopback.
    # OUTBOX_RABBIT_ERL_ARGS: more VM arguments (scripts/cluster.sh: each node's source address
    # and tick time, so one node can be cut off the others).
    export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}${OUTBOX_RABBIT_ERL_ARGS:+ $OUTBOX_RABBIT_ERL_ARGS}"
    export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    unset RABBITMQ_ERLANG_COOKIE NOTIFY_SOCKET RABBITMQ_ENV_LOADED RABBITMQ_SCRIPTS_DIR
}

# Close every file descriptor above 2 (call in a subshell right before exec'ing
# a daemon), so daemons do not keep the caller's pipes or lock files open; a
# CI step or $(...) waiting for EOF on such a pipe would otherwise hang.
outbox_close_fds() {
    local fd
    for fd in /proc/"$BASHPID"/fd/*; do
        fd="${fd##*/}"
        [[ "$fd" =~ ^[0-9]+$ ]] || continue
        (( fd > 2 && fd != 255 )) || continue
        eval "exec $fd>&-" 2>/dev/null || true
    done
}

# rabbitmqctl / rabbitmq-diagnostics / ... against our node.
outbox_rabbit_tool() {
    local tool="$1" bindir
    shift
    bindir="$(outbox_rabbit_bindir)" || outbox_die "RabbitMQ is not installed; run scripts/deps.sh"
    (
        outbox_rabbit_env
        # Run while our node is down, the CLI starts an epmd daemon.
        outbox_close_fds
        exec "$bindir/$tool" "$@"
    )
}
outbox_rabbitmqctl() { outbox_rabbit_tool rabbitmqctl "$@"; }

# True when something accepts TCP connections on host:port (2 s timeout).
outbox_tcp_open() {
    # shellcheck disable=SC2016  # expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# True when an AMQP 0-9-1 broker answers the protocol header with a
# Connection.Start method frame on host:port.
outbox_amqp_handshake() {
    local reply
    # shellcheck disable=SC2016  # expanded by the inner bash
    reply="$(timeout 3 bash -c '
        exec 3<>"/dev/tcp/$1/$2" || exit 1
        printf "AMQP\x00\x00\x09\x01" >&3
        head -c 11 <&3 | od -An -tx1' _ "$1" "$2" 2>/dev/null)" || return 1
    # frame type 1 (method), channel 0, ..., class 10 (connection), method 10 (start)
    reply="${reply//[[:space:]]/}"
    [[ "$reply" == 010000* && "${reply:14:8}" == 000a000a ]]
}

# PIDs of processes carrying our mark (i.e. started by scripts/services.sh
# for this run dir), excluding the calling shell and its ancestors.
outbox_our_pids() {
    local f pid skip=" " p="$BASHPID"
    while [[ -n "$p" && "$p" != 0 && "$p" != 1 ]]; do
        skip+="$p "
        p="$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)"
    done
    for f in /proc/[0-9]*/environ; do
        pid="${f#/proc/}"
        pid="${pid%/environ}"
        [[ "$skip" == *" $pid "* ]] && continue
        if grep -qxzF -- "OUTBOX_SERVICES_MARK=$OUTBOX_SERVICES_MARK" "$f" 2>/dev/null; then
            printf '%s\n' "$pid"
        fi
    done
}

# True when PID is alive and one of ours.
outbox_pid_is_ours() {
    local pid="$1"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    grep -qxzF -- "OUTBOX_SERVICES_MARK=$OUTBOX_SERVICES_MARK" "/proc/$pid/environ" 2>/dev/null
}

outbox_print_env() {
    printf "export OUTBOX_PG_URL='%s'\n" "$OUTBOX_LOCAL_PG_URL"
    printf "export OUTBOX_AMQP_URL='%s'\n" "$OUTBOX_LOCAL_AMQP_URL"
    printf "export OUTBOX_AMQPS_URL='%s'\n" "$OUTBOX_LOCAL_AMQPS_URL"
    printf "export OUTBOX_TLS_CA='%s'\n" "$OUTBOX_TLS_DIR/ca.crt"
}
