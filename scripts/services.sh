#!/usr/bin/env bash
# Throwaway PostgreSQL + RabbitMQ for development and tests, owned by the repo.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

OUTBOX_SERVICES_TIMEOUT="${OUTBOX_SERVICES_TIMEOUT:-60}"
# Which services up/down/status handle: "pg rabbitmq" (default), "pg" or "rabbitmq" (scripts/cluster.sh
# runs one per node this way).
OUTBOX_SERVICES="${OUTBOX_SERVICES:-pg rabbitmq}"
want() { [[ " $OUTBOX_SERVICES " == *" $1 "* ]]; }

usage() {
    cat <<EOF
Usage: scripts/services.sh COMMAND [ARGS...]

Throwaway PostgreSQL and RabbitMQ for this checkout.  Data, logs, sockets and
pid files live in $OUTBOX_RUN_DIR (override: OUTBOX_RUN_DIR).

Commands:
  up                 start both (idempotent), wait until ready, print the env
  down [--purge]     stop both, leave none of our processes; --purge also
                     deletes the data directory
  status             show whether each service is up (exit 0 only if both are)
  env                print 'export OUTBOX_PG_URL=...' / 'export OUTBOX_AMQP_URL=...'
                     (use: eval "\$(scripts/services.sh env)")
  psql ARGS...       psql connected to our database
  rabbitmqctl ARGS...           rabbitmqctl for our node
  rabbitmq-diagnostics ARGS...  rabbitmq-diagnostics for our node

Endpoints (never the system defaults):
  PostgreSQL  $OUTBOX_LOCAL_PG_URL (also TLS: sslmode=verify-full sslrootcert=$OUTBOX_TLS_DIR/ca.crt)
  RabbitMQ    $OUTBOX_LOCAL_AMQP_URL
              $OUTBOX_LOCAL_AMQPS_URL (TLS, CA $OUTBOX_TLS_DIR/ca.crt)
              node $OUTBOX_RABBIT_NODENAME, distribution port $OUTBOX_RABBIT_DIST_PORT, epmd port $OUTBOX_EPMD_PORT
EOF
}

log() { outbox_log "$@"; }
die() { outbox_die "$@"; }

# ============================================================== common

ensure_run_dir() {
    mkdir -p "$OUTBOX_RUN_DIR"
    if [[ ! -e "$OUTBOX_RUN_DIR/.outbox-services" ]]; then
        printf 'Created by scripts/services.sh; safe to delete when the services are down.\n' \
            >"$OUTBOX_RUN_DIR/.outbox-services"
    fi
}

take_lock() {
    ensure_run_dir
    exec 9>>"$OUTBOX_RUN_DIR/.lock"
    flock -w 120 9 || die "another scripts/services.sh is busy (lock $OUTBOX_RUN_DIR/.lock)"
}

# PIDs listening on TCP port $1 (any address).
port_pids() {
    ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u || true
}

# Fail when TCP port $1 is taken by a process that is not ours.
check_port_free() {
    local port="$1" what="$2" pid
    for pid in $(port_pids "$port"); do
        outbox_pid_is_ours "$pid" && continue
        die "port $port ($what) is in use by another process: $(ps -o pid=,user=,args= -p "$pid" 2>/dev/null || echo "pid $pid")"
    done
    if outbox_tcp_open "$OUTBOX_SERVICES_HOST" "$port" && [[ -z "$(port_pids "$port")" ]]; then
        die "port $port ($what) is in use (owner not visible to $(id -un))"
    fi
}

show_log_tail() {
    local f
    for f in "$@"; do
        [[ -s "$f" ]] || continue
        printf '\n----- last lines of %s -----\n' "$f" >&2
        tail -n 40 "$f" >&2
        printf -- '-----\n' >&2
    done
}

remaining() { echo $(( DEADLINE - SECONDS )); }

# ============================================================== TLS

# A fresh CA and server certificate (localhost, 127.0.0.1, ::1) for both services.
tls_prepare() {
    command -v openssl >/dev/null 2>&1 || die "openssl not found; run scripts/deps.sh"
    local d="$OUTBOX_TLS_DIR"
    rm -rf "$d"
    mkdir -p "$d"
    chmod 0755 "$d"
    (
        cd "$d"
        umask 077
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
            -subj "/CN=outbox throwaway test CA" -keyout ca.key -out ca.crt \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
            -keyout server.key -out server.csr
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile server.ext -out server.crt
        chmod 0644 ca.crt server.crt
    ) >"$OUTBOX_RUN_DIR/tls.log" 2>&1 || { show_log_tail "$OUTBOX_RUN_DIR/tls.log"; die "tls: openssl failed"; }
}

# ============================================================== PostgreSQL

PG_BINDIR=""

pg_need_bins() {
    PG_BINDIR="$(outbox_pg_bindir)" || die "PostgreSQL server binaries not found; run scripts/deps.sh"
    [[ -x "$PG_BINDIR/initdb" && -x "$PG_BINDIR/postgres" ]] || die "incomplete PostgreSQL in $PG_BINDIR; run scripts/deps.sh"
}

# Run a command as the account that owns the cluster (postgres when we are root).
as_pg() {
    if (( EUID == 0 )); then
        runuser -u "$OUTBOX_PG_OS_USER" -- "$@"
    else
        "$@"
    fi
}

pg_pid() {
    head -n 1 "$OUTBOX_PG_DATA/postmaster.pid" 2>/dev/null || true
}

# Ours: carries our mark, or (should the environment ever be unreadable) is a
# postmaster serving our data directory.
pg_pid_is_ours() {
    local pid="$1"
    outbox_pid_is_ours "$pid" && return 0
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-D $OUTBOX_PG_DATA "
}

pg_running() { pg_pid_is_ours "$(pg_pid)"; }

pg_ready() {
    [[ -n "$PG_BINDIR" ]] || PG_BINDIR="$(outbox_pg_bindir)" || return 1
    "$PG_BINDIR/pg_isready" -q -h "$OUTBOX_SERVICES_HOST" -p "$OUTBOX_PG_PORT" -t 2
}

# postgres must be able to reach its directories when we run as root.
pg_fix_traversal() {
    local dir="$1" path="" part
    as_pg test -x "$dir" && return 0
    local -a parts
    IFS=/ read -ra parts <<<"${dir#/}"
    for part in "${parts[@]}"; do
        path+="/$part"
        if ! as_pg test -x "$path"; then
            log "pg: chmod o+x $path (so the $OUTBOX_PG_OS_USER user can reach $dir)"
            chmod o+x "$path"
        fi
    done
}

pg_prepare() {
    if (( EUID == 0 )); then
        id -u "$OUTBOX_PG_OS_USER" >/dev/null 2>&1 \
            || die "user '$OUTBOX_PG_OS_USER' does not exist (it comes with the postgresql package; run scripts/deps.sh)"
        mkdir -p "$OUTBOX_PG_DIR"
        pg_fix_traversal "$OUTBOX_RUN_DIR"
        if [[ "$(stat -c %U "$OUTBOX_PG_DIR")" != "$OUTBOX_PG_OS_USER" ]]; then
            chown -R "$OUTBOX_PG_OS_USER:" "$OUTBOX_PG_DIR"
        fi
    fi
    as_pg mkdir -p "$OUTBOX_PG_DIR" "$OUTBOX_PG_LOG_DIR"
    as_pg mkdir -p "$OUTBOX_PG_SOCK_DIR"
    as_pg chmod 0755 "$OUTBOX_PG_SOCK_DIR"

    if [[ ! -f "$OUTBOX_PG_DATA/PG_VERSION" ]]; then
        local locale=C.UTF-8
        locale -a 2>/dev/null | grep -qix 'c.utf-\?8' || locale=C
        log "pg: initdb $OUTBOX_PG_DATA"
        as_pg rm -rf "$OUTBOX_PG_DATA.tmp" "$OUTBOX_PG_DATA"
        # --no-sync only skips fsync of the freshly created template files;
        # the server itself runs with fsync=on.
        if ! (cd "$OUTBOX_PG_DIR" && as_pg "$PG_BINDIR/initdb" -D "$OUTBOX_PG_DATA.tmp" -U postgres \
                --auth=trust --encoding=UTF8 --locale="$locale" --no-sync --no-instructions \
                >"$OUTBOX_PG_LOG_DIR/initdb.log" 2>&1); then
            show_log_tail "$OUTBOX_PG_LOG_DIR/initdb.log"
            die "pg: initdb failed"
        fi
        as_pg mv "$OUTBOX_PG_DATA.tmp" "$OUTBOX_PG_DATA"
    fi

    # Our settings, rewritten on every start; postgresql.conf includes them last.
    as_pg tee "$OUTBOX_PG_DATA/outbox.conf" >/dev/null <<EOF
# Written by scripts/services.sh on every start; edits are overwritten.
listen_addresses = '$OUTBOX_SERVICES_HOST'
port = $OUTBOX_PG_PORT
unix_socket_directories = '$OUTBOX_PG_SOCK_DIR'
max_connections = 200
shared_buffers = 256MB
# 1 GB (the default) checkpoints every few hundred thousand relayed events of 1 KiB, each mark
# being a new row version; production servers run with more.
max_wal_size = 4GB
fsync = on
synchronous_commit = on
full_page_writes = on
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
log_timezone = 'UTC'
timezone = 'UTC'
ssl = on
ssl_cert_file = 'outbox-server.crt'
ssl_key_file = 'outbox-server.key'
EOF
    # The server's key must belong to the account that runs it, mode 0600.
    as_pg cp "$OUTBOX_TLS_DIR/server.crt" "$OUTBOX_PG_DATA/outbox-server.crt"
    as_pg install -m 0600 /dev/null "$OUTBOX_PG_DATA/outbox-server.key"
    as_pg tee "$OUTBOX_PG_DATA/outbox-server.key" <"$OUTBOX_TLS_DIR/server.key" >/dev/null
    # Trust for everyone (throwaway server), except members of outbox_password_auth: their
    # passwords are checked, so tests can tell a right password from a wrong one.
    if ! grep -q "outbox_password_auth" "$OUTBOX_PG_DATA/pg_hba.conf"; then
        { printf 'host all +outbox_password_auth 127.0.0.1/32 scram-sha-256\n'
          printf 'host all +outbox_password_auth ::1/128 scram-sha-256\n'
          cat "$OUTBOX_PG_DATA/pg_hba.conf"; } | as_pg tee "$OUTBOX_PG_DATA/pg_hba.conf.new" >/dev/null
        as_pg mv "$OUTBOX_PG_DATA/pg_hba.conf.new" "$OUTBOX_PG_DATA/pg_hba.conf"
    fi
    if ! grep -qx "include 'outbox.conf'" "$OUTBOX_PG_DATA/postgresql.conf"; then
        printf "\ninclude 'outbox.conf'\n" | as_pg tee -a "$OUTBOX_PG_DATA/postgresql.conf" >/dev/null
    fi

    # Leftovers of a previous session (machine rebooted / processes killed):
    # a pid file whose process is gone, or is not ours, would block the start.
    local pid
    pid="$(pg_pid)"
    if [[ -n "$pid" ]] && ! pg_pid_is_ours "$pid"; then
        log "pg: removing stale postmaster.pid (pid $pid is not running)"
        as_pg rm -f "$OUTBOX_PG_DATA/postmaster.pid"
    fi
    # Not running (checked by the caller), so a socket lock file is stale too.
    as_pg rm -f "$OUTBOX_PG_SOCK_DIR/.s.PGSQL.$OUTBOX_PG_PORT.lock" "$OUTBOX_PG_SOCK_DIR/.s.PGSQL.$OUTBOX_PG_PORT"
}

pg_up() {
    if pg_running; then
        local t=0
        until pg_ready; do
            (( t++ < 20 )) || { show_log_tail "$OUTBOX_PG_LOG"; die "pg: running (pid $(pg_pid)) but not accepting connections"; }
            sleep 0.5
        done
        log "pg: already running (pid $(pg_pid))"
        return 0
    fi
    pg_prepare

    log "pg: starting on $OUTBOX_SERVICES_HOST:$OUTBOX_PG_PORT"
    local timeout
    timeout="$(remaining)"
    (( timeout > 5 )) || timeout=5
    if ! (cd "$OUTBOX_PG_DIR" && outbox_close_fds && as_pg env OUTBOX_SERVICES_MARK="$OUTBOX_SERVICES_MARK" \
            setsid -w "$PG_BINDIR/pg_ctl" -D "$OUTBOX_PG_DATA" -l "$OUTBOX_PG_LOG" \
            -w -t "$timeout" -s start </dev/null); then
        show_log_tail "$OUTBOX_PG_LOG"
        die "pg: pg_ctl start failed"
    fi

    # Role and database the URL uses (idempotent); a standby has them from its primary.
    if [[ ! -f "$OUTBOX_PG_DATA/standby.signal" ]] && ! as_pg "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$OUTBOX_PG_SOCK_DIR" -p "$OUTBOX_PG_PORT" \
            -U postgres -d postgres >/dev/null <<EOF
SELECT format('CREATE ROLE %I LOGIN SUPERUSER', '$OUTBOX_PG_USER')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$OUTBOX_PG_USER') \gexec
ALTER ROLE "$OUTBOX_PG_USER" PASSWORD '$OUTBOX_PG_PASSWORD';
SELECT format('CREATE DATABASE %I OWNER %I', '$OUTBOX_PG_DB', '$OUTBOX_PG_USER')
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$OUTBOX_PG_DB') \gexec
EOF
    then
        show_log_tail "$OUTBOX_PG_LOG"
        die "pg: creating role/database failed"
    fi

    # End-to-end check through the URL clients use.
    if ! PGCONNECT_TIMEOUT=5 "$PG_BINDIR/psql" -X -q -At -d "$OUTBOX_LOCAL_PG_URL" -c 'SELECT 1' >/dev/null; then
        show_log_tail "$OUTBOX_PG_LOG"
        die "pg: server started but '$OUTBOX_LOCAL_PG_URL' does not work"
    fi
    log "pg: ready (pid $(pg_pid))"
}

pg_down() {
    pg_need_bins
    if pg_running; then
        log "pg: stopping (pid $(pg_pid))"
        (cd / && as_pg "$PG_BINDIR/pg_ctl" -D "$OUTBOX_PG_DATA" -m fast -w -t 30 -s stop) \
            || log "pg: pg_ctl stop failed; killing"
    fi
}

# ============================================================== RabbitMQ

RABBIT_BINDIR=""

rabbit_need_bins() {
    RABBIT_BINDIR="$(outbox_rabbit_bindir)" || die "RabbitMQ not found in ${OUTBOX_RABBIT_BINDIR:-/usr/lib/rabbitmq/bin}; run scripts/deps.sh"
    command -v erl >/dev/null 2>&1 || die "Erlang (erl) not found; run scripts/deps.sh"
}

rabbit_pid() {
    head -n 1 "$OUTBOX_RABBIT_PID_FILE" 2>/dev/null || true
}

rabbit_running() { outbox_pid_is_ours "$(rabbit_pid)"; }

rabbit_ready() { outbox_amqp_handshake "$OUTBOX_SERVICES_HOST" "$OUTBOX_AMQP_PORT"; }

rabbit_prepare() {
    mkdir -p "$OUTBOX_RABBIT_DIR" "$OUTBOX_RABBIT_MNESIA_BASE" "$OUTBOX_RABBIT_LOG_DIR" "$OUTBOX_RABBIT_DIR/conf.d"
    mkdir -p "$OUTBOX_RABBIT_HOME"
    chmod 0700 "$OUTBOX_RABBIT_HOME"

    # Private Erlang cookie: HOME of the node and of our CLI calls is
    # $OUTBOX_RABBIT_HOME, so ~/.erlang.cookie is this file.
    local cookie="$OUTBOX_RABBIT_HOME/.erlang.cookie"
    if [[ ! -s "$cookie" ]]; then
        rm -f "$cookie"
        (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F >"$cookie")
        chmod 0400 "$cookie"
    fi

    cat >"$OUTBOX_RABBIT_CONF" <<EOF
# Written by scripts/services.sh on every start; edits are overwritten.
listeners.tcp.default = $OUTBOX_SERVICES_HOST:$OUTBOX_AMQP_PORT
loopback_users = none
default_vhost = /
default_user = $OUTBOX_RABBIT_USER
default_pass = $OUTBOX_RABBIT_PASSWORD
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
default_user_tags.administrator = true
listeners.ssl.default = $OUTBOX_SERVICES_HOST:$OUTBOX_AMQPS_PORT
ssl_options.cacertfile = $OUTBOX_TLS_DIR/ca.crt
ssl_options.certfile = $OUTBOX_TLS_DIR/server.crt
ssl_options.keyfile = $OUTBOX_TLS_DIR/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
disk_free_limit.absolute = 50MB
log.console = false
log.file.level = info
EOF
    printf '[%s].\n' "${OUTBOX_RABBIT_PLUGINS:-rabbitmq_consistent_hash_exchange}" >"$OUTBOX_RABBIT_DIR/enabled_plugins"
    : >"$OUTBOX_RABBIT_DIR/rabbitmq-env.conf"

    local pid
    pid="$(rabbit_pid)"
    if [[ -n "$pid" ]] && ! outbox_pid_is_ours "$pid"; then
        log "rabbitmq: removing stale pid file (pid $pid is not running)"
        rm -f "$OUTBOX_RABBIT_PID_FILE"
    fi
}

rabbit_up() {
    local pid warm=0
    if rabbit_running; then
        pid="$(rabbit_pid)"
        warm=1
        log "rabbitmq: already running (pid $pid)"
    else
        rabbit_prepare
        log "rabbitmq: starting node $OUTBOX_RABBIT_NODENAME on $OUTBOX_SERVICES_HOST:$OUTBOX_AMQP_PORT"
        {
            printf '\n===== %s scripts/services.sh up =====\n' "$(date '+%F %T')"
        } >>"$OUTBOX_RABBIT_LOG_DIR/startup.log"
        (
            outbox_rabbit_env
            cd "$OUTBOX_RABBIT_DIR"
            outbox_close_fds
            # $! is rabbitmq-server's sh wrapper, which runs beam.smp as a
            # child and outlives it by an instant; the node's own pid is in
            # $OUTBOX_RABBIT_PID_FILE.
            exec setsid "$RABBIT_BINDIR/rabbitmq-server" </dev/null >>"$OUTBOX_RABBIT_LOG_DIR/startup.log" 2>&1
        ) &
        pid=$!
    fi

    local logs=("$OUTBOX_RABBIT_LOG_DIR/startup.log" "$OUTBOX_RABBIT_LOG_DIR/$OUTBOX_RABBIT_NODENAME.log")
    until rabbit_ready; do
        if ! kill -0 "$pid" 2>/dev/null; then
            show_log_tail "${logs[@]}"
            die "rabbitmq: node exited during startup"
        fi
        if (( SECONDS >= DEADLINE )); then
            show_log_tail "${logs[@]}"
            die "rabbitmq: not accepting AMQP connections on port $OUTBOX_AMQP_PORT after ${OUTBOX_SERVICES_TIMEOUT}s"
        fi
        sleep 0.25
    done
    (( warm )) && return 0
    local timeout
    timeout="$(remaining)"
    (( timeout > 5 )) || timeout=5
    if ! outbox_rabbitmqctl -q await_startup --timeout "$timeout" >/dev/null 2>&1; then
        show_log_tail "${logs[@]}"
        die "rabbitmq: AMQP port is open but 'rabbitmqctl await_startup' fails (cookie/epmd?)"
    fi
    log "rabbitmq: ready (pid $(rabbit_pid))"
}

rabbit_down() {
    rabbit_need_bins
    local pid
    pid="$(rabbit_pid)"
    if outbox_pid_is_ours "$pid"; then
        log "rabbitmq: stopping node $OUTBOX_RABBIT_NODENAME (pid $pid)"
        if ! outbox_rabbitmqctl -q shutdown --timeout 30 >/dev/null 2>&1; then
            log "rabbitmq: rabbitmqctl shutdown failed; sending SIGTERM"
            kill -TERM "$pid" 2>/dev/null || true
        fi
        local t=0
        while kill -0 "$pid" 2>/dev/null && (( t++ < 60 )); do sleep 0.25; done
    fi
    rm -f "$OUTBOX_RABBIT_PID_FILE"
}

# ============================================================== commands

kill_leftovers() {
    local pids t
    pids="$(outbox_our_pids)"
    [[ -n "$pids" ]] || return 0
    log "stopping remaining processes of ours (epmd, ...): $(echo "$pids" | paste -sd' ')"
    # shellcheck disable=SC2086  # word splitting intended
    kill -TERM $pids 2>/dev/null || true
    for (( t = 0; t < 40; t++ )); do
        sleep 0.25
        pids="$(outbox_our_pids)"
        [[ -n "$pids" ]] || return 0
    done
    log "still there after SIGTERM, sending SIGKILL: $(echo "$pids" | paste -sd' ')"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
}

cmd_up() {
    (( $# == 0 )) || die "up takes no arguments"
    pg_need_bins
    rabbit_need_bins
    command -v ss >/dev/null 2>&1 || die "ss not found (iproute2); run scripts/deps.sh"
    take_lock
    # Port clashes with foreign processes fail before anything is started.
    if want pg && ! pg_running; then
        check_port_free "$OUTBOX_PG_PORT" PostgreSQL
    fi
    if want rabbitmq && ! rabbit_running; then
        check_port_free "$OUTBOX_AMQP_PORT" "RabbitMQ AMQP"
        check_port_free "$OUTBOX_AMQPS_PORT" "RabbitMQ AMQPS"
        check_port_free "$OUTBOX_RABBIT_DIST_PORT" "RabbitMQ distribution"
        # The nodes of scripts/cluster.sh share one epmd, started by whichever node came first.
        [[ -n "${OUTBOX_EPMD_SHARED:-}" ]] || check_port_free "$OUTBOX_EPMD_PORT" "epmd"
    fi
    # New certificates only when a service starts (a running one keeps serving the old ones).
    if { want pg && ! pg_running; } || { want rabbitmq && ! rabbit_running; }; then
        tls_prepare
    fi
    DEADLINE=$(( SECONDS + OUTBOX_SERVICES_TIMEOUT ))
    local start=$SECONDS pg_job="" rabbit_job="" rc=0
    if want pg; then pg_up & pg_job=$!; fi
    if want rabbitmq; then rabbit_up & rabbit_job=$!; fi
    if [[ -n "$pg_job" ]]; then wait "$pg_job" || rc=1; fi
    if [[ -n "$rabbit_job" ]]; then wait "$rabbit_job" || rc=1; fi
    (( rc == 0 )) || die "services did not come up (logs under $OUTBOX_RUN_DIR; 'scripts/services.sh down' stops what did start)"
    log "up in $(( SECONDS - start ))s"
    outbox_print_env
}

cmd_down() {
    local purge=0
    case "${1:-}" in
        --purge) purge=1 ;;
        "") ;;
        *) die "usage: down [--purge]" ;;
    esac
    if [[ ! -d "$OUTBOX_RUN_DIR" ]]; then
        log "nothing to stop ($OUTBOX_RUN_DIR does not exist)"
        return 0
    fi
    take_lock
    local rc=0 pg_job=""
    if want pg; then pg_down & pg_job=$!; fi
    if want rabbitmq; then rabbit_down || rc=1; fi
    if [[ -n "$pg_job" ]]; then wait "$pg_job" || rc=1; fi
    kill_leftovers
    local left
    left="$(outbox_our_pids)"
    if [[ -n "$left" ]]; then
        ps -o pid,user,stat,args -p "$(echo "$left" | paste -sd,)" >&2 || true
        die "some of our processes are still there"
    fi
    rm -f "$OUTBOX_PG_SOCK_DIR/.s.PGSQL.$OUTBOX_PG_PORT" "$OUTBOX_PG_SOCK_DIR/.s.PGSQL.$OUTBOX_PG_PORT.lock" 2>/dev/null || true
    if (( purge )); then
        [[ -e "$OUTBOX_RUN_DIR/.outbox-services" ]] \
            || die "refusing to delete $OUTBOX_RUN_DIR: no .outbox-services marker in it"
        log "purging $OUTBOX_RUN_DIR"
        rm -rf -- "$OUTBOX_RUN_DIR"
        [[ "$OUTBOX_PG_SOCK_DIR" == "$OUTBOX_PG_DIR"/* ]] || rm -rf -- "$OUTBOX_PG_SOCK_DIR"
    fi
    (( rc == 0 )) || die "stop reported errors (see above)"
    log "down"
}

cmd_status() {
    local rc=0 pid
    pid="$(pg_pid)"
    if ! want pg; then
        :
    elif pg_pid_is_ours "$pid" && pg_ready; then
        printf 'postgresql: up    pid %-7s %s\n' "$pid" "$OUTBOX_LOCAL_PG_URL"
    elif pg_pid_is_ours "$pid"; then
        printf 'postgresql: STARTING/BROKEN pid %s (not accepting connections; log %s)\n' "$pid" "$OUTBOX_PG_LOG"; rc=3
    else
        printf 'postgresql: down\n'; rc=3
    fi
    pid="$(rabbit_pid)"
    if ! want rabbitmq; then
        :
    elif outbox_pid_is_ours "$pid" && rabbit_ready; then
        printf 'rabbitmq:   up    pid %-7s %s (node %s)\n' "$pid" "$OUTBOX_LOCAL_AMQP_URL" "$OUTBOX_RABBIT_NODENAME"
    elif outbox_pid_is_ours "$pid"; then
        printf 'rabbitmq:   STARTING/BROKEN pid %s (no AMQP handshake; logs %s)\n' "$pid" "$OUTBOX_RABBIT_LOG_DIR"; rc=3
    else
        printf 'rabbitmq:   down\n'; rc=3
    fi
    return "$rc"
}

cmd_psql() {
    pg_need_bins
    exec "$PG_BINDIR/psql" -X -d "$OUTBOX_LOCAL_PG_URL" "$@"
}

main() {
    local cmd="${1:-}"
    (( $# )) && shift
    case "$cmd" in
        up) cmd_up "$@" ;;
        down) cmd_down "$@" ;;
        status) cmd_status ;;
        env) outbox_print_env ;;
        psql) cmd_psql "$@" ;;
        rabbitmqctl|rabbitmq-diagnostics|rabbitmq-queues|rabbitmq-plugins)
            outbox_rabbit_tool "$cmd" "$@" ;;
        -h|--help|help) usage ;;
        "") usage >&2; exit 2 ;;
        *) printf 'unknown command: %s\n\n' "$cmd" >&2; usage >&2; exit 2 ;;
    esac
}

main "$@"
