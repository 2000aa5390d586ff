#!/usr/bin/env bash
# Runs a command on this machine as if libpq, librabbitmq and libcjson were not installed:
#   tests/python-dist/without_libs.sh CMD [ARG...]
# In a private mount namespace (unshare --mount; a user who is not root gets --map-root-user),
# every file of those libraries is covered by a bind mount of /dev/null and the dynamic linker's
# cache is rebuilt without them (ldconfig -C into a temporary file bound over /etc/ld.so.cache).
# Nothing changes outside the namespace. Fails, before running CMD, when no such library was found
# to hide or one is still listed by `ldconfig -p` or loadable by the dynamic linker.
set -euo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then sed -n '2,8p' "$0"; [[ $# -ge 1 ]]; exit; fi

if [[ "${OUTBOX_WITHOUT_LIBS_INNER:-}" != 1 ]]; then
  args=(--mount --propagation private)
  (( EUID == 0 )) || args+=(--map-root-user)
  OUTBOX_WITHOUT_LIBS_INNER=1 exec unshare "${args[@]}" -- "$0" "$@"
fi
unset OUTBOX_WITHOUT_LIBS_INNER
die() { echo "without_libs.sh: $*" >&2; exit 1; }

names='lib(pq|rabbitmq|cjson|cjson_utils)\.so'
# Every copy the linker could find: its cache, the usual directories (any version suffix).
mapfile -t found < <(
  { ldconfig -p | awk -v re="$names" '$1 ~ "^" re { print $NF }'
    find /usr/lib /usr/lib64 /usr/local/lib /opt -regextype posix-extended \
      -regex ".*/${names}(\\.[0-9.]+)?" 2>/dev/null || true
  } | xargs -r readlink -f | sort -u)
(( ${#found[@]} > 0 )) || die "found no libpq, librabbitmq or libcjson to hide (ldconfig -p, /usr/lib): nothing would be proven"

tmp=$(mktemp -d)
for f in "${found[@]}"; do
  [[ -f "$f" ]] || continue
  mount --bind /dev/null "$f"
  echo "hidden: $f"
done
# The linker's cache without them (ldconfig skips what is no longer an ELF file); -X: no symlinks made.
ldconfig -X -C "$tmp/ld.so.cache" 2>/dev/null
mount --bind "$tmp/ld.so.cache" /etc/ld.so.cache

if ldconfig -p | grep -E "$names"; then die "still in the linker's cache (above)"; fi
for soname in libpq.so.5 librabbitmq.so.4 libcjson.so.1; do
  if python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$soname" 2>/dev/null; then
    die "$soname still loads"
  fi
done
echo "gone: libpq, librabbitmq, libcjson (ldconfig -p lists none; dlopen of libpq.so.5, librabbitmq.so.4, libcjson.so.1 fails)"

rc=0
"$@" || rc=$?
rm -rf "$tmp"
exit "$rc"
