#!/usr/bin/env bash
# Runs a daemon for SECONDS, sends it SIGTERM, and gives it GRACE seconds to exit:
#   tests/security/stop_daemon.sh SECONDS GRACE COMMAND [ARG...]
# Exits with the daemon's status. A daemon still running after GRACE is described (each thread's
# name, kernel wait channel and stack; with gdb, each thread's backtrace, without arguments, so no
# secret passed to a function is printed), killed with SIGKILL, and the exit status is 137.
set -u
seconds=$1 grace=$2
shift 2
"$@" &
pid=$!
sleep "$seconds"
kill -TERM "$pid" 2>/dev/null
for _ in $(seq $((grace * 10))); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "stop_daemon.sh: pid $pid did not exit within ${grace} s of SIGTERM; its threads:"
  for t in /proc/"$pid"/task/*; do
    echo "-- thread ${t##*/} $(cat "$t/comm" 2>/dev/null) waiting in $(cat "$t/wchan" 2>/dev/null)"
    cat "$t/stack" 2>/dev/null
  done
  if command -v gdb >/dev/null; then
    timeout 60 gdb -batch -nx -p "$pid" -ex "set print frame-arguments none" -ex "thread apply all bt" 2>&1 |
      grep -E '^(Thread|#)'
  fi
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  exit 137
fi
wait "$pid"
