#!/usr/bin/env python3
"""Which instructions of libgpuwire miss the last-level cache, per call, and where in the source.

For the cold-cache counts of `bash scripts/null-device.sh cold` (docs/PERFORMANCE.md, "24th
session" onward): profile one case of bench/device_calls.c with the caches replaced at each null
NCCL launch, instructions dumped, then list the library's missing instructions with their inlined
source lines (addr2line -i):

    export LD_LIBRARY_PATH=$PWD/.nulldev   # after `bash scripts/null-device.sh cold` built it
    NULLDEV_THRASH=2097152 mpirun -np 1 -x LD_LIBRARY_PATH -x NULLDEV_THRASH valgrind \
        --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=1048576,16,64 --dump-instr=yes \
        --collect-atstart=no --toggle-collect=run_loop --toggle-collect=nulldev_thrash \
        --callgrind-out-file=/tmp/ci.0 .nulldev/device_calls 0 100
    python3 scripts/cold-lines.py /tmp/ci.0 target/release/libgpuwire.so [MIN]

Prints the total misses (data reads and writes missing the last level, DLmr + DLmw) of the
library and, for each instruction with at least MIN of them (default 100: about once per call
of the 100 timed ones plus the warm-up), the count, address, function and source lines. A line
counted at two instructions is usually a load through the GOT (the static's address, then the
static); a line that misses both before and after a launch costs two.
"""
import collections
import re
import subprocess
import sys


def parse(path, library):
    """Misses per instruction address of the object whose name contains `library`."""
    events = positions = None
    names = {"ob": {}, "fn": {}}
    ob = fn = None
    last = [0, 0]
    skip = False
    misses = collections.Counter()
    function = {}
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("positions:"):
            positions = line.split()[1:]
            continue
        if line.startswith("events:"):
            events = line.split()[1:]
            continue
        m = re.match(r"^(c?)(ob|fn|fl|fi|fe)=\((\d+)\)(?: (.*))?$", line)
        if m:
            kind = m.group(2) if m.group(2) in ("ob", "fn") else None
            if kind and m.group(4):
                names[kind][m.group(3)] = m.group(4)
            if kind and not m.group(1):
                if kind == "ob":
                    ob = names["ob"].get(m.group(3))
                else:
                    fn = names["fn"].get(m.group(3))
            continue
        if line.startswith("calls="):
            skip = True  # the next cost line is the call's inclusive cost
            continue
        if not line or line[0] not in "0123456789+-*":
            continue
        parts = line.split()
        for i, p in enumerate(parts[: len(positions)]):
            if p == "*":
                continue
            if p[0] in "+-":
                last[i] += int(p, 0)
            else:
                last[i] = int(p, 0)
        if skip:
            skip = False
            continue
        costs = dict(zip(events, [int(x) for x in parts[len(positions):]]))
        n = costs.get("DLmr", 0) + costs.get("DLmw", 0)
        if n and ob and library in ob:
            misses[last[0]] += n
            function[last[0]] = fn or ""
    return misses, function


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, so = sys.argv[1], sys.argv[2]
    least = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    name = so.rsplit("/", 1)[-1].split(".so")[0]
    misses, function = parse(path, name)
    print(f"total misses in {name}: {sum(misses.values())}")
    for a in sorted(a for a in misses if misses[a] >= least):
        out = subprocess.run(["addr2line", "-i", "-C", "-e", so, hex(a)], capture_output=True, text=True).stdout.split("\n")
        where = " <- ".join(x for x in out[:3] if x)
        print(f"{misses[a]:6d} {hex(a)} {function[a][:50]:50s} {where}")


if __name__ == "__main__":
    main()
