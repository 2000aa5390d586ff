#!/usr/bin/env bash
# Install the Debian packages the project needs (only those that are missing).
set -euo pipefail

# Everything the project needs from Debian.  Extend this list, keep it sorted
# by purpose.  (A package whose command is already provided by a non-Debian
# install is skipped, see OUTBOX_DEB_SKIP_IF below.)
OUTBOX_DEB_PACKAGES=(
    # toolchain
    build-essential cmake ninja-build pkg-config git ccache
    clang-format clang-tidy abigail-tools
    # libraries
    libpq-dev librabbitmq-dev libcjson-dev libgtest-dev googletest
    libcli11-dev libcpp-httplib-dev uuid-dev
    # services (started by scripts/services.sh)
    postgresql postgresql-contrib rabbitmq-server
    # bindings / examples
    php-cli php-cgi php-pgsql composer python3 python3-venv nodejs npm
    # process and socket tools used by the scripts; openssl makes the services' test certificates;
    # gdb prints the threads of a daemon that did not stop (tests/security/stop_daemon.sh)
    procps iproute2 openssl gdb
    # fuzzing (tests/fuzz): clang with libFuzzer and the sanitizer runtimes
    clang-14 libclang-rt-14-dev
    # packet loss and drops inside the fault suite's own network namespace (tests/faults)
    nftables
    # the operator console's browser test (tests/console): Debian's Chromium, headless, and its driver
    chromium chromium-driver
)

# package -> shell test; when the test succeeds the package is not needed
# (e.g. node/npm from NodeSource, python3 from pyenv).
declare -A OUTBOX_DEB_SKIP_IF=(
    [nodejs]='command -v node'
    [npm]='command -v npm'
    [python3]='command -v python3'
    [python3-venv]='python3 -c "import venv, ensurepip"'
)

usage() {
    cat <<'EOF'
Usage: scripts/deps.sh [--check] [--list]

Installs the Debian packages the project needs, when they are missing
(apt-get update + apt-get install -y --no-install-recommends).  Quick no-op when
everything is present.  node, npm and python3 that already exist from other
sources (NodeSource, pyenv, ...) are accepted as they are.

  --check   only report; exit 1 when something is missing
  --list    print the package list and exit
  -h, --help

Not root: prints the apt-get command to run and exits 1.
EOF
}

check_only=0
case "${1:-}" in
    -h|--help) usage; exit 0 ;;
    --list) printf '%s\n' "${OUTBOX_DEB_PACKAGES[@]}"; exit 0 ;;
    --check) check_only=1 ;;
    "") ;;
    *) usage >&2; exit 2 ;;
esac

log() { printf '[deps] %s\n' "$*" >&2; }

command -v dpkg-query >/dev/null 2>&1 || { log "dpkg-query not found: this script supports Debian/Ubuntu only"; exit 1; }

# One dpkg-query call for all packages; unknown packages print nothing.
declare -A installed=()
while IFS=' ' read -r name status; do
    [[ "$status" == installed ]] && installed["${name%%:*}"]=1
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${OUTBOX_DEB_PACKAGES[@]}" 2>/dev/null || true)

missing=()
for pkg in "${OUTBOX_DEB_PACKAGES[@]}"; do
    [[ -n "${installed[$pkg]:-}" ]] && continue
    if [[ -n "${OUTBOX_DEB_SKIP_IF[$pkg]:-}" ]] && bash -c "${OUTBOX_DEB_SKIP_IF[$pkg]}" >/dev/null 2>&1; then
        continue
    fi
    missing+=("$pkg")
done

if (( ${#missing[@]} == 0 )); then
    log "all ${#OUTBOX_DEB_PACKAGES[@]} packages present"
    exit 0
fi

log "missing: ${missing[*]}"
if (( check_only )); then
    exit 1
fi

apt_opts=(-y --no-install-recommends -o Dpkg::Use-Pty=0)
if (( EUID != 0 )); then
    log "not root; run:"
    printf 'sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install %s %s\n' \
        "${apt_opts[*]}" "${missing[*]}"
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# A failing third-party source must not stop us when the Debian lists are fine.
apt-get update -o Dpkg::Use-Pty=0 || log "warning: apt-get update reported errors; trying to install anyway"
apt-get install "${apt_opts[@]}" "${missing[@]}"

# Verify.
still=()
for pkg in "${missing[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)" != installed ]]; then
        still+=("$pkg")
    fi
done
if (( ${#still[@]} )); then
    log "still missing after install: ${still[*]}"
    exit 1
fi
log "installed: ${missing[*]}"
