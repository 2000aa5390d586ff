#!/usr/bin/env python3
"""Plots of a relay_bench JSON report (bench/results/latest.json), written next to it:

  throughput_vs_batch_window.png  relay drain throughput vs relay.batch_size and vs relay.window (P),
                                  with the plain publisher B of the same run as a line
  drain_vs_backlog.png            relay drain throughput and relay peak RSS vs backlog size (D)
  latency_vs_load.png             COMMIT -> consumer p50/p99/p99.9 vs offered load, notify off/on (L)
  table_health.png                table sizes and dead tuples over time under steady load (H)

    bench/plot.py RESULTS.json [OUTDIR]

A plot whose scenario is in the report but cannot be drawn is an error (exit 1); a scenario that
did not run (--only) has no plot. Needs matplotlib (bench/run installs it into .run/venv).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402


def baseline_rate(report):
    for row in report["scenarios"]:
        if row["key"] == "B":
            return row["events_per_s"]
    return None


def plot_sweep(report, series, out):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    b = baseline_rate(report)
    for ax, key, field, label in ((axes[0], "sweep_batch", "batch_size", "relay.batch_size"),
                                  (axes[1], "sweep_window", "window", "relay.window")):
        pts = series.get(key, [])
        if not pts:
            raise SystemExit(f"plot: series {key} is empty")
        xs = [p[field] for p in pts]
        ys = [p["events_per_s"] for p in pts]
        ax.plot(xs, ys, "o-", label="relay drain")
        if b:
            ax.axhline(b, color="grey", linestyle="--", label=f"plain publisher B ({b:.0f}/s)")
            ax.axhline(0.85 * b, color="red", linestyle=":", label="0.85 x B (target)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(label)
        ax.set_ylabel("events/s")
        fixed = pts[0]["window"] if field == "batch_size" else pts[0]["batch_size"]
        other = "window" if field == "batch_size" else "batch"
        ax.set_title(f"drain of {report['params']['sweep_events']} events, {other} {fixed}")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_drain(report, series, out):
    pts = series["drain"]
    if not pts:
        raise SystemExit("plot: series drain is empty")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [p["backlog"] for p in pts]
    ax.plot(xs, [p["events_per_s"] for p in pts], "o-", label="relay drain (events/s)")
    b = baseline_rate(report)
    if b:
        ax.axhline(b, color="grey", linestyle="--", label=f"plain publisher B ({b:.0f}/s)")
    consumed = series.get("drain_consumed") or []
    if consumed:
        ax.plot([p["backlog"] for p in consumed], [p["events_per_s"] for p in consumed], "^-", color="tab:green",
                label="relay drain, queue consumed (E)")
        ax.plot([p["backlog"] for p in consumed], [p["baseline_events_per_s"] for p in consumed], "v:",
                color="tab:green", label="B as many messages, queue consumed (E)")
    ax.set_xscale("log")
    ax.set_xlabel("backlog (events)")
    ax.set_ylabel("events/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(xs, [p["peak_rss_kib"] / 1024 for p in pts], "s--", color="tab:orange", label="relay peak RSS (MiB)")
    ax2.set_ylabel("MiB")
    ax2.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="lower left")
    ax.set_title("relay drain vs backlog size")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_latency(report, series, out):
    pts = series["latency"]
    if not pts:
        raise SystemExit("plot: series latency is empty")
    modes = []
    for p in pts:
        if p["mode"] not in modes:
            modes.append(p["mode"])
    fig, axes = plt.subplots(1, len(modes), figsize=(4.6 * len(modes), 4.2), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        mp = sorted((p for p in pts if p["mode"] == mode), key=lambda p: p["offered_per_s"])
        xs = [p["offered_per_s"] for p in mp]
        for field, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9")):
            ax.plot(xs, [max(p[field], 0.01) for p in mp], "o-", label=label)
        ax.axhline(5, color="green", linestyle=":", label="p50 target 5 ms")
        ax.axhline(25, color="red", linestyle=":", label="p99 target 25 ms")
        ax.set_yscale("log")
        ax.set_xlabel("offered load (events/s)")
        ax.set_ylabel("COMMIT -> consumer (ms)")
        ax.set_title(mode)
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_health(report, series, out):
    h = series["health"]
    t = h["t"]
    if len(t) < 2:
        raise SystemExit("plot: series health has fewer than 2 samples")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, s in h["tables"].items():
        axes[0].plot(t, [x / 1048576 for x in s["size_bytes"]], label=name)
        axes[1].plot(t, s["dead"], label=name)
    for ax in axes:
        ax.axvline(h["warmup_s"], color="grey", linestyle=":", label="end of warm-up")
        ax.set_xlabel("seconds")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("total relation size (MiB)")
    axes[1].set_ylabel("dead tuples (pg_stat_user_tables)")
    axes[0].set_title(f"{h['rate_per_s']:.0f} events/s; flat: {h['flat']}")
    axes[1].set_title(f"purged {h['purged_outbox']} events, {h['purged_inbox']} inbox rows")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    src = sys.argv[1]
    outdir = sys.argv[2] if len(sys.argv) == 3 else os.path.dirname(os.path.abspath(src))
    with open(src) as f:
        report = json.load(f)
    series = report.get("series", {})
    made = []
    for key, fn, png in (("sweep_batch", plot_sweep, "throughput_vs_batch_window.png"),
                         ("drain", plot_drain, "drain_vs_backlog.png"),
                         ("latency", plot_latency, "latency_vs_load.png"),
                         ("health", plot_health, "table_health.png")):
        if key not in series:
            continue
        path = os.path.join(outdir, png)
        fn(report, series, path)
        if not os.path.getsize(path):
            raise SystemExit(f"plot: {path} is empty")
        made.append(path)
    print("plots: " + (", ".join(made) if made else "none (no plotted scenario ran)"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
