#!/usr/bin/env python3
"""Turns BENCH lines (gpuwire-bench, bench/mpi4py_cupy.py) into a CSV, one combined table per
operation (size x method, median time) and the ratios of the performance targets.

    python3 bench/summarize.py bench.txt [more.txt ...] [--csv bench.csv]

A BENCH line is `BENCH <label> <op> <bytes> <median_us> [<min_us> <samples>]`; other lines
are ignored. Only the Python standard library is used (it runs on the GPU machine).
"""

import argparse
import csv
import sys

ORDER = [
    "gpuwire-staged",
    "gpuwire-cuda_aware",
    "raw-cuda-aware",
    "mpi4py-cupy-plain",
    "mpi4py-cupy-careful",
    "host-gpuwire",
    "host-raw",
]
OP_TITLES = {
    "allreduce": "allreduce (float32 sum), median time per call",
    "sendrecv": "send/recv one way (ping-pong / 2), median time",
    "bw": "streaming bandwidth (OSU osu_bw), median time per message",
}

MIB = 1 << 20

# (name, numerator, denominator, op, bytes, minimum ratio, what the ratio says)
TARGETS = [
    ("staged 256 MiB allreduce vs careful staging by hand", "mpi4py-cupy-careful", "gpuwire-staged", "allreduce", 256 * MIB, 1.0,
     "careful / gpuwire-staged > 1 (faster)"),
    ("staged 256 MiB allreduce vs plain mpi4py+CuPy", "mpi4py-cupy-plain", "gpuwire-staged", "allreduce", 256 * MIB, 4.0,
     "plain / gpuwire-staged >= 4"),
    ("CUDA-aware path 256 MiB allreduce vs raw CUDA-aware MPI_Allreduce", "raw-cuda-aware", "gpuwire-cuda_aware", "allreduce", 256 * MIB, 100.0,
     "raw-cuda-aware / gpuwire-cuda_aware >= 100"),
    ("staged 8 B allreduce vs plain mpi4py+CuPy", "mpi4py-cupy-plain", "gpuwire-staged", "allreduce", 8, 5.0,
     "plain / gpuwire-staged >= 5"),
]


def human_size(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def human_time(us):
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e3:
        return f"{us / 1e3:.4g} ms"
    return f"{us:.4g} us"


def parse(paths):
    rows = {}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                # Lines may carry a prefix (e.g. "[label] BENCH ...") from a tagged log.
                i = line.find("BENCH ")
                if i < 0:
                    continue
                p = line[i:].split()
                if len(p) < 5:
                    continue
                try:
                    label, op, nbytes, med = p[1], p[2], int(p[3]), float(p[4])
                    mn = float(p[5]) if len(p) > 5 else med
                    samples = int(p[6]) if len(p) > 6 else 0
                except ValueError:
                    continue
                rows[(label, op, nbytes)] = (med, mn, samples)  # a later run of the same point wins
    return rows


def labels_of(rows):
    found = {k[0] for k in rows}
    return [l for l in ORDER if l in found] + sorted(found - set(ORDER))


def table(rows, op):
    labels = [l for l in labels_of(rows) if any(k[0] == l and k[1] == op for k in rows)]
    sizes = sorted({k[2] for k in rows if k[1] == op})
    if not labels:
        return []
    w = max(12, max(len(l) for l in labels) + 1)
    out = [f"## {OP_TITLES.get(op, op)}", f"{'size':>9} " + "".join(f"{l:>{w}}" for l in labels)]
    for s in sizes:
        cells = [human_time(rows.get((l, op, s), (None,))[0]) for l in labels]
        out.append(f"{human_size(s):>9} " + "".join(f"{c:>{w}}" for c in cells))
    return out


def targets(rows):
    out = ["## targets (ratios of median times)"]
    for name, num, den, op, nbytes, need, what in TARGETS:
        a, b = rows.get((num, op, nbytes)), rows.get((den, op, nbytes))
        if a is None or b is None:
            missing = [l for l, v in ((num, a), (den, b)) if v is None]
            out.append(f"- {name}: NO DATA (missing {', '.join(missing)} {op} {human_size(nbytes)}); target {what}")
            continue
        ratio = a[0] / b[0]
        ok = ratio > need if need == 1.0 else ratio >= need
        out.append(f"- {name}: {ratio:.2f}x ({human_time(a[0])} / {human_time(b[0])}); target {what}: {'MET' if ok else 'MISSED'}")
    # The host-mode targets, from medians (gpuwire-bench host prints paired statistics too).
    for op in ("sendrecv", "allreduce"):
        small = (rows.get(("host-gpuwire", op, 8)), rows.get(("host-raw", op, 8)))
        if None not in small:
            added = small[0][0] - small[1][0]
            out.append(f"- host {op} 8 B: gpuwire adds {added:.3f} us to raw MPI; target <= 0.5 us: {'MET' if added <= 0.5 else 'MISSED'}")
        big = [(s, rows[("host-gpuwire", op, s)][0] / rows[("host-raw", op, s)][0])
               for s in sorted({k[2] for k in rows if k[1] == op})
               if s >= 64 << 10 and ("host-gpuwire", op, s) in rows and ("host-raw", op, s) in rows]
        if big:
            worst = max(big, key=lambda x: x[1])
            n_ok = sum(1 for _, r in big if r <= 1.03)
            out.append(f"- host {op} >= 64 KiB: {n_ok}/{len(big)} sizes within 3 % of raw MPI (worst {worst[1]:.4f} at {human_size(worst[0])})")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--csv", help="write label,op,bytes,median_us,min_us,samples here")
    args = ap.parse_args()
    rows = parse(args.files)
    if not rows:
        print("summarize.py: no BENCH lines found", file=sys.stderr)
        return 1
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["label", "op", "bytes", "median_us", "min_us", "samples"])
            order = {l: i for i, l in enumerate(labels_of(rows))}
            for (label, op, nbytes), (med, mn, n) in sorted(rows.items(), key=lambda kv: (kv[0][1], order[kv[0][0]], kv[0][2])):
                w.writerow([label, op, nbytes, f"{med:.3f}", f"{mn:.3f}", n])
    lines = []
    for op in ("allreduce", "sendrecv", "bw"):
        t = table(rows, op)
        if t:
            lines += t + [""]
    lines += targets(rows)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
