"""pytest for the gpuwire Python package (host memory), on any number of ranks:

    mpirun -n 2 python3 -m pytest -q -p no:cacheprovider tests/python/test_package.py

(scripts/run-c-tests.sh runs it on 1 and 2 ranks.) It checks that every kind of host array
becomes a buffer over its own memory (NumPy, DLPack, __array_interface__, the buffer protocol),
with the address compared and the values reduced across ranks; what is refused and why; the
datatype rules (refused, never converted); communicators from mpi4py; the context managers of
communicators, buffers and requests. Every rank runs the same tests in the same order, so the
collective ones match. The package is the checkout's python/gpuwire unless GPUWIRE_TEST_INSTALLED
is set (then the installed one); the library as gpuwire._library finds it.
"""

import array
import ctypes
import os
import sys

if not os.environ.get("GPUWIRE_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from mpi4py import MPI  # noqa: E402  (initializes MPI)

import gpuwire  # noqa: E402

gpuwire.init()
WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
RANK_SUM = SIZE * (SIZE + 1) // 2  # the sum of rank + 1 over the ranks


@pytest.fixture(scope="session", autouse=True)
def _finalize():
    yield
    # pytest keeps the last failure's traceback for pdb (sys.last_*): its frames may hold NumPy
    # views of gpuwire's memory, which finalize refuses to release.
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gpuwire.finalize()  # before mpi4py finalizes MPI at exit


@pytest.fixture(scope="module")
def comm():
    c = gpuwire.Comm(WORLD)
    yield c
    c.free()


class OnlyDLPack:
    """An array that offers nothing but DLPack (as a PyTorch CPU tensor or a JAX array)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class OnlyArrayInterface:
    """An array that offers nothing but __array_interface__."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


def _wrapped(name):
    """(object to wrap, NumPy view of its memory, its address, its gpuwire datatype)."""
    if name == "numpy":
        a = np.zeros(5, np.float64)
        return a, a, a.ctypes.data, gpuwire.FLOAT64
    if name == "dlpack":
        a = np.zeros(5, np.int32)
        return OnlyDLPack(a), a, a.ctypes.data, gpuwire.INT32
    if name == "array_interface":
        a = np.zeros((2, 3), np.complex128)
        return OnlyArrayInterface(a), a, a.ctypes.data, gpuwire.COMPLEX128
    if name == "bytearray":
        b = bytearray(6)
        return b, np.frombuffer(b, np.uint8), ctypes.addressof(ctypes.c_char.from_buffer(b)), gpuwire.UINT8
    if name == "array.array":
        b = array.array("d", [0.0] * 4)
        return b, np.frombuffer(b, np.float64), b.buffer_info()[0], gpuwire.FLOAT64
    if name == "memoryview":
        a = np.zeros(4, np.int64)
        return memoryview(a), a, a.ctypes.data, gpuwire.INT64
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["numpy", "dlpack", "array_interface", "bytearray", "array.array", "memoryview"])
def test_arrays_are_wrapped_without_a_copy(comm, name):
    obj, view, address, dtype = _wrapped(name)
    with gpuwire.Buffer.wrap(obj) as b:
        assert b.pointer() == address, "the buffer is the array's own memory"
        assert b.count() == view.size and b.dtype() == dtype and b.space() == gpuwire.SPACE_HOST
    view[...] = RANK + 1
    comm.allreduce(obj, op=gpuwire.SUM)  # in place, through the object itself
    assert (view == RANK_SUM).all(), f"{name}: {view}"


def test_axes_of_length_one_are_left_out_of_a_strided_array(comm):
    # 15 axes of length 1 around a strided one: 16 axes, which wrap_strided (at most 15) refused
    # (a helper's bug hunt); they move no element, and their strides may be anything.
    x = np.zeros(20)
    y = x[::2].reshape((1,) * 15 + (10,))
    y[...] = np.arange(10) + RANK
    with gpuwire.Buffer.wrap(y) as b:
        assert b.count() == 10 and b.pointer() == x.ctypes.data
    comm.allreduce(y, op=gpuwire.SUM)
    assert (x[::2] == SIZE * np.arange(10) + RANK_SUM - SIZE).all() and (x[1::2] == 0).all(), x
    # A negative stride on an axis of length 1 moves nothing either.
    z = np.zeros((3, 1, 4))[:, :, ::2]
    odd = np.lib.stride_tricks.as_strided(z, strides=(z.strides[0], -8, z.strides[2]))
    with gpuwire.Buffer.wrap(odd) as b:
        assert b.count() == 6 and b.pointer() == z.ctypes.data


def test_refused_arrays(comm):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    with gpuwire.Buffer.wrap(a[:, 1]) as b:  # a NumPy column: a strided buffer where it is
        assert b.count() == 3 and b.pointer() == a[:, 1].ctypes.data
    with pytest.raises(ValueError, match="strides"):
        gpuwire.Buffer.wrap(a[::-1, 1])
    with pytest.raises(ValueError, match="not contiguous"):
        gpuwire.Buffer.wrap(OnlyDLPack(a[:, 1]))
    with pytest.raises(ValueError, match="not contiguous"):
        gpuwire.Buffer.wrap(OnlyArrayInterface(a[:, 1]))
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        comm.allreduce(ro)
    with pytest.raises(ValueError, match="read-only"):
        gpuwire.Buffer.wrap(b"abc")  # bytes: the buffer protocol, read-only
    with pytest.raises(ValueError, match="unsupported"):
        gpuwire.Buffer.wrap(np.zeros(2, np.bool_))
    with pytest.raises(ValueError, match="byte order"):
        gpuwire.Buffer.wrap(np.zeros(2, ">f8" if sys.byteorder == "little" else "<f8"))
    with pytest.raises(TypeError, match="not an array"):
        gpuwire.Buffer.wrap(object())
    for scalar in (np.float64(RANK), np.int32(1)):  # immutable; their array interface is a temporary
        with pytest.raises(ValueError, match="scalar"):
            comm.allreduce(scalar)
        with pytest.raises(ValueError, match="read-only"):
            gpuwire.Buffer.wrap(scalar)


def test_fortran_ordered_arrays_go_in_c_order(comm):
    """A buffer's elements are in C order of the array's indices, whatever its memory order: a
    Fortran-ordered array (contiguous or a view of one) meets a C-ordered one element for
    element, and receives into it too."""
    c = np.arange(12, dtype=np.float64).reshape(3, 4) * (RANK + 1)
    f = np.asfortranarray(c)
    got = np.zeros((3, 4), order="F")
    comm.allreduce(f if RANK % 2 == 0 else c, got)  # mixed memory orders across ranks
    assert (got == np.arange(12).reshape(3, 4) * RANK_SUM).all()
    part = np.zeros((2, 4))
    comm.allreduce(f[:2, :], part)
    assert (part == np.arange(8).reshape(2, 4) * RANK_SUM).all()
    with pytest.raises(ValueError, match="not contiguous"):
        gpuwire.Buffer.wrap(OnlyArrayInterface(f))  # no strided form there: refused, never transposed


def test_the_datatype_is_refused_not_converted(comm):
    with gpuwire.DArray(comm, 3 * SIZE, np.float64) as d:
        d.fill(7.0)
        with pytest.raises(gpuwire.Error, match="int32") as e:
            d.set_global(np.arange(3 * SIZE, dtype=np.int32))  # int32 for float64 (was converted)
        assert e.value.code == gpuwire.ERROR_DTYPE_MISMATCH
        with pytest.raises(gpuwire.Error) as e:
            d.set_global(list(range(3 * SIZE)))  # Python ints: int64
        assert e.value.code == gpuwire.ERROR_DTYPE_MISMATCH
        assert (d.allgather() == 7.0).all(), "a refused set_global changes nothing"
        d.set_global(np.arange(3 * SIZE, dtype=np.float64))
        assert (d.allgather() == np.arange(3 * SIZE)).all()
        for bad in (np.float32(2.0), np.int64(2), True, "2"):
            with pytest.raises(gpuwire.Error) as e:
                d.fill(bad)
            assert e.value.code == gpuwire.ERROR_DTYPE_MISMATCH, repr(bad)
        d.fill(2)  # a Python int is a real number
        d.scale(np.float64(1.5))
        assert d.sum() == pytest.approx(3.0 * 3 * SIZE)
        with pytest.raises(gpuwire.Error):
            d.scale(1j)
        with pytest.raises(gpuwire.Error) as e:
            d.allgather(out=np.zeros(3 * SIZE, np.float32))
        assert e.value.code == gpuwire.ERROR_DTYPE_MISMATCH
        # A read-only out (an immutable bytes object's memory) is refused, never written.
        raw = bytes(8 * 3 * SIZE)
        for ro in (np.frombuffer(raw, np.float64), np.zeros(3 * SIZE)):
            ro.flags.writeable = False
            with pytest.raises(gpuwire.Error, match="read-only") as e:
                d.allgather(out=ro)
            assert e.value.code == gpuwire.ERROR_INVALID_ARGUMENT and not ro.any()
        assert raw == bytes(8 * 3 * SIZE)
        with pytest.raises(TypeError, match="list"):
            d.allgather(out=[0.0] * 3 * SIZE)
    with gpuwire.DArray(comm, 2 * SIZE, np.int32) as i:
        with pytest.raises(gpuwire.Error) as e:
            i.fill(1.5)  # a float for an integer array
        assert e.value.code == gpuwire.ERROR_DTYPE_MISMATCH
        i.fill(np.int32(4))
        assert i.sum() == 4 * 2 * SIZE and i.sum().dtype == np.int32
    with gpuwire.Buffer.alloc(4, gpuwire.FLOAT64) as b, pytest.raises(gpuwire.Error) as e:
        b.copy_from_host(np.zeros(4, np.float32))
    assert e.value.code == gpuwire.ERROR_DTYPE_MISMATCH


def test_process_grid_and_wrapped_memory(comm):
    """A periodic 2-D grid: create_cart's and wrap's ghost rows hold the wrapped-around global rows;
    numpy() of an array with a halo on every axis is the owned box."""
    rows, cols = 2 * SIZE + 1, 4
    g = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols)
    with gpuwire.DArray(comm, (rows, cols), np.float64, procs=(0, 1), halo=(1, 1), periodic=(True, True)) as d:
        info = d.cart()
        assert info["procs"] == [SIZE, 1] and info["coords"][0] == RANK and info["periodic"] == [1, 1]
        d.set_global(g)
        r0, nr = info["starts"][0], d.local_shape()[0]
        assert (d.numpy() == g[r0:r0 + nr]).all()
        d.halo_exchange_axes(corners=True)
        whole = d.local_with_halo().numpy().reshape(nr + 2, cols + 2)
        want = np.pad(g, 1, mode="wrap")[r0:r0 + nr + 2]
        assert (whole == want).all()
    own = np.full((nr + 2, cols), -1.0)
    own[1:-1] = g[r0:r0 + nr]
    with gpuwire.DArray.wrap(comm, own, (rows, cols), procs=(0, 1), halo=(1, 0), periodic=(1, 0)) as w:
        w.halo_exchange_axes([1, 0])
        assert (own[0] == g[(r0 - 1) % rows]).all() and (own[-1] == g[(r0 + nr) % rows]).all()
    with pytest.raises(gpuwire.Error) as e:
        gpuwire.DArray(comm, (rows, cols), np.float64, procs=(SIZE + 1, 1))
    assert e.value.code == gpuwire.ERROR_INVALID_ARGUMENT
    # Memory smaller than the block with its ghosts (on the last rank only), or read-only: refused
    # on every rank (the others name no size), never written past.
    small = np.zeros(((nr + 2) * cols - (1 if RANK == SIZE - 1 else 0),))
    with pytest.raises(ValueError, match="needs" if RANK == SIZE - 1 else "another rank"):
        gpuwire.DArray.wrap(comm, small, (rows, cols), procs=(0, 1), halo=(1, 0))
    ro = np.zeros((nr + 2, cols))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        gpuwire.DArray.wrap(comm, ro, (rows, cols), procs=(0, 1), halo=(1, 0))
    assert not ro.any()
    # Memory in the other byte order (its bytes were taken as native values), or of an element
    # type gpuwire has not on the last rank only (it raised before the collective creation, the
    # other ranks waited for ever): refused on every rank.
    swapped = np.zeros((nr + 2, cols), np.dtype(np.float64).newbyteorder())
    with pytest.raises(ValueError, match="byte order"):
        gpuwire.DArray.wrap(comm, swapped, (rows, cols), procs=(0, 1), halo=(1, 0))
    odd = np.zeros((nr + 2, cols), np.int16 if RANK == SIZE - 1 else np.float64)
    with pytest.raises(ValueError, match="int16" if RANK == SIZE - 1 else "another rank"):
        gpuwire.DArray.wrap(comm, odd, (rows, cols), procs=(0, 1), halo=(1, 0))


def test_darray_of_an_unsupported_dtype_on_one_rank(comm):
    # The last rank asks for a datatype gpuwire has not: it raised before the collective
    # creation and the other ranks waited for ever. Now the creation fails on every rank: that
    # rank's ValueError, the others' gpuwire.Error naming it.
    for kw in ({}, {"halo": 1}, {"procs": (0,)}):
        dtype = np.int16 if RANK == SIZE - 1 else np.float64
        with pytest.raises(ValueError if RANK == SIZE - 1 else gpuwire.Error, match="int16" if RANK == SIZE - 1 else "datatype"):
            gpuwire.DArray(comm, 4 * SIZE, dtype, **kw)
    d = gpuwire.DArray(comm, 4 * SIZE, np.float64)  # the communicator still works
    assert d.global_len() == 4 * SIZE
    d.free()


def test_darray_numpy_integers_and_grid_arguments(comm):
    """NumPy integers are numbers (a halo of np.int64(1) is the row split's halo, as 1 is); a
    process grid refuses a partition or a local length it would otherwise ignore."""
    rows = 2 * SIZE + 1
    with gpuwire.DArray(comm, (rows, 3), np.float64, halo=np.int64(1)) as d:
        assert d.cart()["procs"] == [SIZE, 1] and d.halo() == 1
    with gpuwire.DArray(comm, np.int64(rows), np.float64, halo=np.int32(2)) as d:
        assert d.shape() == (rows,) and d.halo() == 2
    with gpuwire.DArray(comm, (rows, 3), np.float64, procs=(0, 1), halo=np.int64(1), periodic=np.int8(0)) as d:
        assert d.cart()["halo"] == [1, 1] and d.cart()["periodic"] == [0, 0]
    with pytest.raises(ValueError, match="SCATTER"):
        gpuwire.DArray(comm, rows, np.float64, partition=gpuwire.PARTITION_BROADCAST, periodic=0)
    with pytest.raises(ValueError, match="local"):
        gpuwire.DArray(comm, rows, np.float64, local=rows if RANK == 0 else 0, halo=(1,))


def test_darray_integers_that_do_not_fit_are_refused(comm):
    """Per-axis lists and scalars that their C or NumPy type cannot hold raise OverflowError
    naming the call, never keep their low bits (procs 2**64 + 1 became 1, a periodic flag of 2**32
    became 0, an int8 fill of 300 stored 44)."""
    for kw in ({"procs": (2**64 + 1, 1)}, {"halo": (2**64 + 1, 0)}, {"periodic": (2**32, 0)}):
        with pytest.raises(OverflowError, match="does not fit"):
            gpuwire.DArray(comm, (8, 4), np.float64, **kw)
    with pytest.raises(OverflowError, match="gpuwire_darray_wrap: halo.* does not fit"):
        gpuwire.DArray.wrap(comm, np.zeros(12), (10,), halo=(2**64 + 1,))
    for dt, bad in ((np.int8, 300), (np.uint32, -1), (np.int64, 2**63)):
        with gpuwire.DArray(comm, 3, dt) as d:
            with pytest.raises(OverflowError, match="gpuwire_darray_fill: .* does not fit"):
                d.fill(bad)
            with pytest.raises(OverflowError, match="gpuwire_darray_scale"):
                d.scale(bad)
            d.fill(7)
            assert d.allgather().tolist() == [7, 7, 7]


def test_scans_logical_ops_and_pairs(comm):
    # scan / exscan against a serial loop; exscan leaves rank 0's buffer alone; in place.
    x = np.array([RANK + 1, 10 * RANK], np.int64)
    out = np.full(2, -1, np.int64)
    comm.scan(x, out, op=gpuwire.SUM)
    assert out.tolist() == [sum(q + 1 for q in range(RANK + 1)), sum(10 * q for q in range(RANK + 1))]
    ex = np.full(2, -7, np.int64)
    comm.iexscan(x, ex, op=gpuwire.MAX).wait()
    assert ex.tolist() == ([-7, -7] if RANK == 0 else [RANK, 10 * (RANK - 1)])
    y = x.copy()
    comm.iscan(y, op=gpuwire.PROD).wait()
    assert y[0] == np.prod([q + 1 for q in range(RANK + 1)])
    # Logical ops on mixed values (a single rank's value passes through, as in MPI).
    m = np.array([0, 3, RANK % 2, 256], np.int32)
    out4 = np.zeros(4, np.int32)
    comm.allreduce(m, out4, op=gpuwire.LXOR)
    vals = [[0, 3, q % 2, 256] for q in range(SIZE)]
    want = vals[0] if SIZE == 1 else [sum(v[k] != 0 for v in vals) % 2 for k in range(4)]
    assert out4.tolist() == want
    with pytest.raises(gpuwire.Error, match="LAND") as e:
        comm.allreduce(np.ones(2, np.float32), op=gpuwire.LAND)
    assert e.value.code == gpuwire.ERROR_UNSUPPORTED_OP
    # MINLOC on NumPy structured pairs; ties: the lowest index wins.
    for dt in (gpuwire.FLOAT32_INT32, gpuwire.FLOAT64_INT32, gpuwire.INT32_INT32):
        t = gpuwire.pair_dtype(dt)
        assert t.itemsize == gpuwire.dtype_size(dt)
        a = np.zeros(2, t)
        a["value"] = [RANK % 2, -RANK]
        a["index"] = [100 - RANK, RANK]
        r = np.zeros(2, t)
        comm.allreduce(a, r, op=gpuwire.MINLOC)
        last_even = 2 * ((SIZE - 1) // 2)
        assert r["value"].tolist() == [0, -(SIZE - 1)] and r["index"].tolist() == [100 - last_even, SIZE - 1]
        comm.scan(a, r, op=gpuwire.MAXLOC)
        assert r["value"][1] == 0 and r["index"][1] == 0


def test_the_package_under_test():
    here = os.path.dirname(os.path.abspath(gpuwire.__file__))
    checkout = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    assert (os.path.realpath(os.path.dirname(here)) != checkout) == bool(os.environ.get("GPUWIRE_TEST_INSTALLED"))
    assert gpuwire.version()[:2] == (gpuwire.VERSION_MAJOR, gpuwire.VERSION_MINOR)


def test_comm_from_mpi4py():
    with gpuwire.Comm(WORLD) as c:
        assert (c.rank(), c.size()) == (RANK, SIZE)
        own = MPI.Comm.f2py(c.mpi())  # gpuwire's duplicate of MPI_COMM_WORLD
        assert MPI.Comm.Compare(own, WORLD) == MPI.CONGRUENT
    half = WORLD.Split(RANK % 2, RANK)
    try:
        with gpuwire.Comm(half) as c:
            assert (c.rank(), c.size()) == (half.Get_rank(), half.Get_size())
            x = np.full(2, RANK, np.int64)
            c.allreduce(x)
            assert (x == sum(range(RANK % 2, SIZE, 2))).all()
    finally:
        half.Free()


def _invalid(fn, handle):
    out = fn.argtypes[1]._type_()
    return fn(handle, ctypes.byref(out)) == gpuwire.ERROR_INVALID_HANDLE


def test_context_managers_free():
    with gpuwire.Comm(WORLD) as c:
        h = c.handle
        assert not _invalid(gpuwire.lib.gpuwire_comm_rank, h)
    assert c.handle == 0 and _invalid(gpuwire.lib.gpuwire_comm_rank, h), "the with block freed the communicator"
    with gpuwire.Buffer.wrap(np.zeros(3)) as b:
        h = b.handle
    assert b.handle == 0 and _invalid(gpuwire.lib.gpuwire_buffer_count, h)
    with gpuwire.Buffer.alloc(3, gpuwire.INT8) as b:
        h = b.handle
    assert _invalid(gpuwire.lib.gpuwire_buffer_count, h)


def test_one_rank_refused_by_python_fails_every_rank_in_checking_mode():
    # An argument the package itself refuses on one rank (a per-rank array of the wrong length, a
    # per-axis list) goes to the C call as NULL there, so that in checking mode the other ranks'
    # calls fail too (they waited for ever before: the package raised before its C call).
    cfg = gpuwire.config_init()
    cfg.check = 1
    comm = gpuwire.Comm(WORLD, config=cfg)
    x = np.full(2, RANK, np.int32)
    out = np.zeros(2 * SIZE, np.int32)
    counts = [2] * SIZE + ([2] if RANK == 0 else [])
    for blocking in (True, False):
        if RANK == 0:
            with pytest.raises(ValueError, match="recvcounts"):
                if blocking:
                    comm.allgatherv(x, out, counts)
                else:
                    comm.iallgatherv(x, out, counts).wait()
        elif blocking:
            with pytest.raises(gpuwire.Error) as e:
                comm.allgatherv(x, out, counts)
            assert e.value.code == gpuwire.ERROR_REMOTE_ARGUMENT
        else:
            r = comm.iallgatherv(x, out, counts)
            with pytest.raises(gpuwire.Error) as e:
                r.wait()
            assert e.value.code == gpuwire.ERROR_REMOTE_ARGUMENT
        comm.barrier()  # still usable: the failure was agreed
    sc = [1] * SIZE + ([1] if RANK == 0 else [])
    a, b = np.full(SIZE, RANK, np.int32), np.zeros(SIZE, np.int32)
    if RANK == 0:
        with pytest.raises(ValueError, match="counts or displacements"):
            comm.alltoallv(a, sc, None, b, [1] * SIZE, None)
    else:
        with pytest.raises(gpuwire.Error) as e:
            comm.alltoallv(a, sc, None, b, [1] * SIZE, None)
        assert e.value.code == gpuwire.ERROR_REMOTE_ARGUMENT
    comm.barrier()
    # A process grid: the creation fails on every rank whatever the checking mode.
    periodic = (1, 0, 1) if RANK == 0 else (1, 0)
    with pytest.raises((ValueError, gpuwire.Error)):
        gpuwire.DArray(comm, (4 * SIZE, 3), gpuwire.INT32, procs=(0, 1), halo=(1, 0), periodic=periodic)
    comm.free()


def test_in_place_integers_and_scalars_refused_by_python_fail_every_rank_in_checking_mode():
    # The same for the paths that raised before their C call (found by a helper's new-user hunt;
    # the other ranks waited for ever): an in-place collective's read-only array, an integer
    # argument past its C type (a root of 2**40), a DArray scalar of another type. A timeout
    # makes a rank left waiting fail with TIMEOUT instead of hanging the test.
    cfg = gpuwire.config_init()
    cfg.check = 1
    cfg.timeout_seconds = 30.0
    comm = gpuwire.Comm(WORLD, config=cfg)

    def everywhere(refused, call):
        # `call` raises `refused` on rank 0 and REMOTE_ARGUMENT on the others; the communicator
        # stays usable (the failure was agreed, no rank timed out).
        if RANK == 0:
            with pytest.raises(refused):
                call()
        else:
            with pytest.raises(gpuwire.Error) as e:
                call()
            assert e.value.code == gpuwire.ERROR_REMOTE_ARGUMENT, e.value
        comm.barrier()

    x = np.full(2, RANK, np.int32)
    if RANK == 0:
        x.flags.writeable = False
    everywhere(ValueError, lambda: comm.allreduce(x))
    everywhere(ValueError, lambda: comm.scan(x))
    everywhere(ValueError, lambda: comm.reduce(x, x))
    everywhere(ValueError, lambda: comm.iallreduce(x).wait())
    everywhere(ValueError, lambda: comm.iexscan(x).wait())
    everywhere(ValueError, lambda: comm.ireduce(x, x).wait())
    y = np.full(2, RANK, np.int32)
    root = 2 ** 40 if RANK == 0 else 0
    everywhere(OverflowError, lambda: comm.bcast(y, root=root))
    everywhere(OverflowError, lambda: comm.ibcast(y, root=root).wait())
    everywhere(OverflowError, lambda: comm.allreduce(y, op=2 ** 40 if RANK == 0 else gpuwire.SUM))
    out = np.zeros(2 * SIZE, np.int32)
    everywhere(OverflowError, lambda: comm.gatherv(y, out, [2] * SIZE, None, root=root))
    everywhere(OverflowError, lambda: comm.igatherv(y, out, [2] * SIZE, None, root=root).wait())
    d = gpuwire.DArray(comm, (4,), gpuwire.INT32, partition=gpuwire.PARTITION_BROADCAST)
    everywhere(gpuwire.Error, lambda: d.fill(1.5 if RANK == 0 else 7))
    d.fill(3)
    assert bool((d.numpy() == 3).all())
    d.free()
    f = gpuwire.DArray(comm, (4,), gpuwire.FLOAT32, partition=gpuwire.PARTITION_BROADCAST)
    f.fill(2.0)
    everywhere(gpuwire.Error, lambda: f.scale(1j if RANK == 0 else 2.0))
    everywhere(gpuwire.Error, lambda: f.axpy(1j if RANK == 0 else 1.0, f))
    f.scale(1.5)
    assert bool((f.numpy() == 3.0).all())
    f.free()
    # Not collective: a None buffer is refused as by send and recv (it was an AttributeError).
    with pytest.raises(TypeError, match="got None"):
        comm.sendrecv(y, gpuwire.PROC_NULL, 0, None, gpuwire.PROC_NULL, 0)
    with pytest.raises(TypeError, match="got None"):
        comm.sendrecv(None, gpuwire.PROC_NULL, 0, y, gpuwire.PROC_NULL, 0)
    comm.free()


def test_request_context_manager():
    comm = gpuwire.Comm(WORLD)
    dest, source = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    x, y = np.full(4, RANK, np.int32), np.full(4, -1, np.int32)
    with comm.irecv(y, source, tag=3) as r:
        comm.send(x, dest, tag=3)
    assert not r.active() and (y == source).all(), "the with block waited for the receive"
    # After an exception in the block, the receive (whose message is sent only later) is
    # cancelled and released: its array is not written, the message goes to the next receive.
    y[:] = -1
    with pytest.raises(KeyError):
        with comm.irecv(y, source, tag=4) as r:
            raise KeyError("the block's own exception")
    assert not r.active(), "after an exception the request is released"
    comm.barrier()
    z = np.full(4, -1, np.int32)
    s = comm.isend(x, dest, tag=4)  # not a blocking send: to oneself (one rank) it may block
    comm.recv(z, source, tag=4)
    s.wait()
    assert (z == source).all() and (y == -1).all(), "the cancelled receive took nothing"
    comm.free()


def test_cancel():
    # gpuwire_cancel (MPI_Cancel): a receive whose message has not come completes at once,
    # cancelled, its array untouched; a completed one is not cancelled.
    comm = gpuwire.Comm(WORLD)
    y = np.full(3, -1, np.int64)
    r = comm.irecv_status(y, gpuwire.ANY_SOURCE, tag=77)
    r.cancel()
    st = r.wait_status()
    assert st.cancelled == 1 and st.count == 0 and (y == -1).all(), f"cancelled: {st}"
    # A message to oneself, then the cancel: the receive either took it (not cancelled) or not
    # (cancelled, the message left for the next receive); never both, never neither.
    r = comm.irecv_status(y, RANK, tag=78)
    comm.send(np.arange(3, dtype=np.int64), RANK, tag=78)
    r.cancel()
    st = r.wait_status()
    if st.cancelled:
        z = np.full(3, -1, np.int64)
        comm.recv(z, RANK, tag=78)
        assert (y == -1).all() and (z == np.arange(3)).all()
    else:
        assert st.count == 3 and (y == np.arange(3)).all(), f"completed: {st}"
    comm.free()


def test_free_isend_and_collective_in_flight():
    # The fire-and-forget idiom (MPI_Isend, MPI_Request_free): the send goes on, its array kept
    # alive (it was abandoned and the communicator broken). 1 MiB: past every eager size, and
    # the receive is posted after a barrier, so the send is in flight at the free.
    comm = gpuwire.Comm(WORLD)
    dest, source = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    x, y = np.arange(1 << 17, dtype=np.int64) + 1000000 * RANK, np.full(1 << 17, -1, np.int64)
    r = comm.isend(x, dest, tag=5)
    r.free()
    del x, r
    comm.barrier()
    comm.recv(y, source, tag=5)
    assert (y == np.arange(1 << 17) + 1000000 * source).all()
    # A nonblocking collective too: it goes on, the later blocking collective runs after it.
    a, b = np.full(3, RANK + 1, np.int64), np.zeros(3, np.int64)
    r = comm.iallreduce(a, b)
    r.free()
    comm.barrier()
    assert (b == SIZE * (SIZE + 1) // 2).all()
    comm.free()


def test_memory_stays_alive(comm):
    # From a new-user pass, each a segfault or silent corruption before: a Buffer freed (its with
    # block left) while an irecv on it is pending; a view used after its parent's free(); the
    # NumPy view of a Buffer or DArray nobody else holds. And the arrays of released isends are
    # let go once they completed (they were kept for good).
    import gc

    dest, source = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    n = 1 << 16
    y = np.full(n, -1.0)
    with gpuwire.Buffer.wrap(y) as b:
        r = comm.irecv(b, source, tag=21)
    del y, b
    gc.collect()
    junk = [np.full(n, 7.0) for _ in range(8)]  # reuses the freed memory, were it freed
    comm.send(np.arange(n, dtype=np.float64) + RANK, dest, tag=21)
    r.wait()
    assert all((j == 7.0).all() for j in junk)
    z = np.zeros(n)
    p = gpuwire.Buffer.wrap(z)
    v = p.view(0, n)
    p.free()
    comm.sendrecv(np.full(n, 3.0), dest, 22, v, source, 22)
    assert (z == 3.0).all()
    v.free()
    a = gpuwire.Buffer.alloc(4, gpuwire.FLOAT64).numpy()
    gc.collect()
    a[:] = 5.0
    assert a.sum() == 20.0
    d = gpuwire.DArray(comm, 4 * SIZE, np.float64).numpy()
    gc.collect()
    d[:] = 2.0
    assert d.sum() == 8.0
    whole = gpuwire.Buffer.alloc(6, gpuwire.FLOAT64)
    col = whole.view_strided(0, 3, 1, 2)
    assert whole.contiguous() and not col.contiguous()
    with pytest.raises(ValueError):
        col.numpy()  # it gave 3 consecutive elements, which are not the view's
    col.free()
    whole.free()
    q = gpuwire.Buffer.alloc(2, gpuwire.FLOAT64_INT32).numpy()
    assert q.dtype == gpuwire.pair_dtype(gpuwire.FLOAT64_INT32) and len(q) == 2
    with pytest.raises(TypeError):
        comm.allreduce(None)
    with pytest.raises(ValueError):
        gpuwire.Buffer.wrap(memoryview(np.zeros((3, 2), order="F")))
    for _ in range(20):
        comm.isend(np.full(1 << 17, 1.0), dest, tag=23)  # each request dropped at once
    got = np.zeros(1 << 17)
    for _ in range(20):
        comm.recv(got, source, tag=23)
    comm.barrier()
    comm.isend(np.zeros(1), RANK, tag=24).wait()  # a new request looks at the released ones
    comm.recv(np.zeros(1), RANK, tag=24)
    assert len(gpuwire._DETACHED) == 0, len(gpuwire._DETACHED)


def test_numpy_after_free_raises(comm):
    # numpy() of a freed Buffer or DArray: gpuwire.Error naming the call and saying why (it named
    # gpuwire_buffer_count and "the NULL buffer handle" before).
    b = gpuwire.Buffer.alloc(4, gpuwire.FLOAT64)
    b.free()
    with pytest.raises(gpuwire.Error, match=r"gpuwire\.Buffer\.numpy: the buffer was freed") as e:
        b.numpy()
    assert e.value.code == gpuwire.ERROR_INVALID_HANDLE
    with gpuwire.DArray(comm, 4 * SIZE, np.float64) as d:
        pass
    with pytest.raises(gpuwire.Error, match=r"gpuwire\.DArray\.numpy: the distributed array was freed") as e:
        d.numpy()
    assert e.value.code == gpuwire.ERROR_INVALID_HANDLE


def test_numpy_views_outlive_free(comm):
    # A NumPy view (and a view of it) keeps the memory it views alive past free() of its Buffer
    # or DArray (the end of a with block): it read freed memory before, which the allocations
    # below took over.
    n = 1 << 10
    b = gpuwire.Buffer.alloc(n, gpuwire.FLOAT64)
    a = b.numpy()[1:]
    a[:] = 5.0
    b.free()
    with gpuwire.DArray(comm, (4 * SIZE, 8), np.float64, halo=1) as d:
        v = d.numpy()
        d.fill(3.0)
    with gpuwire.DArray(comm, (4 * SIZE, 8), np.float64, procs=(0, 1), halo=(1, 1)) as g:
        box = g.numpy()  # the owned box of the storage, ghosts on both axes
        g.fill(4.0)
    junk = [gpuwire.Buffer.alloc(n, gpuwire.FLOAT64) for _ in range(8)]
    junk += [gpuwire.DArray(comm, (4 * SIZE, 8), np.float64, halo=1) for _ in range(4)]
    junk += [gpuwire.DArray(comm, (4 * SIZE, 8), np.float64, procs=(0, 1), halo=(1, 1)) for _ in range(4)]
    for j in junk:
        j.numpy()[:] = 7.0
    assert (a == 5.0).all() and (v == 3.0).all() and (box == 4.0).all()
    for j in junk:
        j.free()


# Run in a process of its own (a singleton MPI): gpuwire.finalize() cannot be undone.
_FINALIZE_WITH_VIEWS = """
import sys
sys.path.insert(0, sys.argv[1])
from mpi4py import MPI
print("started", flush=True)
import numpy as np
import gpuwire

gpuwire.init()
comm = gpuwire.Comm(MPI.COMM_WORLD)
b = gpuwire.Buffer.alloc(1 << 17, gpuwire.FLOAT64)  # 1 MiB: a mapping of its own, unmapped when freed
a = b.numpy()[2:]
a[:] = 1.0
d = gpuwire.DArray(comm, (4, 3), np.float64, halo=1)
v = d.numpy()
own = np.arange(4.0)
w = gpuwire.Buffer.wrap(own).numpy()  # the program's memory: finalize leaves it alone
comm.free()
try:
    gpuwire.finalize()
    print("finalized")
except gpuwire.Error as e:
    print("refused", e.code, e)
print("initialized", gpuwire.initialized(), "sum", a.sum())
del a, v
gpuwire.finalize()
print("initialized", gpuwire.initialized())
for x in (b, d):
    try:
        x.numpy()
        print("read")
    except gpuwire.Error as e:
        print("after", e.code, e)
print("wrapped", w.tolist())
"""


def test_finalize_refuses_while_numpy_views_live():
    # finalize() releases gpuwire's memory: it refuses while a NumPy view of it lives (the view
    # read freed memory after it before: a crash here), and works once they are gone; numpy()
    # afterwards raises ALREADY_FINALIZED naming the call; a view of a wrapped array stays.
    import subprocess

    # Every rank the same: a process of its own, without this job's launcher identity.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "OPAL_", "ORTE_", "PMIX_", "PRTE_", "PMI_", "HYDRA_"))
           or k.startswith(("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_MCA_plm", "OMPI_MCA_btl"))}
    # (Kept: the machine's own Open MPI settings a singleton needs, e.g. OMPI_MCA_plm=isolated
    # where there is no ssh: without it the singleton's daemon did not start on the GPU machine.)
    env["GPUWIRE_LIBRARY"] = gpuwire.lib._name
    package = os.path.dirname(os.path.dirname(os.path.abspath(gpuwire.__file__)))
    r = subprocess.run([sys.executable, "-c", _FINALIZE_WITH_VIEWS, package], env=env, capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0 and not r.stdout.startswith("started"):
        # Its MPI did not start: a singleton (a process not launched by mpirun) is not supported
        # by every MPI installation (the GPU machine's stock Open MPI refused it). Not run.
        pytest.skip("NOT RUN: a single-process MPI (singleton) could not start here: " + r.stderr.strip()[-300:])
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    lines = r.stdout.splitlines()[1:]
    assert len(lines) == 6, r.stdout
    assert lines[0].startswith(f"refused {gpuwire.ERROR_INVALID_ARGUMENT} gpuwire.finalize: 2 NumPy array(s)"), lines[0]
    assert lines[1] == f"initialized True sum {float((1 << 17) - 2)}", lines[1]
    assert lines[2] == "initialized False", lines[2]
    for line, call in zip(lines[3:5], ("Buffer", "DArray")):
        want = f"after {gpuwire.ERROR_ALREADY_FINALIZED} gpuwire.{call}.numpy: gpuwire is finalized"
        assert line.startswith(want), line
    assert lines[5] == "wrapped [0.0, 1.0, 2.0, 3.0]", lines[5]


def test_p2p_matching_config():
    # config.p2p_matching (GPUWIRE_P2P_MATCHING): the backend's matching by default; MPI's
    # requested, a communicator whose wildcard receives match as MPI.
    cfg = gpuwire.config_init()
    assert cfg.p2p_matching == gpuwire.P2P_MATCHING_BACKEND
    cfg.p2p_matching = gpuwire.P2P_MATCHING_MPI
    comm = gpuwire.Comm(WORLD, config=cfg)
    dest, source = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    x, y = np.full(2, RANK, np.int32), np.full(3, -1, np.int32)
    r = comm.isend(x, dest, tag=20 + RANK)
    st = comm.recv_status(y)
    r.wait()
    assert (st.source, st.tag, st.count) == (source, 20 + source, 2) and list(y) == [source, source, -1]
    comm.free()


# ---- device memory (the GPU machine: scripts/gpu-run.sh runs this file there; skipped here) ----


def _cupy():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no CUDA device ({e})")
    return cp


def test_cupy_arrays_are_wrapped_without_a_copy(comm):
    cp = _cupy()
    a = cp.full(6, RANK + 1, dtype=cp.float32)
    with gpuwire.Buffer.wrap(a) as b:
        assert b.pointer() == a.data.ptr and b.count() == 6 and b.dtype() == gpuwire.FLOAT32
    comm.allreduce(a)
    cp.cuda.get_current_stream().synchronize()
    assert (cp.asnumpy(a) == RANK_SUM).all()
    col = cp.zeros((3, 4), dtype=cp.float64)[:, 1]  # a strided buffer in device memory
    col[...] = RANK + 1
    comm.allreduce(col)
    cp.cuda.get_current_stream().synchronize()
    assert (cp.asnumpy(col) == RANK_SUM).all()
    with pytest.raises(ValueError, match="strides"):
        gpuwire.Buffer.wrap(cp.zeros((3, 4))[::-1, 1])


def test_torch_tensors_are_wrapped_without_a_copy(comm):
    torch = pytest.importorskip("torch")
    cpu = torch.full((5,), RANK + 1, dtype=torch.float64)  # DLPack
    with gpuwire.Buffer.wrap(cpu) as b:
        assert b.pointer() == cpu.data_ptr() and b.dtype() == gpuwire.FLOAT64
    comm.allreduce(cpu)
    assert (cpu == RANK_SUM).all()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    dev = torch.full((5,), RANK + 1, dtype=torch.int32, device="cuda")  # __cuda_array_interface__
    with gpuwire.Buffer.wrap(dev) as b:
        assert b.pointer() == dev.data_ptr() and b.dtype() == gpuwire.INT32
    comm.allreduce(dev)
    torch.cuda.synchronize()
    assert (dev.cpu() == RANK_SUM).all()


def test_waitsome_testsome():
    # gpuwire_waitsome / gpuwire_testsome: [(index, StatusT)] in list order; None when all are
    # complete (NULL); messages to oneself.
    comm = gpuwire.Comm(WORLD)
    x, y = np.arange(3, dtype=np.int64) + 10 * RANK, np.full(5, -1, np.int64)
    reqs = [comm.irecv_status(y, RANK, tag=81), comm.isend(x, gpuwire.PROC_NULL, tag=81)]
    got = gpuwire.testsome(reqs)
    assert [i for i, _ in got] in ([1], [0, 1]), got
    comm.send(x, RANK, tag=81)
    seen = [i for i, _ in got]
    while len(seen) < 2:
        for i, st in gpuwire.waitsome(reqs):
            seen.append(i)
            assert i != 0 or (st.tag == 81 and st.count == 3 and st.cancelled == 0), st
    assert sorted(seen) == [0, 1] and not any(r.active() for r in reqs)
    assert (y[:3] == x).all() and (y[3:] == -1).all()
    assert gpuwire.waitsome(reqs) is None and gpuwire.testsome(reqs) is None
    comm.free()


def test_a_failed_request_leaves_the_others_outcomes():
    # waitsome, testsome, testall, waitany: a request that fails (a message longer than its
    # irecv_status buffer: ERROR_TRUNCATE) raises gpuwire.Error naming its index, and what the
    # C call wrote of the other requests comes with it (Error.completed, Error.statuses).
    comm = gpuwire.Comm(WORLD)
    x, long = np.arange(3, dtype=np.int64) + 10 * RANK, np.arange(6, dtype=np.int64)
    for call in ("waitsome", "testsome", "testall", "waitany"):
        a, b = np.full(3, -1, np.int64), np.full(3, -1, np.int64)
        comm.send(x, RANK, tag=91)
        comm.send(long, RANK, tag=92)
        reqs = [comm.irecv_status(a, RANK, tag=91), comm.irecv_status(b, RANK, tag=92)]
        if call == "waitany":
            i, st = gpuwire.waitany(reqs)
            assert i == 0 and st.count == 3 and st.tag == 91, (i, st)
        err = None
        for _ in range(100000):
            try:
                getattr(gpuwire, call)(reqs)
            except gpuwire.Error as e:
                err = e
                break
        assert err is not None and err.code == gpuwire.ERROR_TRUNCATE and err.index == 1, (call, err)
        if call in ("waitsome", "testsome"):
            got = dict(err.completed)
            assert set(got) <= {0, 1} and 1 in got, (call, err.completed)
            assert got[1].error == gpuwire.ERROR_TRUNCATE, got[1]
            if 0 in got:
                assert got[0].error == gpuwire.SUCCESS and got[0].count == 3 and got[0].tag == 91, got[0]
        elif call == "testall":
            assert err.statuses[1].error == gpuwire.ERROR_TRUNCATE, err.statuses[1]
        while any(r.active() for r in reqs):
            gpuwire.waitall(reqs)
        assert (a == x).all() and (b == -1).all(), (a, b)
    comm.free()
