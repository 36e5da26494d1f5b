#!/usr/bin/env python3
"""Turns BENCH lines (gpuwire-bench, bench/mpi4py_cupy.py) into a CSV, one combined table per
operation (size x method, median time), bus bandwidth tables, the gpuwire-NCCL vs raw-NCCL
tables and the checks of the performance targets.

    python3 bench/summarize.py bench.txt [more.txt ...] [--csv bench.csv]

A BENCH line is `BENCH <label> <op> <bytes> <median_us> [<min_us> <samples> [<busbw_GBps>
<ranks>]]` (gpuwire-bench device mode writes the last two); a PAIR line (gpuwire-bench device
--backend nccl) is `PAIR <gw_label> <raw_label> <op> <bytes> <ranks> <ratio> <added_us> <reps>`,
the medians of the per-repetition pairs of an interleaved run. Other lines are ignored. Only
the Python standard library is used (it runs on the GPU machine).
"""

import argparse
import csv
import sys

ORDER = [
    "gpuwire-nccl",
    "raw-nccl",
    "gpuwire-ipc",
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
    "allgather": "allgather (bytes = the gathered buffer), median time per call",
    "reduce_scatter": "reduce_scatter (float32 sum; bytes = the whole input), median time per call",
    "exchange": "send/recv exchange (ring, grouped: each rank sends and receives bytes), median time per call",
    "sendrecv": "send/recv one way (ping-pong / 2), median time",
    "bw": "streaming bandwidth (OSU osu_bw), median time per message",
}
OPS = ["allreduce", "allgather", "reduce_scatter", "exchange", "sendrecv", "bw"]
# The ops of issue 8 (several GPUs); issue 4 (one GPU) takes whatever ops the 1-rank run has.
ISSUE8_OPS = ["allreduce", "allgather", "reduce_scatter", "exchange"]

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
    ("IPC 256 MiB allreduce vs plain mpi4py+CuPy", "mpi4py-cupy-plain", "gpuwire-ipc", "allreduce", 256 * MIB, 200.0,
     "plain / gpuwire-ipc >= 200"),
]

# Absolute targets of the IPC backend (issue 5; two ranks on one GPU):
# (name, label, op, bytes, kind, limit): kind "max_us" = median time at most limit us,
# "min_GBps" = bytes / median one-way time at least limit GB/s (1e9 bytes per second).
ABS_TARGETS = [
    ("IPC 256 MiB float32 allreduce", "gpuwire-ipc", "allreduce", 256 * MIB, "max_us", 1500.0),
    ("IPC 16 MiB float32 allreduce", "gpuwire-ipc", "allreduce", 16 * MIB, "max_us", 200.0),
    ("IPC 8 B float32 allreduce", "gpuwire-ipc", "allreduce", 8, "max_us", 30.0),
    ("IPC send/recv of 256 MiB", "gpuwire-ipc", "sendrecv", 256 * MIB, "min_GBps", 900.0),
]


def abs_targets(rows):
    out = []
    for name, label, op, nbytes, kind, limit in ABS_TARGETS:
        r = rows.get((label, op, nbytes))
        if r is None:
            out.append(f"- {name}: NO DATA (missing {label} {op} {human_size(nbytes)})")
            continue
        if kind == "max_us":
            ok = r[0] <= limit
            out.append(f"- {name}: {human_time(r[0])}; target <= {human_time(limit)}: {'MET' if ok else 'MISSED'}")
        else:
            gbps = nbytes / (r[0] * 1e3)
            ok = gbps >= limit
            out.append(f"- {name}: {gbps:.0f} GB/s ({human_time(r[0])} one way); target >= {limit:.0f} GB/s: {'MET' if ok else 'MISSED'}")
    return out


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
    """(rows, pairs): rows[(label, op, bytes)] = (median_us, min_us, samples, busbw_GBps or None,
    ranks or None); pairs[(gw_label, raw_label, op, bytes)] = (ranks, ratio, added_us, reps)."""
    rows, pairs = {}, {}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                # Lines may carry a prefix (e.g. "[label] BENCH ...") from a tagged log.
                i = line.find("BENCH ")
                if i < 0:
                    j = line.find("PAIR ")
                    if j < 0:
                        continue
                    p = line[j:].split()
                    try:
                        pairs[(p[1], p[2], p[3], int(p[4]))] = (int(p[5]), float(p[6]), float(p[7]), int(p[8]))
                    except (ValueError, IndexError):
                        pass
                    continue
                p = line[i:].split()
                if len(p) < 5:
                    continue
                try:
                    label, op, nbytes, med = p[1], p[2], int(p[3]), float(p[4])
                    mn = float(p[5]) if len(p) > 5 else med
                    samples = int(p[6]) if len(p) > 6 else 0
                    busbw = float(p[7]) if len(p) > 7 else None
                    ranks = int(p[8]) if len(p) > 8 else None
                except ValueError:
                    continue
                rows[(label, op, nbytes)] = (med, mn, samples, busbw, ranks)  # a later run of the same point wins
    return rows, pairs


def labels_of(rows):
    """Labels in ORDER; a tagged label (gpuwire-nccl-2gpu) goes with its base (gpuwire-nccl)."""
    def key(label):
        for i, base in enumerate(ORDER):
            if label == base or label.startswith(base + "-"):
                return (i, label != base, label)
        return (len(ORDER), True, label)
    return sorted({k[0] for k in rows}, key=key)


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


def busbw_tables(rows, op):
    """Bus bandwidth (GB/s, nccl-tests) of the labels that report it, one table per rank count
    >= 2 (one rank moves nothing over a bus)."""
    out = []
    by_ranks = {}
    for (label, o, _), v in rows.items():
        if o == op and v[3] is not None and v[4] is not None and v[4] >= 2:
            by_ranks.setdefault(v[4], set()).add(label)
    for n in sorted(by_ranks):
        labels = [l for l in labels_of(rows) if l in by_ranks[n]]
        sizes = sorted({k[2] for k, v in rows.items() if k[1] == op and k[0] in by_ranks[n] and v[4] == n})
        w = max(12, max(len(l) for l in labels) + 1)
        out += [f"## {op} bus bandwidth (GB/s, nccl-tests definition), {n} ranks",
                f"{'size':>9} " + "".join(f"{l:>{w}}" for l in labels)]
        for s in sizes:
            cells = []
            for l in labels:
                v = rows.get((l, op, s))
                cells.append("-" if v is None or v[3] is None or v[4] != n else f"{v[3]:.2f}")
            out.append(f"{human_size(s):>9} " + "".join(f"{c:>{w}}" for c in cells))
        out.append("")
    return out


def pair_groups(pairs):
    """{(gw_label, raw_label, ranks): {op: {bytes: (ratio, added_us, reps)}}}"""
    groups = {}
    for (gw, raw, op, nbytes), (ranks, ratio, added, reps) in pairs.items():
        groups.setdefault((gw, raw, ranks), {}).setdefault(op, {})[nbytes] = (ratio, added, reps)
    return groups


def pair_tables(rows, pairs):
    out = []
    for (gw, raw, ranks), ops in sorted(pair_groups(pairs).items(), key=lambda kv: (kv[0][2], kv[0][0])):
        for op in [o for o in OPS if o in ops] + sorted(set(ops) - set(OPS)):
            out += [f"## {op}: {gw} vs {raw}, {ranks} rank(s) (ratio, added: medians of per-repetition pairs; busbw GB/s)",
                    f"{'size':>9} {'raw':>10} {'gpuwire':>10} {'ratio':>8} {'added us':>9} {'raw busbw':>10} {'gw busbw':>10}"]
            for s in sorted(ops[op]):
                ratio, added, _ = ops[op][s]
                r, g = rows.get((raw, op, s)), rows.get((gw, op, s))
                bw = lambda v: "-" if v is None or v[3] is None else f"{v[3]:.2f}"
                out.append(f"{human_size(s):>9} {human_time(r and r[0]):>10} {human_time(g and g[0]):>10} {ratio:>8.4f} {added:>9.3f} {bw(r):>10} {bw(g):>10}")
            out.append("")
    return out


def nccl_targets(pairs):
    """Issue 4 (one GPU, 1 rank): added < 1 us at 8 B, < 1 % slower at >= 1 MiB, every op of the
    run. Issue 8 (2-8 GPUs, one rank each): allreduce, allgather, reduce_scatter and the
    send/recv exchange within 1 us at 8 B (the smallest size: allgather/reduce_scatter carry at
    least one float per rank) and within 2 % (time ratio <= 1.02) at >= 64 MiB."""
    out = []
    groups = pair_groups(pairs)
    one = {k: v for k, v in groups.items() if k[2] == 1}
    many = {k: v for k, v in groups.items() if k[2] >= 2}

    def check(ops, want_ops, big, ratio_ok, tol_text):
        lines, verdicts = [], []
        for op in want_ops:
            pts = ops.get(op)
            if not pts:
                lines.append(f"  - {op}: NO DATA")
                verdicts.append("NO DATA")
                continue
            smallest = min(pts)
            if smallest <= 64:
                added = pts[smallest][1]
                v = "MET" if added < 1.0 else "MISSED"
                lines.append(f"  - {op} {human_size(smallest)}: gpuwire adds {added:.3f} us; target < 1 us: {v}")
            else:
                v = "NO DATA"
                lines.append(f"  - {op} 8 B: NO DATA (smallest size measured {human_size(smallest)})")
            verdicts.append(v)
            large = [(s, pts[s][0]) for s in sorted(pts) if s >= big]
            if large:
                worst = max(large, key=lambda x: x[1])
                v = "MET" if all(ratio_ok(r) for _, r in large) else "MISSED"
                lines.append(f"  - {op} >= {human_size(big)}: worst time ratio {worst[1]:.4f} at {human_size(worst[0])} "
                             f"({len(large)} sizes); target ratio {tol_text}: {v}")
            else:
                v = "NO DATA"
                lines.append(f"  - {op} >= {human_size(big)}: NO DATA")
            verdicts.append(v)
        overall = "MISSED" if "MISSED" in verdicts else ("NO DATA" if "NO DATA" in verdicts else "MET")
        return overall, lines

    if not one:
        out.append("- issue 4 (gpuwire-NCCL vs raw NCCL, one GPU): NO DATA (no PAIR lines from a 1-rank run: "
                   "mpirun -np 1 gpuwire-bench device --backend nccl)")
    for (gw, raw, _), ops in sorted(one.items()):
        overall, lines = check(ops, [o for o in OPS if o in ops], 1 << 20, lambda r: r < 1.01, "< 1.01")
        out.append(f"- issue 4 (one GPU, 1 rank; {gw} vs {raw}): < 1 us added at 8 B, < 1 % at >= 1 MiB: {overall}")
        out += lines
    if not many:
        out.append("- issue 8 (gpuwire-NCCL vs raw NCCL, 2-8 GPUs): NO DATA (no PAIR lines from a run with one rank per GPU)")
    for (gw, raw, ranks), ops in sorted(many.items(), key=lambda kv: (kv[0][2], kv[0][0])):
        overall, lines = check(ops, ISSUE8_OPS, 64 << 20, lambda r: r <= 1.02, "<= 1.02")
        out.append(f"- issue 8 ({ranks} GPUs, one rank each; {gw} vs {raw}): within 1 us at 8 B, within 2 % at >= 64 MiB: {overall}")
        out += lines
    return out


def hier_targets(rows):
    """Issue 20: the hierarchical path on 2 simulated hosts x 2 ranks (one GPU) against the flat
    staged path: >= 2x from 1 MiB, never slower; and against the flat CUDA-aware path, for the
    record (all three under the CUDA-aware kit: scripts/gpu-bench.sh, step group hier)."""
    out = []
    for hier, flat, need_big in (("gpuwire-hier-2x2", "gpuwire-staged-2x2", True), ("gpuwire-hier-2x2", "gpuwire-cuda_aware-2x2", False)):
        sizes = sorted(k[2] for k in rows if k[0] == hier and k[1] == "allreduce" and (flat, "allreduce", k[2]) in rows)
        if not sizes:
            if any(k[0] in (hier, flat) for k in rows):
                out.append(f"- {hier} vs {flat} allreduce: NO DATA (missing one of them)")
            continue
        ratio = {b: rows[(flat, "allreduce", b)][0] / rows[(hier, "allreduce", b)][0] for b in sizes}
        slower = [b for b in sizes if ratio[b] < 1.0]
        worst = min(sizes, key=lambda b: ratio[b])
        line = f"- {hier} vs {flat} allreduce, {human_size(sizes[0])} .. {human_size(sizes[-1])}: worst {ratio[worst]:.2f}x at {human_size(worst)}"
        line += f"; never slower: {'MET' if not slower else 'MISSED (' + ', '.join(human_size(b) for b in slower) + ')'}"
        if need_big:
            big = [b for b in sizes if b >= MIB]
            short = [b for b in big if ratio[b] < 2.0]
            if big:
                low = min(big, key=lambda b: ratio[b])
                line += f"; >= 2x from 1 MiB: {'MET' if not short else 'MISSED'} (lowest {ratio[low]:.2f}x at {human_size(low)})"
        out.append(line)
    return out


def issue19_targets(rows, pairs):
    """Issue 19's targets, where this run has the rows (two ranks sharing one GPU for IPC and
    staged; host mode on the same machine's CPU; NCCL on one GPU, 1 rank). Each line says MET,
    MISSED or NO DATA; docs/PERFORMANCE.md says which targets are shown out of reach and why."""
    out = ["## issue 19 (close to the hardware's limits)"]

    def at(label, op, nbytes):
        r = rows.get((label, op, nbytes))
        return None if r is None else r[0]

    def limit(name, label, op, nbytes, us):
        t = at(label, op, nbytes)
        if t is None:
            out.append(f"- {name}: NO DATA (missing {label} {op} {human_size(nbytes)})")
        else:
            out.append(f"- {name}: {human_time(t)}; target <= {human_time(us)}: {'MET' if t <= us else 'MISSED'}")

    limit("IPC allreduce 256 MiB", "gpuwire-ipc", "allreduce", 256 * MIB, 350.0)
    limit("IPC allreduce 16 MiB", "gpuwire-ipc", "allreduce", 16 * MIB, 40.0)
    t = at("gpuwire-ipc", "sendrecv", 256 * MIB)
    if t is None:
        out.append("- IPC send/recv 256 MiB: NO DATA")
    else:
        gbps = 256 * MIB / (t * 1e3)
        out.append(f"- IPC send/recv 256 MiB: {gbps:.0f} GB/s one way ({human_time(t)}); target >= 1500 GB/s: {'MET' if gbps >= 1500 else 'MISSED'}")
    mid = [(s, at("gpuwire-ipc", "sendrecv", s)) for s in (1 * MIB, 2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB)]
    mid = [(s, t) for s, t in mid if t is not None]
    if mid:
        worst = max(mid, key=lambda x: x[1])
        v = "MET" if all(t <= 30.0 for _, t in mid) else "MISSED"
        out.append(f"- IPC send/recv 1-16 MiB one way: worst {human_time(worst[1])} at {human_size(worst[0])} ({len(mid)} sizes); target <= 30 us: {v}")
    else:
        out.append("- IPC send/recv 1-16 MiB one way: NO DATA")
    limit("IPC allreduce 8 B", "gpuwire-ipc", "allreduce", 8, 15.0)
    limit("staged allreduce 8 B", "gpuwire-staged", "allreduce", 8, 15.0)
    both = [(s, at("gpuwire-staged", "allreduce", s), at("mpi4py-cupy-careful", "allreduce", s))
            for s in sorted({k[2] for k in rows if k[1] == "allreduce"}) if s >= MIB]
    both = [(s, g, c) for s, g, c in both if g is not None and c is not None]
    if both:
        slower = [human_size(s) for s, g, c in both if g >= c]
        out.append(f"- staged allreduce faster than careful staging by hand at every size from 1 MiB ({len(both)} sizes): "
                   + ("MET" if not slower else f"MISSED (slower at {', '.join(slower)})"))
        big = [(g, c) for s, g, c in both if s == 256 * MIB]
        if big:
            g, c = big[0]
            out.append(f"- staged allreduce 256 MiB: {c / g:.2f}x careful staging by hand ({human_time(c)} / {human_time(g)}); target >= 1.3x: {'MET' if c / g >= 1.3 else 'MISSED'}")
    else:
        out.append("- staged allreduce against careful staging by hand from 1 MiB: NO DATA")
    for op in ("sendrecv", "allreduce"):
        g, r = at("host-gpuwire", op, 8), at("host-raw", op, 8)
        if g is None or r is None:
            out.append(f"- host {op} 8 B: NO DATA")
        else:
            out.append(f"- host {op} 8 B: gpuwire adds {g - r:.3f} us (medians); target <= 0.15 us: {'MET' if g - r <= 0.15 else 'MISSED'}")
        big = [(s, at("host-gpuwire", op, s) / at("host-raw", op, s))
               for s in sorted({k[2] for k in rows if k[1] == op})
               if s >= 64 << 10 and at("host-gpuwire", op, s) is not None and at("host-raw", op, s)]
        if big:
            worst = max(big, key=lambda x: x[1])
            n_ok = sum(1 for _, q in big if q <= 1.01)
            out.append(f"- host {op} >= 64 KiB: {n_ok}/{len(big)} sizes within 1 % (worst {worst[1]:.4f} at {human_size(worst[0])}): "
                       + ("MET" if n_ok == len(big) else "MISSED"))
    one = {k: v for k, v in pair_groups(pairs).items() if k[2] == 1}
    if not one:
        out.append("- NCCL 8 B, one GPU: NO DATA")
    for (gw, raw, _), ops in sorted(one.items()):
        for op in [o for o in OPS if o in ops]:
            pts = ops[op]
            smallest = min(pts)
            if smallest <= 64:
                added = pts[smallest][1]
                out.append(f"- NCCL {op} {human_size(smallest)} ({gw} vs {raw}): adds {added:.3f} us; target <= 0.15 us: {'MET' if added <= 0.15 else 'MISSED'}")
    return out


def targets(rows, pairs=None):
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
    out += abs_targets(rows)
    out += nccl_targets(pairs or {})
    out += hier_targets(rows)
    out += issue19_targets(rows, pairs or {})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--csv", help="write label,op,bytes,median_us,min_us,samples here")
    args = ap.parse_args()
    rows, pairs = parse(args.files)
    if not rows:
        print("summarize.py: no BENCH lines found", file=sys.stderr)
        return 1
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["label", "op", "bytes", "median_us", "min_us", "samples", "busbw_GBps", "ranks"])
            order = {l: i for i, l in enumerate(labels_of(rows))}
            for (label, op, nbytes), (med, mn, n, bb, ranks) in sorted(rows.items(), key=lambda kv: (kv[0][1], order[kv[0][0]], kv[0][2])):
                w.writerow([label, op, nbytes, f"{med:.3f}", f"{mn:.3f}", n, "" if bb is None else f"{bb:.3f}", "" if ranks is None else ranks])
    lines = []
    ops = [o for o in OPS if any(k[1] == o for k in rows)] + sorted({k[1] for k in rows} - set(OPS))
    for op in ops:
        t = table(rows, op)
        if t:
            lines += t + [""]
    for op in ops:
        lines += busbw_tables(rows, op)
    lines += pair_tables(rows, pairs)
    lines += targets(rows, pairs)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
