#!/usr/bin/env python3
"""Plots the GPU benchmark's CSV (scripts/gpu-bench.sh writes it as $OUT/bench.csv): bandwidth
(bytes / median time) against message size, log-log, one line per method; one panel for
allreduce and one for send/recv (one way).

    python3 scripts/plot-bench.py bench.csv [-o docs/bench-device.png] [--ops allreduce,sendrecv,bw]

Needs matplotlib (`python3 -m venv .venv && .venv/bin/pip install matplotlib`, then run it
with .venv/bin/python).
"""

import argparse
import csv
import sys

STYLE = {
    "gpuwire-ipc": dict(color="tab:cyan", marker="D", linewidth=2.2),
    "gpuwire-staged": dict(color="tab:blue", marker="o"),
    "gpuwire-cuda_aware": dict(color="tab:green", marker="o"),
    "raw-cuda-aware": dict(color="tab:red", marker="s"),
    "mpi4py-cupy-plain": dict(color="tab:orange", marker="^"),
    "mpi4py-cupy-careful": dict(color="tab:purple", marker="^"),
    "host-gpuwire": dict(color="tab:gray", marker=".", linestyle="--"),
    "host-raw": dict(color="black", marker=".", linestyle=":"),
}
OPS = {"allreduce": "allreduce (float32 sum)", "sendrecv": "send/recv, one way", "bw": "streaming, per message (OSU osu_bw)"}


def size_label(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift:
            return f"{b >> shift}{unit}"
    return str(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("-o", "--output", default="docs/bench-device.png")
    ap.add_argument("--title", default="gpuwire-bench device: 2 ranks on one H200, float32, median")
    ap.add_argument("--ops", default="allreduce,sendrecv", help="comma-separated operations, one panel each (of: " + ", ".join(OPS) + ")")
    ap.add_argument("--labels", help="regular expression: plot only these labels (default: every label without "
                    "'nccl' or a -<N>gpu tag, i.e. the 2-ranks-on-one-GPU methods)")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot-bench.py needs matplotlib: python3 -m venv .venv && .venv/bin/pip install matplotlib", file=sys.stderr)
        return 2
    import re

    keep = re.compile(args.labels) if args.labels else None
    data = {}
    with open(args.csv, newline="") as f:
        for row in csv.DictReader(f):
            label = row["label"]
            if keep:
                if not keep.search(label):
                    continue
            elif "nccl" in label or re.search(r"-\d+gpu", label):
                continue  # other configurations (1 rank, one rank per GPU): not comparable here
            b, us = int(row["bytes"]), float(row["median_us"])
            if us > 0:
                data.setdefault((row["op"], row["label"]), []).append((b, b / us / 1e3))  # GB/s
    if not data:
        print(f"plot-bench.py: no rows in {args.csv}", file=sys.stderr)
        return 1
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS]
    if unknown or not ops:
        print(f"plot-bench.py: --ops takes some of {', '.join(OPS)} (got {args.ops!r})", file=sys.stderr)
        return 2
    order = list(STYLE) + sorted({l for _, l in data} - set(STYLE))
    fig, axes = plt.subplots(1, len(ops), figsize=(6.5 * len(ops), 5.2), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, op in zip(axes, ops):
        title = OPS[op]
        sizes = set()
        for label in order:
            pts = sorted(data.get((op, label), []))
            if not pts:
                continue
            sizes.update(b for b, _ in pts)
            style = dict(linewidth=1.5, markersize=4)
            style.update(STYLE.get(label, {}))
            ax.plot([b for b, _ in pts], [g for _, g in pts], label=label, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted(sizes)[::2]
        ax.set_xticks(ticks)
        ax.set_xticklabels([size_label(t) for t in ticks], rotation=45)
        ax.set_xlabel("message size (bytes)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    axes[0].set_ylabel("bandwidth, bytes / median time (GB/s)")
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
