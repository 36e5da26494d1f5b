#!/usr/bin/env python3
"""Baselines by hand for gpuwire-bench's device mode: mpi4py + CuPy, staging through the host.

Run under a NOT CUDA-aware MPI (mpi4py only ever sees host memory), 2 ranks:

    mpirun -np 2 python3 bench/mpi4py_cupy.py [--method plain|careful|all]
                         [--op allreduce|sendrecv|all] [--max-bytes N] [--min-bytes N]
                         [--target-ms T] [--reps R] [--numpy]

Methods (float32, sum):

- plain:   what a user writes first. allreduce: h = cp.asnumpy(x); comm.Allreduce(h, r);
           y = cp.asarray(r). send/recv: cp.asnumpy -> comm.Send ... comm.Recv -> cp.asarray.
           New host and device arrays on every call, pageable host memory.
- careful: pinned host buffers allocated once, copies into/out of them with get(out=)/set().
           allreduce (2 ranks): each rank owns one half; it sends the other half to its peer
           (Sendrecv), adds the half it receives on the GPU, then the reduced halves are
           exchanged the same way. send/recv: pinned staging of the whole message.

Every timed call ends with a synchronization of the current stream: the result is complete on
the device when the clock stops. Send/recv is a ping-pong (one way = round trip / 2).

Output, rank 0: `BENCH <label> <op> <bytes> <median_us> <min_us> <samples>` per measurement,
as gpuwire-bench prints it; labels mpi4py-cupy-plain and mpi4py-cupy-careful.

--numpy replaces CuPy by NumPy (device arrays become host arrays, copies become np.copyto):
it exercises the MPI logic, the timing and the checks on a machine without a GPU; its labels
are mpi4py-numpy-*.
"""

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

TAG = 7


def parse_bytes(s):
    t = s.strip().rstrip("Bb").rstrip("iI")
    mult = 1
    if t and t[-1] in "kKmMgG":
        mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[t[-1].lower()]
        t = t[:-1]
    try:
        return int(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a byte count")


class CupyXp:
    """The GPU side through CuPy, on the current (default) stream."""

    name = "cupy"

    def __init__(self, comm):
        import cupy as cp

        self.cp = cp
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        local = node.Get_rank()
        node.Free()
        count = cp.cuda.runtime.getDeviceCount()
        if count < 1:
            raise RuntimeError("CuPy sees no CUDA device")
        self.device = local % count
        cp.cuda.Device(self.device).use()

    def full(self, n, v):
        return self.cp.full(n, v, dtype=self.cp.float32)

    def empty(self, n):
        return self.cp.empty(n, dtype=self.cp.float32)

    def pinned(self, n):
        mem = self.cp.cuda.alloc_pinned_memory(max(n, 1) * 4)
        return np.frombuffer(mem, np.float32, n)

    def asnumpy(self, x):
        return self.cp.asnumpy(x)

    def asarray(self, h):
        return self.cp.asarray(h)

    def d2h(self, dev, host):
        # Blocking: returns when the copy is complete (CuPy's get(out=...)).
        dev.get(out=host)

    def h2d(self, host, dev):
        # Asynchronous on the current stream from pinned memory: later work on the stream is
        # ordered after it; the host buffer must stay untouched until the stream syncs.
        dev.set(host)

    def add(self, a, b, out):
        self.cp.add(a, b, out=out)

    def sync(self):
        self.cp.cuda.get_current_stream().synchronize()

    def value(self, x, i):
        return float(x[i])


class NumpyXp:
    """Host-only stand-in with the same interface (--numpy)."""

    name = "numpy"
    device = -1

    def full(self, n, v):
        return np.full(n, v, dtype=np.float32)

    def empty(self, n):
        return np.empty(n, dtype=np.float32)

    def pinned(self, n):
        return np.empty(n, dtype=np.float32)

    def asnumpy(self, x):
        return np.array(x, copy=True)

    def asarray(self, h):
        return np.array(h, copy=True)

    def d2h(self, dev, host):
        np.copyto(host, dev)

    def h2d(self, host, dev):
        np.copyto(dev, host)

    def add(self, a, b, out):
        np.add(a, b, out=out)

    def sync(self):
        pass

    def value(self, x, i):
        return float(x[i])


class Case:
    """One method x op x size: a callable doing k iterations, and the result to check."""

    def __init__(self, xp, comm, method, op, n):
        self.xp, self.comm, self.method, self.op, self.n = xp, comm, method, op, n
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.x = xp.full(n, float(self.rank + 1))
        self.y = xp.empty(n)
        if method == "careful":
            self.ps = xp.pinned(n)
            self.pr = xp.pinned(n)
            if op == "allreduce":
                h = n // 2
                self.halves = [slice(0, h), slice(h, n)]
                self.tmp = xp.empty(n - h)  # the larger half

    # -- allreduce ------------------------------------------------------------------------

    def allreduce_plain(self):
        xp = self.xp
        h = xp.asnumpy(self.x)
        r = np.empty_like(h)
        self.comm.Allreduce(h, r, op=MPI.SUM)
        self.y = xp.asarray(r)
        xp.sync()

    def allreduce_careful(self):
        xp, comm = self.xp, self.comm
        peer = 1 - self.rank
        mine, other = self.halves[self.rank], self.halves[peer]
        m_mine = mine.stop - mine.start
        m_other = other.stop - other.start
        # 1. The half the peer owns goes to the peer; the peer's copy of my half comes here.
        xp.d2h(self.x[other], self.ps[:m_other])
        comm.Sendrecv(self.ps[:m_other], dest=peer, sendtag=TAG, recvbuf=self.pr[:m_mine], source=peer, recvtag=TAG)
        tmp = self.tmp[:m_mine]
        xp.h2d(self.pr[:m_mine], tmp)
        # 2. Sum on the GPU: my half of the result.
        xp.add(self.x[mine], tmp, self.y[mine])
        # 3. Exchange the reduced halves (d2h blocks, so the h2d above has completed too).
        xp.d2h(self.y[mine], self.ps[:m_mine])
        comm.Sendrecv(self.ps[:m_mine], dest=peer, sendtag=TAG, recvbuf=self.pr[:m_other], source=peer, recvtag=TAG)
        xp.h2d(self.pr[:m_other], self.y[other])
        xp.sync()

    # -- send/recv ping-pong ------------------------------------------------------------

    def sendrecv_plain(self):
        xp, comm = self.xp, self.comm
        if self.rank == 0:
            comm.Send(xp.asnumpy(self.x), dest=1, tag=TAG)
            r = np.empty(self.n, dtype=np.float32)
            comm.Recv(r, source=1, tag=TAG)
            self.y = xp.asarray(r)
            xp.sync()
        elif self.rank == 1:
            r = np.empty(self.n, dtype=np.float32)
            comm.Recv(r, source=0, tag=TAG)
            self.y = xp.asarray(r)
            xp.sync()
            comm.Send(xp.asnumpy(self.y), dest=0, tag=TAG)

    def sendrecv_careful(self):
        xp, comm = self.xp, self.comm
        if self.rank == 0:
            xp.d2h(self.x, self.ps)
            comm.Send(self.ps, dest=1, tag=TAG)
            comm.Recv(self.pr, source=1, tag=TAG)
            xp.h2d(self.pr, self.y)
            xp.sync()
        elif self.rank == 1:
            comm.Recv(self.pr, source=0, tag=TAG)
            xp.h2d(self.pr, self.y)
            xp.sync()
            xp.d2h(self.y, self.ps)
            comm.Send(self.ps, dest=0, tag=TAG)

    def run(self, k):
        f = getattr(self, f"{self.op}_{self.method}")
        for _ in range(k):
            f()

    def check(self):
        """None if the last result is right, else a message."""
        if self.op == "allreduce":
            want = self.size * (self.size + 1) / 2
        elif self.rank <= 1:
            want = 1.0  # rank 0's data, bounced back by rank 1
        else:
            return None
        got = (self.xp.value(self.y, 0), self.xp.value(self.y, self.n - 1))
        if got != (want, want):
            return f"{self.method} {self.op} {self.n * 4} B: result {got[0]} .. {got[1]}, expected {want}"
        return None


def block(comm, case, k):
    comm.Barrier()
    t0 = time.perf_counter()
    case.run(k)
    return (time.perf_counter() - t0) / k


def maxed(comm, v):
    a = np.array(v, dtype=np.float64)
    r = np.empty_like(a)
    comm.Allreduce(a, r, op=MPI.MAX)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="all", choices=["plain", "careful", "all"])
    ap.add_argument("--op", default="all", choices=["allreduce", "sendrecv", "all"])
    ap.add_argument("--min-bytes", type=parse_bytes, default=8)
    ap.add_argument("--max-bytes", type=parse_bytes, default=256 << 20)
    ap.add_argument("--target-ms", type=float, default=20.0, help="time of one block of iterations")
    ap.add_argument("--reps", type=int, default=None, help="blocks per size (default 7; 3 when one call takes > 50 ms)")
    ap.add_argument("--numpy", action="store_true", help="NumPy instead of CuPy (no GPU needed)")
    args = ap.parse_args()

    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        print("mpi4py_cupy.py: needs at least 2 ranks (mpirun -np 2)", file=sys.stderr)
        return 2
    if args.min_bytes < 8 or args.min_bytes % 4 or args.min_bytes > args.max_bytes:
        print("mpi4py_cupy.py: need 8 <= --min-bytes <= --max-bytes, multiples of 4", file=sys.stderr)
        return 2
    methods = ["plain", "careful"] if args.method == "all" else [args.method]
    ops = ["allreduce", "sendrecv"] if args.op == "all" else [args.op]
    if "careful" in methods and size != 2:
        print("mpi4py_cupy.py: the careful method exchanges halves between exactly 2 ranks", file=sys.stderr)
        return 2
    try:
        xp = NumpyXp() if args.numpy else CupyXp(comm)
    except Exception as e:  # no CuPy, no GPU: say so on every rank, stop together
        print(f"mpi4py_cupy.py: rank {rank}: CuPy cannot be used ({type(e).__name__}: {e}); --numpy runs without a GPU", file=sys.stderr)
        comm.Abort(2)
    sizes = []
    s = args.min_bytes
    while s <= args.max_bytes:
        sizes.append(s)
        s *= 2
    if rank == 0:
        lib = MPI.Get_library_version().splitlines()[0].split(",")[0].strip()
        print(f"# mpi4py_cupy.py: {size} ranks, {xp.name} device {xp.device}, mpi4py {__import__('mpi4py').__version__}, {lib}, "
              f"{args.min_bytes} .. {args.max_bytes} B, blocks of about {args.target_ms} ms", flush=True)
    bad = 0
    t_start = time.perf_counter()
    for method in methods:
        label = f"mpi4py-{xp.name}-{method}"
        for op in ops:
            for nbytes in sizes:
                case = Case(xp, comm, method, op, nbytes // 4)
                t1 = block(comm, case, 1)
                slow = comm.bcast(t1 > 0.05 if rank == 0 else None, root=0)
                if not slow:
                    block(comm, case, 1)
                err = case.check()
                if err:
                    bad += 1
                    print(f"mpi4py_cupy.py: rank {rank}: {err}", file=sys.stderr, flush=True)
                t = block(comm, case, 1)
                iters, reps = comm.bcast(
                    (int(min(max(round(args.target_ms * 1e-3 / t), 1), 1000)), args.reps or (3 if t > 0.05 else 7)) if rank == 0 else None,
                    root=0,
                )
                times = maxed(comm, [block(comm, case, iters) for _ in range(reps)])
                if op == "sendrecv":
                    times = times / 2.0
                if rank == 0:
                    print(f"BENCH {label} {op} {nbytes} {np.median(times) * 1e6:.3f} {times.min() * 1e6:.3f} {len(times)}", flush=True)
                del case
    bad = comm.allreduce(bad, op=MPI.SUM)
    if rank == 0:
        print(f"# mpi4py_cupy.py: data checks {'passed' if bad == 0 else 'FAILED'}; {time.perf_counter() - t_start:.1f} s", flush=True)
    comm.Free()
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
