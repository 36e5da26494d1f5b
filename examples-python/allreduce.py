#!/usr/bin/env python3
"""allreduce.py: gpuwire from Python (ctypes, mpi4py, NumPy; CuPy on a GPU).

mpi4py initializes MPI; gpuwire adopts it. On every rank:
  1. an in-place allreduce (SUM) of a NumPy float64 array, checked;
  2. rank 0 sends ten float32 (100, 110, ..., 190) to rank 1 with isend/irecv, as
     examples-c/isend_irecv.c, checked on rank 1;
  3. a gpuwire communicator over an mpi4py sub-communicator (COMM_WORLD.Split into halves):
     an allgather of the ranks, checked;
  4. a non-contiguous array (a column of a C-ordered matrix) is broadcast as a strided buffer
     (its elements where they are, no copy), checked; a reversed one is refused with ValueError;
  5. with CuPy and a GPU (or --cupy, which requires them): the allreduce and the exchange again
     on CuPy arrays in device memory, on CuPy's current stream.
Rank 0 prints "allreduce.py: PASS (...)" when every rank passed.

Usage: mpirun -n 2 python3 examples-python/allreduce.py [EXPECTED_RANKS] [--cupy]
The package is the checkout's python/gpuwire; the library $GPUWIRE_LIBRARY, or as gpuwire._library says.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))  # the checkout's package

from mpi4py import MPI  # noqa: E402  (initializes MPI)
import numpy as np  # noqa: E402

import gpuwire as gw  # noqa: E402


def check(cond, what, failures):
    if not cond:
        print(f"FAILED rank {MPI.COMM_WORLD.Get_rank()}: {what}", file=sys.stderr, flush=True)
        failures.append(what)


def exchange_and_reduce(comm, xp, label, failures, sync=lambda: None):
    """Steps 1 and 2 with the array module xp (numpy or cupy)."""
    rank, size = comm.rank(), comm.size()
    x = xp.full(8, rank + 1, dtype=xp.float64)
    comm.allreduce(x, op=gw.SUM)  # in place
    sync()
    check(bool((xp.asnumpy(x) if hasattr(xp, "asnumpy") else x).tolist() == [size * (size + 1) / 2] * 8),
          f"{label}: allreduce SUM", failures)

    v = xp.zeros(10, dtype=xp.float32)
    if rank == 0:
        v[:] = xp.arange(100, 200, 10, dtype=xp.float32)
    buf = gw.Buffer.wrap(v)
    req = None
    if rank == 0:
        req = comm.isend(buf, 1, tag=7)
    elif rank == 1:
        req = comm.irecv(buf, 0, tag=7)
    if req is not None:
        req.wait()
        check(not req.active(), f"{label}: the request is NULL after wait", failures)
    sync()
    got = (xp.asnumpy(v) if hasattr(xp, "asnumpy") else v).tolist()
    want = [float(100 + 10 * i) for i in range(10)] if rank <= 1 else [0.0] * 10
    check(got == want, f"{label}: rank {rank} holds {got}", failures)
    if rank == 1:
        # One write, so that mpirun cannot forward another rank's line between text and newline.
        sys.stdout.write(f"rank 1 received ({label}): " + " ".join(f"{e:g}" for e in got) + "\n")
        sys.stdout.flush()
    buf.free()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    want_cupy = "--cupy" in sys.argv
    world = MPI.COMM_WORLD
    gw.init()
    comm = gw.Comm(world)  # world.py2f() inside
    rank, size = comm.rank(), comm.size()
    if args and int(args[0]) != size:
        print(f"allreduce.py: launched on {size} ranks, expected {args[0]} (wrong launcher?)", file=sys.stderr)
        return 1
    if size < 2:
        if rank == 0:
            print(f"allreduce.py: needs at least 2 ranks, got {size}", file=sys.stderr)
        comm.free()
        gw.finalize()
        return 1
    failures = []
    check(not gw.owns_mpi(), "gpuwire adopted mpi4py's MPI", failures)

    exchange_and_reduce(comm, np, "numpy", failures)

    # An mpi4py sub-communicator: ranks {0, 1}, {2, 3}, ...
    half = world.Split(rank // 2, rank)
    with gw.Comm(half) as sub:
        n = sub.size()
        mine = np.array([rank], dtype=np.int32)
        everyone = np.full(n, -1, dtype=np.int32)
        sub.allgather(mine, everyone)
        first = (rank // 2) * 2
        check(everyone.tolist() == list(range(first, first + n)), f"allgather on a Split communicator: {everyone}",
              failures)
    half.Free()

    # A column of a C-ordered matrix is not contiguous: a strided buffer over its elements, never
    # a copy; a reversed array (a negative stride) cannot be one: refused.
    m = np.arange(16.0).reshape(4, 4) + 100 * rank
    comm.bcast(m[:, 1], root=size - 1)
    check(m[:, 1].tolist() == [100 * (size - 1) + 4 * i + 1 for i in range(4)] and m[0, 0] == 100 * rank,
          f"bcast of the column m[:, 1]: {m}", failures)
    try:
        gw.Buffer.wrap(m[::-1, 1])
        check(False, "a reversed array was accepted", failures)
    except ValueError:
        pass
    try:
        comm.bcast(np.zeros(3), root=size)  # a root out of range: gpuwire.Error
        check(False, "bcast to a bad root did not fail", failures)
    except gw.Error as e:
        check(e.code == gw.ERROR_INVALID_ARGUMENT and "gpuwire_bcast" in str(e), f"gpuwire.Error: {e}", failures)

    devices = "numpy"
    why = "no GPU"
    try:
        import cupy

        have_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception as e:  # not installed, or no driver / device
        have_gpu = False
        why = f"{type(e).__name__}: {e}"
    if have_gpu:
        exchange_and_reduce(comm, cupy, "cupy", failures, sync=lambda: cupy.cuda.get_current_stream().synchronize())
        devices = "numpy, cupy"
    elif want_cupy:
        check(False, f"--cupy: CuPy with a GPU is required ({why})", failures)
    elif rank == 0:
        print(f"cupy: not used ({why.splitlines()[0]})", flush=True)

    bad = np.array([len(failures)], dtype=np.int32)
    comm.allreduce(bad, op=gw.SUM)
    if rank == 0:
        if bad[0] == 0:
            names = {getattr(gw, k): k[len("BACKEND_"):] for k in dir(gw) if k.startswith("BACKEND_")}
            backend = names.get(comm.backend(), f"unknown ({comm.backend()})")
            print(f"allreduce.py: PASS ({devices}; {size} ranks; device backend {backend})", flush=True)
        else:
            print(f"allreduce.py: FAIL ({bad[0]} failed checks)", flush=True)
    comm.free()
    gw.finalize()  # before mpi4py finalizes MPI at exit
    return 0 if bad[0] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
