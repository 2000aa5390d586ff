#!/usr/bin/env python3
"""CPU of the processes a drain runs on, one line a second: RabbitMQ (beam.smp), PostgreSQL (every
postgres process), the relay's drain child (relay_drain) and relay_bench (B's publisher, and the
subscriber thread of E), in cores (user + system time over wall time), from /proc/<pid>/stat.

    python3 bench/experiments/proc_cpu.py > cpu.log &   # then, e.g.:
    bench/run --only B,E --drain-sizes 1000000; kill %1

The windows of a pair are told apart by who is busy: relay_drain runs only during the relay's drain.
"""
import os
import time

NAMES = ("beam.smp", "postgres", "relay_drain", "relay_bench")
HZ = os.sysconf("SC_CLK_TCK")


def snapshot():
    total = {n: 0 for n in NAMES}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        for n in NAMES:
            if comm.startswith(n[:15]):  # the kernel keeps 15 characters of a name
                total[n] += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def main():
    prev, prev_t = snapshot(), time.time()
    while True:
        time.sleep(1)
        cur, t = snapshot(), time.time()
        cores = " ".join(f"{n}={(cur[n] - prev[n]) / HZ / (t - prev_t):.2f}" for n in NAMES)
        print(time.strftime("%H:%M:%S"), cores, flush=True)
        prev, prev_t = cur, t


if __name__ == "__main__":
    main()
