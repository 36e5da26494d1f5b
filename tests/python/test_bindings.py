#!/usr/bin/env python3
"""test_bindings.py: the Python module's promises on byte order and freeing (mpi4py, NumPy; CuPy
with --cupy on a GPU).

  1. Byte order: arrays whose elements are not in the machine's byte order (float64 and int32,
     e.g. np.full(3, 1.0, '>f8') on x86) are refused with a ValueError naming the byte order, by
     every call that wraps an array (allreduce, bcast, isend, Buffer.wrap, copy_from_host), and
     their bytes are left alone; explicitly native ones ('<f8' here) and one-byte ones work and
     are reduced right; a __cuda_array_interface__ array with a swapped typestr is refused the
     same way (without touching its pointer); DArray.set_global converts a swapped array (values
     checked), DArray.allgather refuses a swapped `out` with the reason. With --cupy, the same on
     CuPy device arrays.
  2. Communicators dropped without free(), in a different order on different ranks: not freed
     by the garbage collector (which would call the collective gpuwire_comm_free in different
     orders), each reported by a ResourceWarning; their handles stay valid, and
     gpuwire.finalize() releases them.
  3. free() and `with` still free collectively: the handle is invalid afterwards, no warning.
  4. A Request collected while its receive is pending is cancelled at once (withdrawn: its array
     not written, the message sent later left for the next receive, the communicator usable), not
     waited for; a completed one goes quietly; Request.free() of a pending receive lets it go on
     (as after MPI_Request_free): the message sent later lands in its array.
  5. Nonblocking collectives (Comm.ibarrier ... iscatter) return Requests: eleven outstanding at
     once, completed in reverse order, by test() and by waitall, values computed here; a Request
     keeps an array the caller dropped alive until it completes; an argument error raises and
     starts nothing. `with gw.group():` around blocking sends to every peer then receives of
     1 MiB (an order that deadlocks without the group), nested, and left by an exception (the
     thread is then outside the group); Comm.async_error().
  6. The v-collectives (Comm.alltoallv, gatherv, scatterv, reduce_scatterv, reduce_scatter_block
     and their nonblocking forms): uneven counts with gaps between the receive blocks (left as
     they were), a non-zero root, in place, values computed here.
  7. Receive status and wildcards (issue 13): recv_status from ANY_SOURCE / ANY_TAG (a shorter
     message: its count), probe / iprobe, a longer message raises ERROR_TRUNCATE, irecv_status
     with wait_status / test_status, waitany / testany / testall (with completed requests),
     abort and get_async_error, DArray.comm().
Rank 0 prints "test_bindings.py: PASS (...)" when every rank passed.

Usage: mpirun -n 2 python3 tests/python/test_bindings.py [EXPECTED_RANKS] [--cupy]
The package is the checkout's python/gpuwire; the library $GPUWIRE_LIBRARY, or as gpuwire._library says.
"""

import ctypes
import gc
import os
import sys
import warnings
import weakref
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from mpi4py import MPI  # noqa: E402  (initializes MPI)
import numpy as np  # noqa: E402

import gpuwire as gw  # noqa: E402

failures = []
RANK = MPI.COMM_WORLD.Get_rank()


def check(cond, what):
    if not cond:
        print(f"FAILED rank {RANK}: {what}", file=sys.stderr, flush=True)
        failures.append(what)


def refused(call, what, needle="byte order"):
    """`call()` must raise ValueError whose message contains `needle`."""
    try:
        call()
    except ValueError as e:
        check(needle in str(e), f"{what}: the message names the {needle}: {e}")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}, expected ValueError")
        return
    check(False, f"{what}: accepted (expected a ValueError about the {needle})")


def comm_valid(handle):
    r = ctypes.c_int32()
    return gw.lib.gpuwire_comm_rank(handle, ctypes.byref(r)) == gw.SUCCESS


class FakeDeviceArray:
    """A __cuda_array_interface__ array with a byte-swapped element type; its pointer is bogus,
    so a wrap that got past the byte-order check would fail otherwise."""

    def __init__(self, typestr):
        self.__cuda_array_interface__ = {"shape": (3,), "typestr": typestr, "data": (8, False), "version": 3,
                                         "strides": None}


def byte_order(world):
    size = world.size()
    swapped_f8 = np.dtype("f8").newbyteorder("S")  # '>f8' on little-endian machines
    swapped_i4 = np.dtype("i4").newbyteorder("S")
    native_explicit = np.dtype(gw._NATIVE_ORDER + "f8")  # '<f8' on little-endian machines

    x = np.full(3, 1.0, swapped_f8)
    before = x.tobytes()
    refused(lambda: world.allreduce(x, op=gw.SUM), f"allreduce of {x.dtype.str}")
    check(x.tobytes() == before and x.tolist() == [1.0] * 3, f"the refused {x.dtype.str} array is unchanged")
    y = np.full(5, 7, swapped_i4)
    refused(lambda: world.allreduce(y, op=gw.SUM), f"allreduce of {y.dtype.str}")
    check(y.tolist() == [7] * 5, f"the refused {y.dtype.str} array is unchanged")
    out = np.zeros(3, np.float64)
    refused(lambda: world.allreduce(x, out, op=gw.SUM), "allreduce from a swapped array into a native one")
    refused(lambda: world.allreduce(out, np.zeros(3, swapped_f8), op=gw.SUM),
            "allreduce from a native array into a swapped one")
    refused(lambda: world.bcast(y, root=0), "bcast of a swapped array")
    refused(lambda: world.isend(x, gw.PROC_NULL), "isend of a swapped array")
    refused(lambda: gw.Buffer.wrap(x), "Buffer.wrap of a swapped array")
    b = gw.Buffer.alloc(3, gw.FLOAT64)
    refused(lambda: b.copy_from_host(x), "copy_from_host from a swapped array")
    refused(lambda: b.copy_to_host(np.zeros(3, swapped_f8)), "copy_to_host into a swapped array")
    b.free()
    for typestr in (swapped_f8.str, swapped_i4.str):
        refused(lambda: gw.Buffer.wrap(FakeDeviceArray(typestr)), f"a __cuda_array_interface__ array of {typestr}")

    # Native byte order, written out ('<f8' on little-endian machines), and one-byte elements.
    z = np.full(3, 1.5, native_explicit)
    world.allreduce(z, op=gw.SUM)
    check(z.tolist() == [1.5 * size] * 3, f"allreduce of {native_explicit.str}: {z.tolist()}")
    w = np.full(4, 2, np.dtype("|i1"))
    world.allreduce(w, op=gw.SUM)
    check(w.tolist() == [2 * size] * 4, f"allreduce of |i1: {w.tolist()}")

    # Distributed arrays: set_global converts (the values are right), allgather refuses a swapped out.
    n = 7
    with gw.DArray(world, n, np.float64) as d:
        g = (np.arange(n, dtype=np.float64) * 1.25 + 1.0).astype(swapped_f8)
        d.set_global(g)
        got = d.allgather()
        check(got.tolist() == [i * 1.25 + 1.0 for i in range(n)], f"DArray.set_global of {g.dtype.str}: {got.tolist()}")
        check(float(d.sum()) == sum(i * 1.25 + 1.0 for i in range(n)), "DArray.sum after a converted set_global")
        try:
            d.allgather(out=np.zeros(n, swapped_f8))
            check(False, "DArray.allgather into a swapped out: accepted")
        except gw.Error as e:
            check(e.code == gw.ERROR_DTYPE_MISMATCH and "byte order" in str(e), f"DArray.allgather into a swapped out: {e}")


def byte_order_cupy(world):
    import cupy as cp

    size = world.size()
    a = cp.full(3, 1.0, cp.float64)
    try:
        swapped = a.view(a.dtype.newbyteorder("S"))  # the same memory, typestr '>f8'
    except (TypeError, ValueError) as e:
        print(f"test_bindings.py: note: this CuPy makes no byte-swapped arrays ({e}); the "
              "__cuda_array_interface__ case covers other producers", flush=True)
        swapped = FakeDeviceArray(a.dtype.newbyteorder("S").str)
    check(swapped.__cuda_array_interface__["typestr"][0] != gw._NATIVE_ORDER, "a swapped CuPy typestr")
    refused(lambda: world.allreduce(swapped, op=gw.SUM), f"allreduce of a CuPy {swapped.dtype.str} array")
    cp.cuda.get_current_stream().synchronize()
    check(cp.asnumpy(a).tolist() == [1.0] * 3, "the refused CuPy array is unchanged")
    world.allreduce(a, op=gw.SUM)
    cp.cuda.get_current_stream().synchronize()
    check(cp.asnumpy(a).tolist() == [float(size)] * 3, "allreduce of a native CuPy array")


def garbage_collection(world):
    rank, size = world.rank(), world.size()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comms = [world.dup(), gw.Comm(MPI.COMM_WORLD), world.split(0, rank)]
        handles = [c.handle for c in comms]
        # Dropped without free(), in a rank-dependent order (rank 0: first to last, rank 1: last
        # to first, ...): the collective frees would pair up wrongly across the ranks.
        order = list(range(len(comms)))
        if rank % 2 == 1:
            order.reverse()
        for i in order:
            comms[i] = None
            gc.collect()
        del comms
        gc.collect()
        comm_warnings = [w for w in caught if issubclass(w.category, ResourceWarning) and "gpuwire.Comm" in str(w.message)]
        check(len(comm_warnings) == 3, f"{len(comm_warnings)} ResourceWarnings for 3 communicators collected unfreed")
        check(all("collected without free()" in str(w.message) for w in comm_warnings), "the warning says why")
        check(all(comm_valid(h) for h in handles), "communicators collected unfreed are not freed")
        # They still work (the same on every rank), and are released by gpuwire.finalize().
        for h in handles:
            check(gw.lib.gpuwire_barrier(h, None) == gw.SUCCESS, "a collected communicator still works")

        # free() and `with` free collectively (every rank here, in the same order); no warning.
        caught.clear()
        c = world.dup()
        h = c.handle
        c.free()
        check(c.handle == 0 and not comm_valid(h), "free() frees the communicator")
        del c
        with world.dup() as c2:
            h2 = c2.handle
            x = np.ones(2)
            c2.allreduce(x)
            check(x.tolist() == [float(size)] * 2, "allreduce inside `with`")
        check(c2.handle == 0 and not comm_valid(h2), "`with` frees the communicator")
        del c2
        # Buffers and distributed arrays free locally: the collector frees them, quietly.
        b = gw.Buffer.alloc(4, gw.INT32)
        hb = b.handle
        d = gw.DArray(world, 5, np.float64)
        hd = d.handle
        del b, d
        gc.collect()
        n = ctypes.c_int64()
        check(gw.lib.gpuwire_buffer_count(hb, ctypes.byref(n)) == gw.ERROR_INVALID_HANDLE, "a collected buffer is freed")
        check(gw.lib.gpuwire_darray_global_len(hd, ctypes.byref(n)) == gw.ERROR_INVALID_HANDLE,
              "a collected distributed array is freed")
        check(not [w for w in caught if issubclass(w.category, ResourceWarning)],
              f"no warning for freed objects: {[str(w.message) for w in caught]}")

        # Requests: a completed one collected quietly; a pending receive cancelled at once, quietly,
        # the communicator usable; Request.free() lets a pending receive go on.
        caught.clear()
        r = world.isend(np.ones(2), gw.PROC_NULL)
        del r
        gc.collect()
        check(not caught, f"no warning for a completed request: {[str(w.message) for w in caught]}")
        left, right = (rank + size - 1) % size, (rank + 1) % size
        dc = world.dup()
        buf = np.full(3, -1.0)
        r = dc.irecv(buf, left, tag=41)  # sent only after its collection
        del r
        gc.collect()
        check(not caught, f"no warning for a cancelled receive: {[str(w.message) for w in caught]}")
        dc.barrier()
        got = np.zeros(3)
        s = dc.isend(np.full(3, float(rank)), right, tag=41)  # a blocking send to oneself may block
        dc.recv(got, left, tag=41)
        s.wait()
        check(got.tolist() == [float(left)] * 3, f"the next receive took the message: {got}")
        check(buf.tolist() == [-1.0] * 3, "the cancelled receive did not write its array")
        dc.free()
        dc2 = world.dup()
        y = np.zeros(2)
        r = dc2.irecv(y, left, tag=42)
        r.free()
        check(not r.active(), "Request.free() of a pending receive releases it")
        del r
        dc2.barrier()
        dc2.send(np.full(2, float(rank + 1)), right, tag=42)
        t0 = time.time()
        while y.tolist() != [float(left + 1)] * 2 and time.time() - t0 < 10:
            dc2.isend(np.ones(1), gw.PROC_NULL).wait()  # a new request looks at the freed ones
        check(y.tolist() == [float(left + 1)] * 2, f"the freed receive took the message sent later: {y}")
        # Into a strided array (a view, unpacked once the receive completes): after the later
        # message of the same sender, and any call of the package, the view holds it.
        z = np.full(8, -1.0)
        r = dc2.irecv(z[::2], left, tag=43)
        r.free()
        del r
        dc2.barrier()
        dc2.send(np.full(4, float(rank + 1)), right, tag=43)
        s = dc2.isend(np.full(1, 7.0), right, tag=44)
        w = np.zeros(1)
        dc2.recv(w, left, tag=44)
        s.wait()
        t0 = time.time()
        while z[::2].tolist() != [float(left + 1)] * 4 and time.time() - t0 < 10:
            dc2.barrier()
        check(z[::2].tolist() == [float(left + 1)] * 4 and z[1::2].tolist() == [-1.0] * 4,
              f"a freed receive into a strided array: {z}")
        dc2.free()


def nonblocking(world):
    rank, size = world.rank(), world.size()
    n, last = 300, size - 1
    val = lambda r, i: r * 1000 + i + 1  # noqa: E731
    idx = np.arange(n)
    for order in ("reverse", "test", "waitall"):
        mine = val(rank, idx).astype(np.int32)
        big = val(rank, np.arange(n * size)).astype(np.int32)
        bc = mine.copy() if rank == last else np.full(n, -1, np.int32)
        red, ar, rs, sc = (np.full(n, -1, np.int32) for _ in range(4))
        ag, agv, a2a, g = (np.full(n * size, -1, np.int32) for _ in range(4))
        avg = val(rank, idx).astype(np.float64)
        scsrc = (7 * np.arange(n * size)).astype(np.int32)
        rq = [
            world.ibarrier(),
            world.ibcast(bc, root=last),
            world.ireduce(mine, red if rank == 0 else None, op=gw.SUM, root=0),
            world.iallreduce(mine, ar, op=gw.MAX),
            world.iallreduce(avg, op=gw.AVG),
            world.iallgather(mine, ag),
            world.iallgatherv(mine, agv, [n] * size if order != "test" else None),
            world.ireduce_scatter(big, rs, op=gw.SUM),
            world.ialltoall(big, a2a),
            world.igather(mine, g if rank == last else None, root=last),
            world.iscatter(scsrc if rank == 0 else None, sc, root=0),
        ]
        if order == "reverse":
            for r in reversed(rq):
                r.wait()
        elif order == "test":
            pending = [r for r in rq if r.active()]
            for _ in range(10_000_000):
                pending = [r for r in pending if not r.test()]
                if not pending:
                    break
            check(not pending, f"{len(pending)} requests still pending after the test loop")
        else:
            gw.waitall(rq)
        check(not any(r.active() for r in rq), f"{order}: every request completed")
        total = sum(val(q, idx) for q in range(size))
        check((bc == val(last, idx)).all(), f"{order}: ibcast")
        check(rank != 0 or (red == total).all(), f"{order}: ireduce")
        check((ar == val(last, idx)).all(), f"{order}: iallreduce MAX")
        check((avg == total / size).all(), f"{order}: iallreduce AVG in place")
        want_ag = np.concatenate([val(q, idx) for q in range(size)])
        check((ag == want_ag).all() and (agv == want_ag).all(), f"{order}: iallgather, iallgatherv")
        check((rs == sum(val(q, rank * n + idx) for q in range(size))).all(), f"{order}: ireduce_scatter")
        check((a2a == np.concatenate([val(q, rank * n + idx) for q in range(size)])).all(), f"{order}: ialltoall")
        check(rank != last or (g == want_ag).all(), f"{order}: igather")
        check((sc == 7 * (rank * n + idx)).all(), f"{order}: iscatter")
    # The Request keeps the array alive: the caller's only reference is dropped before the wait.
    out = np.full(100_000, -1.0)
    r = world.iallreduce(np.full(100_000, rank + 1.0), out, op=gw.SUM)
    gc.collect()
    r.wait()
    check((out == size * (size + 1) / 2).all(), "iallreduce of a temporary array")
    # An argument error raises and returns no request.
    try:
        world.iallreduce(np.zeros(4), np.zeros(5))
        check(False, "iallreduce of 4 into 5 did not raise")
    except gw.Error as e:
        check(e.code == gw.ERROR_COUNT_MISMATCH, f"iallreduce of 4 into 5: {e}")
    try:
        world.ibcast(np.zeros(4), root=size)
        check(False, "ibcast from root size did not raise")
    except gw.Error as e:
        check(e.code == gw.ERROR_INVALID_ARGUMENT, f"ibcast from root size: {e}")
    world.async_error()

    # Groups: blocking sends to every peer (oneself on one rank), then the receives, 1 MiB each.
    peers = [q for q in range(size) if q != rank] or [rank]
    for nest in (False, True):
        ins = [np.full(1 << 18, -1, np.int32) for _ in peers]
        with gw.group():
            for q in peers:
                world.send(np.full(1 << 18, 100 * rank + q, np.int32), q, tag=7)
            if nest:
                with gw.group():
                    check(gw.group_depth() == 2, "group_depth in a nested group")
                    for q, buf in zip(peers, ins):
                        world.recv(buf, q, tag=7)
            else:
                for q, buf in zip(peers, ins):
                    world.recv(buf, q, tag=7)
        check(all((buf == 100 * q + rank).all() for q, buf in zip(peers, ins)), f"group of sends then receives (nested {nest})")
    check(gw.group_depth() == 0, "group_depth outside a group")
    x = np.full(10, rank + 1.0)
    with gw.group():
        check(gw.group_depth() == 1, "group_depth in a group")
        r = world.iallreduce(x, op=gw.SUM)
    r.wait()
    check((x == size * (size + 1) / 2).all(), "iallreduce in a group")
    try:
        with gw.group():
            world.allreduce(np.ones(3))
            raise RuntimeError("unwind")
    except RuntimeError:
        pass
    y = np.ones(3)
    world.allreduce(y)  # outside any group: done on return
    check((y == size).all(), "the thread left the group on an exception")


def vcollectives(world):
    rank, size = world.rank(), world.size()
    last = size - 1
    # alltoallv: rank r sends r + 1 elements (100 r + j) to rank j; receive blocks one apart.
    sc = [rank + 1] * size
    rc = [j + 1 for j in range(size)]
    rd = [sum(rc[:j]) + j for j in range(size)]
    send = np.repeat(100 * rank + np.arange(size), rank + 1).astype(np.int32)
    want = np.full(sum(rc) + size, -1, np.int32)
    for j in range(size):
        want[rd[j]:rd[j] + rc[j]] = 100 * j + rank
    for nb in (False, True):
        recv = np.full(sum(rc) + size, -1, np.int32)
        if nb:
            world.ialltoallv(send, sc, None, recv, rc, rd).wait()
        else:
            world.alltoallv(send, sc, None, recv, rc, rd)
        check((recv == want).all(), f"alltoallv (nonblocking: {nb})")
    # In place: symmetric counts (rank i and j exchange i + j + 1 elements).
    cnt = [rank + j + 1 for j in range(size)]
    inout = np.concatenate([np.full(cnt[j], 10 * rank + j, np.float64) for j in range(size)])
    world.alltoallv(inout, None, None, inout, cnt, None)
    check((inout == np.concatenate([np.full(cnt[j], 10 * j + rank, np.float64) for j in range(size)])).all(), "alltoallv in place")
    # gatherv / scatterv at the last rank, blocks in reverse rank order.
    gc = [j + 1 for j in range(size)]
    gd = [sum(gc[j + 1:]) for j in range(size)]
    for nb in (False, True):
        g = np.full(sum(gc), -1, np.int32)
        mine = np.full(rank + 1, 7 * rank, np.int32)
        at_root = rank == last
        r = (world.igatherv if nb else world.gatherv)(mine, g if at_root else None, gc if at_root else None, gd if at_root else None, root=last)
        if nb:
            r.wait()
        want = np.concatenate([np.full(gc[j], 7 * j, np.int32) for j in reversed(range(size))])
        check(not at_root or (g == want).all(), f"gatherv (nonblocking: {nb})")
        back = np.full(rank + 1, -1, np.int32)
        r = (world.iscatterv if nb else world.scatterv)(want if at_root else None, gc if at_root else None, gd if at_root else None, back, root=last)
        if nb:
            r.wait()
        check((back == 7 * rank).all(), f"scatterv (nonblocking: {nb})")
    # reduce_scatterv: rank j gets j + 1 elements of the sum; in place too.
    total = sum(gc)
    off = sum(gc[:rank])
    x = (np.arange(total) + rank).astype(np.int64)
    want = size * np.arange(off, off + rank + 1) + size * (size - 1) // 2
    for nb in (False, True):
        out = np.full(rank + 1, -1, np.int64)
        r = (world.ireduce_scatterv if nb else world.reduce_scatterv)(x, out, gc, op=gw.SUM)
        if nb:
            r.wait()
        check((out == want).all(), f"reduce_scatterv (nonblocking: {nb})")
    inout = x.copy()
    world.reduce_scatterv(inout, inout, gc, op=gw.SUM)
    check((inout[:rank + 1] == want).all(), "reduce_scatterv in place")
    blk = np.full(2, -1, np.int32)
    world.reduce_scatter_block(np.arange(2 * size, dtype=np.int32), blk, op=gw.SUM)
    check((blk == size * np.arange(2 * rank, 2 * rank + 2)).all(), "reduce_scatter_block")
    blk[:] = -1
    world.ireduce_scatter_block(np.arange(2 * size, dtype=np.int32), blk, op=gw.SUM).wait()
    check((blk == size * np.arange(2 * rank, 2 * rank + 2)).all(), "ireduce_scatter_block")
    try:
        world.alltoallv(send, sc[:-1] + [1, 1], None, recv, rc, rd)
        check(False, "alltoallv with too many counts did not raise")
    except ValueError as e:
        check("counts" in str(e), f"alltoallv with too many counts: {e}")


def status(world):
    rank, size = world.rank(), world.size()
    right, left = (rank + 1) % size, (rank - 1) % size
    # Integers that do not fit the C argument are refused with OverflowError (not cut to their
    # low bits: rank 2**40 was rank 0, tag 2**32 + 5 tag 5, a count of 2**64 a count of 0; nor
    # ctypes.ArgumentError, as by-value ones were), naming the argument, and nothing is sent.
    for what, call in (("a rank of 2**40", lambda: world.send(np.zeros(1), 1 << 40, 0)),
                       ("a tag of 2**32 + 5", lambda: world.isend(np.zeros(1), rank, (1 << 32) + 5)),
                       ("a tag of -2**31 - 1", lambda: world.recv(np.zeros(1), rank, -(1 << 31) - 1)),
                       ("a source of np.int64(2**31)", lambda: world.probe(np.int64(1 << 31), 0, gw.INT32)),
                       ("a root of 2**32", lambda: world.bcast(np.zeros(1), 1 << 32)),
                       ("a color of 2**33", lambda: world.split(1 << 33, 0)),
                       ("a count of 2**64", lambda: world.alltoallv(np.zeros(1), [1 << 64] * size, None, np.zeros(1),
                                                                    [0] * size, None)),
                       # NumPy integers too (np.uint64(2**64 - 1) was a count of -1, "is negative";
                       # np.int64(2**40) rank 0), in sequences, arrays and by value.
                       ("a count of np.uint64(2**64 - 1)",
                        lambda: world.alltoallv(np.zeros(1), [np.uint64(2**64 - 1)] * size, None, np.zeros(1),
                                                [0] * size, None)),
                       ("an array of counts of 2**64 - 1",
                        lambda: world.allgatherv(np.zeros(1), np.zeros(size), np.full(size, 2**64 - 1, np.uint64))),
                       ("a displacement of np.uint64(2**63)",
                        lambda: world.gatherv(np.zeros(1), np.zeros(size), [1] * size, [np.uint64(1 << 63)] * size)),
                       ("a by-value count of np.uint64(2**64 - 1)", lambda: gw.Buffer.alloc(np.uint64(2**64 - 1), gw.INT8)),
                       ("a rank of np.int64(2**40)", lambda: world.send(np.zeros(1), np.int64(1 << 40), 0))):
        try:
            call()
            check(False, f"{what} was accepted")
        except OverflowError as e:
            check("does not fit" in str(e), f"{what}: {e}")
    for what, call, says in (("a rank of 2**40", lambda: world.send(np.zeros(1), 1 << 40, 0),
                              "gpuwire_send: dest = 1099511627776 does not fit"),
                             ("a tag of np.uint32(2**31)", lambda: world.isend(np.zeros(1), rank, np.uint32(1 << 31)),
                              "gpuwire_isend: tag = 2147483648 does not fit"),
                             ("a count of 2**64", lambda: world.allgatherv(np.zeros(1), np.zeros(size), [1 << 64] * size),
                              "gpuwire_allgatherv: recvcounts[0] = 18446744073709551616 does not fit")):
        try:
            call()
            check(False, f"{what} was accepted")
        except OverflowError as e:
            check(says in str(e), f"{what}: {e}")
    # Between two barriers no rank sends anything else (the next lines do).
    world.barrier()
    check(world.iprobe() is None, "a refused call sent nothing")
    world.barrier()
    out = np.arange(3, dtype=np.int32) + 10 * rank
    r = world.isend(out, right, 21)
    st = world.probe(gw.ANY_SOURCE, 21, gw.INT32)
    check(st.source == left and st.tag == 21 and st.count == 3, "probe")
    check(world.iprobe(left, gw.ANY_TAG).count == 12, "iprobe, in bytes")
    check(world.iprobe(left, 22) is None, "iprobe finds nothing")
    small = np.full(2, -1, np.int32)
    try:
        world.recv_status(small, left, 21)
        check(False, "a longer message raises")
    except gw.Error as e:
        check(e.code == gw.ERROR_TRUNCATE and (small == -1).all(), "ERROR_TRUNCATE, nothing written")
    r.wait()
    r = world.isend(out, right, 23)
    wide = np.full(5, -1, np.int32)
    st = world.recv_status(wide)
    check(st.source == left and st.tag == 23 and st.count == 3, "recv_status with wildcards")
    check(repr(st) == f"StatusT(source={left}, tag=23, count=3, error=0, cancelled=0)", f"a status prints its fields: {st!r}")
    check((wide[:3] == np.arange(3) + 10 * left).all() and (wide[3:] == -1).all(), "a shorter message")
    r.wait()
    rq = [world.irecv_status(wide, left, 24), world.isend(out, right, 24)]
    i, st = gw.waitany(rq)
    check(i in (0, 1), "waitany")
    while not gw.testany(rq)[0]:
        pass
    check(not rq[0].active() and not rq[1].active(), "testany")
    rq = [world.irecv_status(wide, gw.ANY_SOURCE, 25), world.isend(out, right, 25)]
    while True:
        done, sts = gw.testall(rq)
        if done:
            break
    check(sts[0].source == left and sts[0].tag == 25 and sts[1].count == 0, "testall statuses")
    a, b = world.irecv_status(wide, left, 26), world.isend(out, right, 26)
    check(a.wait_status().tag == 26, "wait_status")
    b.wait()
    a, b = world.irecv_status(wide, left, 27), world.isend(out, right, 27)
    while True:
        done, st = a.test_status()
        if done:
            break
    check(st.tag == 27, "test_status")
    b.wait()
    doomed = world.dup()
    check(doomed.get_async_error() == gw.SUCCESS, "no asynchronous error")
    doomed.abort()
    check(doomed.get_async_error() == gw.ERROR_COMM_BROKEN, "aborted: broken")
    doomed.free()
    d = gw.DArray(world, 4 * size, dtype=gw.INT32)
    c, n = d.comm()
    check(n == size and c.size() == size and d.local_lens() == [4] * size, "DArray.comm")
    c.free()
    d.free()


def views(world):
    """Strided buffers of non-contiguous NumPy arrays and strided and subarray views (issue 15),
    against values computed here."""
    rank, size = world.rank(), world.size()
    m = np.arange(30, dtype=np.int64).reshape(5, 6) + 1000 * rank
    # sendrecv of the block m[1:4:2, 2:5] (two axes, both strided) into a column of r.
    r = np.full((6, 4), -1, np.int64)
    world.sendrecv(m[1:4:2, 2:5], (rank + 1) % size, 9, r[:, 2], (rank - 1) % size, 9)
    left = (rank - 1) % size
    want = [1000 * left + 6 * i + j for i in (1, 3) for j in (2, 3, 4)]
    check(r[:, 2].tolist() == want and (r[:, [0, 1, 3]] == -1).all(), f"sendrecv of m[1:4:2, 2:5]: {r}")
    # allreduce of a Fortran-ordered array's row into another row, and in place.
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4)) + rank
    world.allreduce(f[0, :], f[2, :], op=gw.SUM)
    check(f[2, :].tolist() == [size * j + size * (size - 1) / 2 for j in range(4)] and f[1, 0] == 4 + rank,
          f"allreduce of f[0, :] into f[2, :]: {f}")
    # Views of a buffer: strided and subarray, in C and Fortran order.
    b = gw.Buffer.wrap(m)
    got = np.zeros(5, np.int64)
    b.view_strided(1, 5, 1, 6).copy_to_host(got)
    check(got.tolist() == m[:, 1].tolist(), f"view_strided: column 1 {got}")
    got = np.zeros(4, np.int64)
    b.view_subarray([5, 6], [2, 2], [3, 4]).copy_to_host(got)
    check(got.tolist() == m[3:5, 4:6].ravel().tolist(), f"view_subarray C order: {got}")
    b.view_subarray([6, 5], [2, 2], [4, 3], order=gw.ORDER_FORTRAN).copy_to_host(got)
    check(got.tolist() == m[3:5, 4:6].ravel().tolist(), f"view_subarray Fortran order (the same block): {got}")
    try:
        b.view_strided(0, 6, 1, 6)
        check(False, "a strided view past the buffer was accepted")
    except gw.Error as e:
        check(e.code == gw.ERROR_INVALID_ARGUMENT, f"strided view past the buffer: {e}")
    try:
        gw.Buffer.wrap(m[:, ::-2])
        check(False, "a negative stride was accepted")
    except ValueError:
        pass


def keeps_arrays(world):
    """Arrays the package hands to gpuwire: a strided array of pairs is a strided buffer, and a
    request keeps its arrays while MPI may still write them (a refused waitall, a timed-out wait)."""
    size, rank = world.size(), world.rank()
    pt = gw.pair_dtype(gw.FLOAT64_INT32)
    q = np.zeros(8, pt)
    q["value"] = 1000.0 * rank + 10 * np.arange(8)
    q["index"] = rank
    world.allreduce(q[::2], op=gw.MAXLOC)
    want_v = [1000.0 * (size - 1) + 10 * i if i % 2 == 0 else 1000.0 * rank + 10 * i for i in range(8)]
    want_i = [size - 1 if i % 2 == 0 else rank for i in range(8)]
    check(q["value"].tolist() == want_v and q["index"].tolist() == want_i,
          f"MAXLOC allreduce of a strided pair array q[::2]: {q['value'].tolist()} {q['index'].tolist()}")

    # A refused waitall (the same request twice) leaves the request pending with its array.
    r = world.irecv(np.full(5, -1.0), rank, 31)
    try:
        gw.waitall([r, r])
        check(False, "waitall of one request twice was accepted")
    except gw.Error as e:
        check(e.code == gw.ERROR_INVALID_ARGUMENT, f"waitall of one request twice: {e.code}")
    check(r.active() and r._keep is not None, "a refused waitall keeps the request and its array")
    gc.collect()
    world.send(np.arange(5.0), rank, 31)
    r.wait()
    check(r._keep is None, "a completed request lets its array go")

    # Requests dropped inside an open group (an isend's, as fire-and-forget; an irecv's) start at
    # the group's end: their arrays stay alive until then (a freed 8 MiB send array crashed MPI).
    left, right = (rank - 1) % size, (rank + 1) % size
    a, got = np.full(1 << 20, float(rank)), np.zeros(1 << 20)
    wa = weakref.ref(a)
    with gw.group():
        world.isend(a, right, 41)  # the Request is dropped at once
        world.irecv(np.zeros(8), right, 42)  # so is this one, and its array
        del a
        gc.collect()
        check(wa() is not None, "the array of an isend dropped inside an open group is kept until the group ends")
        r = world.irecv(got, left, 41)
        try:
            r.free()
            check(False, "Request.free() inside the group was accepted")
        except gw.Error as e:
            check(e.code == gw.ERROR_INVALID_ARGUMENT and r.active() and r._keep is not None,
                  f"a refused Request.free() inside a group leaves the request and its array: {e.code}")
        world.send(np.arange(8.0), left, 42)
    r.wait()
    check((got == left).all(), f"an isend dropped inside a group delivered {got[:2]}, want {left}")
    gc.collect()
    world.barrier()
    check(wa() is None, "the dropped isend's array is let go once a later look finds it complete")

    # A timed-out wait abandons the operation: its arrays are kept for good (MPI writes them when
    # the late ranks arrive). On plain MPI (BACKEND_HOST): on the GPU machine AUTO picks IPC,
    # whose collective a rank has abandoned never completes for the late ranks (they time out).
    if size > 1:
        cfg = gw.config_init()
        cfg.timeout_seconds = 0.3
        cfg.backend = gw.BACKEND_HOST
        late = gw.Comm(MPI.COMM_WORLD, config=cfg)
        out = np.zeros(64)
        if rank == 0:
            rq = late.iallreduce(np.ones(64), out)
            del out
            try:
                rq.wait()
                check(False, "an iallreduce the other ranks join late did not time out")
            except gw.Error as e:
                check(e.code == gw.ERROR_TIMEOUT, f"iallreduce joined late: {e.code}")
            # (A request keeps its Buffers, each Buffer its array.)
            kept = [getattr(b, "_keep", None) for b in (gw._ABANDONED[-1] if gw._ABANDONED else ())]
            check(rq._keep is None and len(kept) == 2 and all(getattr(k, "shape", None) == (64,) for k in kept),
                  "a timed-out request's arrays are kept for good")
            MPI.COMM_WORLD.Barrier()
            MPI.COMM_WORLD.Barrier()
            check(len(kept) == 2 and (kept[1] == size).all(), "MPI wrote the kept receive array when the late ranks arrived")
        else:
            MPI.COMM_WORLD.Barrier()
            late.allreduce(np.ones(64), out)
            check((out == size).all(), "the late ranks' allreduce")
            MPI.COMM_WORLD.Barrier()
        late.free()

    # Distributed arrays of a pair datatype, by constant and by NumPy dtype.
    for dt in (gw.FLOAT64_INT32, pt):
        d = gw.DArray(world, 2 * size, dt)
        g = np.zeros(2 * size, pt)
        g["value"] = np.arange(2 * size) * 1.5
        g["index"] = np.arange(2 * size)
        d.set_global(g)
        mine = d.numpy()
        check(mine.dtype == pt and mine["index"].tolist() == [2 * rank, 2 * rank + 1], f"DArray of pairs ({dt!r})")
        d.free()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    want_cupy = "--cupy" in sys.argv
    size = MPI.COMM_WORLD.Get_size()
    if args and int(args[0]) != size:
        print(f"test_bindings.py: launched on {size} ranks, expected {args[0]} (wrong launcher?)", file=sys.stderr)
        return 1
    gw.init()
    world = gw.Comm(MPI.COMM_WORLD)
    label = "numpy"
    try:
        byte_order(world)
        nonblocking(world)
        vcollectives(world)
        status(world)
        views(world)
        keeps_arrays(world)
        if want_cupy:
            byte_order_cupy(world)
            label = "numpy and cupy"
        garbage_collection(world)
    except Exception as e:  # noqa: BLE001
        check(False, f"unexpected {type(e).__name__}: {e}")
    bad = MPI.COMM_WORLD.allreduce(len(failures), op=MPI.SUM)
    world.free()
    gw.finalize()
    if RANK == 0:
        print(f"test_bindings.py: {'PASS' if bad == 0 else 'FAIL'} ({label}; {size} ranks, {bad} failures)", flush=True)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
