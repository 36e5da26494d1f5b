#!/usr/bin/env python3
"""darray.py: distributed arrays from Python (gpuwire.DArray over ctypes, mpi4py, NumPy).

On every rank, with answers computed from the global data:
  1. a 1-D float64 array of 11 elements (uneven on 2 and 3 ranks): queries, set_global,
     allgather, gather, fill, axpy, scale, dot, norms, sum, min, max, a NumPy view;
  2. redistribution to a BROADCAST array and to a user-given split, then bcast;
  3. a 2-D array with one halo row: halo_exchange fills the ghost rows from the neighbours;
  4. complex128: dot conjugates its first argument;
  5. an `out` of the wrong dtype or size raises gpuwire.Error with the mismatch.
Rank 0 prints "darray.py: PASS (...)" when every rank passed.

Usage: mpirun -n P python3 examples-python/darray.py [EXPECTED_RANKS]
The package is the checkout's python/gpuwire; the library $GPUWIRE_LIBRARY, or as gpuwire._library says.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))  # the checkout's package

from mpi4py import MPI  # noqa: E402  (initializes MPI)
import numpy as np  # noqa: E402

import gpuwire as gw  # noqa: E402

N = 11


def main():
    failures = []

    def check(cond, what):
        if not cond:
            print(f"FAILED rank {MPI.COMM_WORLD.Get_rank()}: {what}", file=sys.stderr, flush=True)
            failures.append(what)

    gw.init()
    comm = gw.Comm(MPI.COMM_WORLD)
    rank, size = comm.rank(), comm.size()
    if len(sys.argv) > 1 and int(sys.argv[1]) != size:
        print(f"darray.py: launched on {size} ranks, expected {sys.argv[1]} (wrong launcher?)", file=sys.stderr)
        return 1

    def split(n, r):
        q, rem = divmod(n, size)
        return r * q + min(r, rem), q + (1 if r < rem else 0)

    # 1. A 1-D array: queries and data.
    g = np.arange(N, dtype=np.float64) - 4.0
    h = 2.0 * np.arange(N) + 1.0
    x = gw.DArray(comm, N, np.float64)
    y = gw.DArray(comm, N, gw.FLOAT64)
    off, ln = split(N, rank)
    check(x.global_len() == N and x.local_len() == ln and x.global_offset() == off, "lengths and offset")
    check(x.local_lens() == [split(N, r)[1] for r in range(size)], f"local_lens {x.local_lens()}")
    check(x.ndim() == 1 and x.shape() == (N,) and x.local_shape() == (ln,) and x.halo() == 0, "shapes")
    check(x.dtype() == gw.FLOAT64 and x.space() == gw.SPACE_HOST and x.partition() == gw.PARTITION_SCATTER,
          "dtype, space, partition")
    x.set_global(g)
    y.set_global(h.tolist())  # any array-like, converted
    check(np.array_equal(x.allgather(), g), "allgather")
    got = y.gather(root=size - 1)
    check((got is None) == (rank != size - 1), "gather returns an array at the root only")
    if rank == size - 1:
        check(np.array_equal(got, h), "gather")
    check(np.array_equal(x.numpy(), g[off:off + ln]), "numpy() views the owned elements")
    b = x.local()
    check(b.count() == ln and (ln == 0 or b.pointer() == x.data()), "local() is a view of the owned elements")
    b.free()
    b = x.local_with_halo()
    check(b.count() == ln, "local_with_halo without a halo")
    b.free()
    y.axpy(2.0, x)  # y = 2 x + y
    y.scale(0.5)    # y = x + h / 2
    want = g + h / 2
    check(np.array_equal(y.allgather(), want), "axpy and scale")
    check(x.dot(y) == float(np.dot(g, want)), "dot")
    check(x.norm(gw.NORM_1) == float(np.abs(g).sum()), "norm 1")
    check(abs(x.norm() - float(np.sqrt((g * g).sum()))) < 1e-12, "norm 2")
    check(x.norm(gw.NORM_INF) == 6.0, "norm inf")
    check(x.sum() == g.sum() and x.min() == -4.0 and x.max() == 6.0, "sum, min, max")
    y.fill(3)
    check(np.array_equal(y.allgather(), np.full(N, 3.0)), "fill")

    # 2. Redistribution to BROADCAST and to another split; bcast.
    with gw.DArray(comm, N, np.float64, partition=gw.PARTITION_BROADCAST) as bc:
        x.redistribute(bc)
        check(np.array_equal(bc.numpy(), g), "redistribute to BROADCAST")
        if rank == size - 1:
            bc.numpy()[:] = 7.0  # one rank writes its copy...
        bc.bcast(root=size - 1)  # ...and bcast makes every copy equal to it
        check(np.array_equal(bc.numpy(), np.full(N, 7.0)), "bcast")
        mine = N if rank == 0 else 0  # everything on rank 0
        z = gw.DArray(comm, N, np.float64, local=mine)
        x.redistribute(z)
        check(z.local_len() == mine and (rank != 0 or np.array_equal(z.numpy(), g)), "redistribute to another split")
        z.free()

    # 3. A 2-D array (rows split over the ranks) with a halo row: row i holds the value i.
    rows, cols = 2 * size + 1, 3
    with gw.DArray(comm, (rows, cols), np.int32, halo=1) as grid:
        r0, nr = split(rows, rank)
        check(grid.shape() == (rows, cols) and grid.local_shape() == (nr, cols) and grid.halo() == 1, "2-D shapes")
        grid.set_global(np.repeat(np.arange(rows, dtype=np.int32), cols))
        grid.halo_exchange(1)
        b = grid.local_with_halo()
        whole = b.numpy().reshape(nr + 2, cols)
        check(nr == 0 or r0 == 0 or np.array_equal(whole[0], np.full(cols, r0 - 1)), "the ghost row above")
        check(nr == 0 or r0 + nr == rows or np.array_equal(whole[nr + 1], np.full(cols, r0 + nr)),
              "the ghost row below")
        b.free()
        del whole  # it kept the grid's memory alive; gw.finalize() refuses while such a view lives
        check(grid.sum() == cols * rows * (rows - 1) // 2, "int32 sum")

    # 4. complex128: dot(x, x) = ||x||^2 (the first argument conjugated).
    with gw.DArray(comm, 4, np.complex128) as c:
        c.set_global([1 + 2j, 3 - 1j, -2j, 1])
        check(c.dot(c) == complex(1 + 4 + 9 + 1 + 4 + 1, 0), f"complex dot {c.dot(c)}")

    # 5. Mismatched host arrays raise gpuwire.Error with the mismatch.
    for out, code in ((np.zeros(N, np.float32), gw.ERROR_DTYPE_MISMATCH), (np.zeros(N - 1), gw.ERROR_COUNT_MISMATCH)):
        try:
            x.allgather(out=out)
            check(False, f"allgather into {out.dtype}[{out.size}] did not raise")
        except gw.Error as e:
            check(e.code == code and "gpuwire_darray_allgather" in str(e), f"allgather mismatch: {e}")

    x.free()
    y.free()
    bad = np.array([len(failures)], dtype=np.int32)
    comm.allreduce(bad, op=gw.SUM)
    if rank == 0:
        if bad[0] == 0:
            print(f"darray.py: PASS ({size} ranks, numpy {np.__version__})", flush=True)
        else:
            print(f"darray.py: FAIL ({bad[0]} failed checks)", flush=True)
    comm.free()
    gw.finalize()
    return 0 if bad[0] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
