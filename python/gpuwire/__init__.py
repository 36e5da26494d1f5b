"""gpuwire for Python: communicators from mpi4py, buffers over any array's own memory.

`pip install ./python` (from a gpuwire checkout) installs this package; `make install` puts a
copy in PREFIX/share/gpuwire/python that loads PREFIX's library. The ctypes layer (_capi: every
constant, struct and function of gpuwire.h) is generated from the header by
scripts/gen-python.py; this file is the Pythonic layer:

    from mpi4py import MPI
    import numpy as np
    import gpuwire

    gpuwire.init()                            # adopts the MPI that mpi4py initialized
    with gpuwire.Comm(MPI.COMM_WORLD) as comm:  # through comm.py2f(), the Fortran handle
        x = np.full(8, comm.rank(), np.float64)
        comm.allreduce(x, op=gpuwire.SUM)     # in place; a CuPy array works the same on a GPU
    gpuwire.finalize()                        # before mpi4py finalizes MPI at exit

Arrays become buffers over their own memory, never a copy: NumPy arrays; device arrays with
__cuda_array_interface__ (CuPy, PyTorch CUDA tensors, Numba); any DLPack array (__dlpack__:
PyTorch CPU tensors, JAX, ...); any host array with __array_interface__; and buffer-protocol
objects (bytearray, array.array, memoryview of writable memory). A non-contiguous NumPy or
device array (a[:, 1], a[1:5:2, 2:]) becomes a strided buffer over its elements where they are
(gpuwire_buffer_wrap_strided: no copy; the operations pack and unpack it), as long as its strides
are non-negative whole elements (else it is refused with ValueError) and it has at most 4 axes
left that are not contiguous together (else gpuwire.Error INVALID_ARGUMENT); it is never copied,
so a nonblocking call can never send a
temporary (the copies to and from host arrays need contiguous arrays). So is a read-only
one, and one whose byte order is not the machine's (np.full(3, 1.0, '>f8') on x86 or ARM),
whose bytes gpuwire would otherwise reduce and send as native values: convert it first
(a.astype(a.dtype.newbyteorder('='))). Buffers and requests keep the arrays they use alive.
For device arrays the operations take the array's stream (CuPy's current stream) unless given
stream=.

Datatypes follow C's rules: a value of another datatype is refused (gpuwire.Error with
ERROR_DTYPE_MISMATCH, or ValueError for an element type gpuwire has not), never converted:
DArray.set_global(np.arange(4, dtype=np.int32)) on a float64 array is refused, as are a float
fill value for an integer array and a NumPy scalar of another dtype. Python ints, floats and
complex numbers are taken for the array's dtype where that is the same kind of number.

Freeing: gpuwire_comm_free is collective, and the garbage collector runs at different moments
on different ranks, so a Comm is freed only by free() or at the end of a `with` block, on every
rank. A Comm collected without free() is not freed: a ResourceWarning says so (shown with
python -W default::ResourceWarning or -X dev), and gpuwire.finalize() releases it. Buffers and
distributed arrays free locally (gpuwire_buffer_free, gpuwire_darray_free are not collective),
so the collector frees them; `with` frees them at once. A Request collected while pending is
cancelled (gpuwire_cancel: a receive whose message has not matched is withdrawn) and released
without blocking: what was not cancelled goes on, as after MPI_Request_free, its arrays kept
alive until it completes. `with comm.irecv(x, 0) as r:` waits for r at the end of the block
(cancels and releases it if the block raised).

NumPy views: Buffer.numpy() and DArray.numpy() view host memory (no copy) and keep it alive, also
past free(); gpuwire.finalize() releases the memory gpuwire allocated, so it refuses (gpuwire.Error
ERROR_INVALID_ARGUMENT, nothing finalized) while a view of such memory is alive: del them first.
numpy() after free() or finalize() raises gpuwire.Error (ERROR_INVALID_HANDLE,
ERROR_ALREADY_FINALIZED).

The library: see gpuwire._library (GPUWIRE_LIBRARY, the install prefix, pkg-config, sys.prefix,
the loader's path); gpuwire.LIBRARY says which was loaded. It must link the same MPI as mpi4py.

Distributed arrays: gpuwire.DArray(comm, shape, dtype, ...) owns a gpuwire_darray, with NumPy for
host data (set_global, allgather, gather, numpy()); examples-python/darray.py uses every method.

Errors raise gpuwire.Error with .code (the gpuwire_status) and the detailed message.
"""

import collections
import ctypes
import gc
import numbers
import sys
import threading
import warnings
import weakref
from ctypes import POINTER, c_double, c_int32, c_int64, c_uint64, c_void_p

from . import _library
from ._capi import *  # noqa: F401,F403  (every constant of gpuwire.h, and Config)
from ._capi import (BFLOAT16, COMPLEX64, COMPLEX128, DECIDE, ERROR_ALREADY_FINALIZED, ERROR_COMM_BROKEN, ERROR_COUNT_MISMATCH,
                    ERROR_DTYPE_MISMATCH, ERROR_INVALID_ARGUMENT, ERROR_NULL_ARGUMENT, ERROR_TIMEOUT, FLOAT16,
                    FLOAT32, FLOAT32_INT32, FLOAT64, FLOAT64_INT32, INT8, INT32, INT32_INT32, INT64, HALO_CORNERS, NORM_2, PARTITION_SCATTER, SPACE_AUTO, SPACE_DEVICE,
                    MAX, ORDER_C, SPACE_HOST, SUCCESS, SUM, UINT8, UINT32, UINT64, ANY_SOURCE, ANY_TAG, Config, StatusT,
                    ERROR_INVALID_HANDLE, _handle)

# What a call raises when one of its arguments is refused before the C function runs: an integer
# that does not fit its C type (`_library._checking`), a value ctypes cannot convert.
_UNCONVERTED = (OverflowError, ctypes.ArgumentError)

# NumPy/CuPy dtype names (numpy.dtype(...).name) -> gpuwire datatypes.
_DTYPES = {
    "int8": INT8,
    "uint8": UINT8,
    "int32": INT32,
    "uint32": UINT32,
    "int64": INT64,
    "uint64": UINT64,
    "float16": FLOAT16,
    "float32": FLOAT32,
    "float64": FLOAT64,
    "complex64": COMPLEX64,
    "complex128": COMPLEX128,
}
# __cuda_array_interface__ / __array_interface__ typestr (without the byte order) -> gpuwire datatypes.
_TYPESTRS = {"i1": INT8, "u1": UINT8, "i4": INT32, "u4": UINT32, "i8": INT64, "u8": UINT64,
             "f2": FLOAT16, "f4": FLOAT32, "f8": FLOAT64, "c8": COMPLEX64, "c16": COMPLEX128}

# The (value, index) pair datatypes of MINLOC/MAXLOC: (value format, itemsize) of their C layouts.
_PAIRS = {FLOAT32_INT32: ("f4", 8), FLOAT64_INT32: ("f8", 16), INT32_INT32: ("i4", 8)}


def pair_dtype(datatype):
    """The NumPy structured dtype of a pair datatype (FLOAT32_INT32, FLOAT64_INT32, INT32_INT32, as
    MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_2INT): fields "value" and "index" (int32) with the C struct's
    layout (float64_int32: 16 bytes, padding after the index). Arrays of it are buffers like any other."""
    import numpy

    if datatype not in _PAIRS:
        raise ValueError(f"gpuwire: {datatype} is not a pair datatype (FLOAT32_INT32, FLOAT64_INT32, INT32_INT32)")
    return numpy.dtype([("value", _PAIRS[datatype][0]), ("index", "i4")], align=True)


def _pair_of(dt):
    """The pair datatype of a NumPy structured dtype with its C layout (any field names), or None."""
    if dt.fields is None or len(dt.names) != 2:
        return None
    (v, vo), (i, io) = (dt.fields[n][:2] for n in dt.names)
    for code, (fmt, size) in _PAIRS.items():
        if (v.str[1:] == fmt and i.str[1:] == "i4" and v.isnative and i.isnative and vo == 0 and io == v.itemsize
                and dt.itemsize == size):
            return code
    return None


lib, LIBRARY = _library.load()

# ---- errors ------------------------------------------------------------------------------------


def status_string(code):
    """The static description of a status code."""
    return lib.gpuwire_status_string(code).decode()


def last_error():
    """The calling thread's last detailed error message."""
    buf = ctypes.create_string_buffer(1024)
    if lib.gpuwire_last_error(buf, len(buf)) != SUCCESS:
        return ""
    return buf.value.decode(errors="replace")


class Error(Exception):
    """A failed gpuwire call: .code is the gpuwire_status, the message gpuwire's.

    From the calls on several requests, what the C call wrote before it returned the error (the
    other requests' outcomes are not lost with it): .index, the index of the request that failed
    (waitany, testany, testall, waitsome, testsome, as C++'s error::index(); UNDEFINED where no
    request is named, and from every other call); from waitsome and testsome .completed, the
    [(index, StatusT)] of every request that completed or failed in the call (each released, the
    failed one's StatusT.error its error), as their return value; from testall .statuses, a
    StatusT per request (all of them when every request completed; else those that failed, the
    rest empty)."""

    def __init__(self, code, message, index=UNDEFINED):
        super().__init__(f"{message} (status {code}: {status_string(code)})")
        self.code = code
        self.index = index


def _check(st, **details):
    """Raises the call's error (its `details` as attributes, see Error); first, as after every
    call, tests the requests released while in flight (_reap: their arrays let go once complete,
    a receive into a view unpacked)."""
    e = Error(st, last_error()) if st != SUCCESS else None
    if _DETACHED:
        _reap()
    if e is not None:
        for k, v in details.items():
            setattr(e, k, v)
        raise e


def _out(ctype, fn, *args):
    v = ctype()
    _check(fn(*args, ctypes.byref(v)))
    return v.value


# ---- library -----------------------------------------------------------------------------------


def init():
    """gpuwire_init (adopts MPI when mpi4py initialized it)."""
    _check(lib.gpuwire_init())


def finalize():
    """gpuwire_finalize: call it before MPI is finalized (mpi4py does that at exit). It releases
    every handle and the memory gpuwire allocated (Buffer.alloc, DArray), so it refuses while a
    NumPy array from Buffer.numpy() or DArray.numpy() over such memory (or a view of one) is
    alive: gpuwire.Error ERROR_INVALID_ARGUMENT, nothing finalized; delete those arrays (or keep
    copies, a.copy()) and call it again. Arrays over the program's memory (Buffer.wrap,
    DArray.wrap) do not count: finalize leaves that memory alone. Requests still in flight (not
    waited for, tested to completion or freed) are given up and their memory kept: finalize then
    completes and raises gpuwire.Error ERROR_INVALID_ARGUMENT saying how many (gpuwire_finalize)."""
    if _VIEWS:
        gc.collect()  # arrays left in reference cycles are gone, the same on every rank
    if _VIEWS:
        raise Error(ERROR_INVALID_ARGUMENT, f"gpuwire.finalize: {len(_VIEWS)} NumPy array(s) from Buffer.numpy() or "
                                            "DArray.numpy() (or views of them) still use memory that gpuwire "
                                            "allocated, which finalize releases: delete them (del a) or keep copies "
                                            "(a.copy()) first; nothing was finalized")
    # Requests released while in flight: freed in C (their operations go on, as after
    # MPI_Request_free, and gpuwire_finalize leaves them to MPI), their arrays kept for good.
    while _DETACHED:
        h, keep = _DETACHED.popleft()
        lib.gpuwire_request_free(ctypes.byref(h))
        if keep is not None:
            _ABANDONED.append(keep)
    _check(lib.gpuwire_finalize())


def initialized():
    return _out(c_int32, lib.gpuwire_initialized) != 0


def query_thread():
    return _out(c_int32, lib.gpuwire_query_thread)


def owns_mpi():
    return _out(c_int32, lib.gpuwire_owns_mpi) != 0


def version():
    v = [c_int32(), c_int32(), c_int32()]
    _check(lib.gpuwire_get_version(*(ctypes.byref(x) for x in v)))
    return tuple(x.value for x in v)


def dtype_size(dtype):
    return _out(c_int64, lib.gpuwire_dtype_size, dtype)


def config_init():
    """A Config with the defaults and GPUWIRE_* environment variables."""
    cfg = Config()
    _check(lib.gpuwire_config_init(ctypes.byref(cfg)))
    return cfg


# ---- buffers -----------------------------------------------------------------------------------


def _int64s(values, least=0, what="counts"):
    """A C int64_t array of `values` (at least `least` entries), refusing an integer it cannot
    hold, Python's or NumPy's, with OverflowError naming `what` and the entry (ctypes would keep
    its low bits: a count of 2**64 became 0, one of np.uint64(2**64 - 1) became -1)."""
    values = list(values)
    for i, v in enumerate(values):
        n = _library.integer(v)
        if n is not None and not -(1 << 63) <= n < (1 << 63):
            raise OverflowError(f"{what}[{i}] = {n} does not fit int64_t")
    return (c_int64 * max(len(values), least))(*values)


def _contiguous(shape, strides, itemsize):
    """Whether strides (in bytes; None = C order) lay the shape out without gaps in C order, the
    order of a buffer's elements (sizes-1 axes and empty arrays have any stride). A Fortran-ordered
    array is not: its elements would go in memory order, transposed."""
    if strides is None or any(n == 0 for n in shape):
        return True
    want = itemsize
    for n, s in reversed([(n, s) for n, s in zip(shape, strides) if n != 1]):
        if s != want:
            return False
        want *= n
    return True


def _count(shape):
    count = 1
    for n in shape:
        count *= int(n)
    return count


_NOT_CONTIGUOUS = ("gpuwire: the array is not contiguous (a section such as a[:, 1]?); a buffer must be the "
                   "array's own memory: make a contiguous copy (numpy.ascontiguousarray) and keep it alive")
_READ_ONLY = ("gpuwire: the array is read-only (a buffer may be received into); a NumPy scalar is too: pass an "
              "array, e.g. numpy.array([x])")


def _from_typestr(typestr):
    _check_byte_order(typestr[0], typestr)
    if typestr[1:] not in _TYPESTRS:
        raise ValueError(f"gpuwire: unsupported element type {typestr}")
    return _TYPESTRS[typestr[1:]]


# DLPack (dlpack.h): the C structs a __dlpack__ capsule ("dltensor") points to.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int32), ("dtype", _DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
# (type code, bits) -> gpuwire datatype: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex.
_DL_DTYPES = {(0, 8): INT8, (0, 32): INT32, (0, 64): INT64, (1, 8): UINT8, (1, 32): UINT32, (1, 64): UINT64,
              (2, 16): FLOAT16, (2, 32): FLOAT32, (2, 64): FLOAT64, (4, 16): BFLOAT16, (5, 64): COMPLEX64,
              (5, 128): COMPLEX128}


def _describe_dlpack(array):
    """A DLPack array through its legacy "dltensor" capsule, read and left unconsumed: the
    capsule's deleter releases the export, the memory stays the array's (kept alive)."""
    device_type, _ = array.__dlpack_device__()
    if device_type == _DL_CUDA:
        capsule = array.__dlpack__(stream=1)  # ordered with the legacy default stream, which gpuwire uses
    else:
        capsule = array.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(capsule, b"dltensor"))  # the DLManagedTensor starts with its DLTensor
    if t.dtype.lanes != 1 or (t.dtype.code, t.dtype.bits) not in _DL_DTYPES:
        raise ValueError(f"gpuwire: unsupported DLPack element type (code {t.dtype.code}, {t.dtype.bits} bits, "
                         f"{t.dtype.lanes} lanes)")
    itemsize = t.dtype.bits // 8
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = [t.strides[i] * itemsize for i in range(t.ndim)] if t.strides else None
    if not _contiguous(shape, strides, itemsize):
        raise ValueError(_NOT_CONTIGUOUS)
    if t.device.device_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        raise ValueError(f"gpuwire: a DLPack array on device type {t.device.device_type} (neither host nor CUDA)")
    ptr = (t.data or 0) + t.byte_offset
    device = t.device.device_type in (_DL_CUDA, _DL_CUDA_MANAGED)
    return ptr, _count(shape), _DL_DTYPES[(t.dtype.code, t.dtype.bits)], device, None, array


_FORMATS = {"b": "i", "h": "i", "i": "i", "l": "i", "q": "i", "B": "u", "H": "u", "I": "u", "L": "u", "Q": "u",
            "e": "f", "f": "f", "d": "f", "Zf": "c", "Zd": "c"}


def _describe_buffer(array):
    """A buffer-protocol object (bytearray, array.array, memoryview, ...): the memoryview is kept,
    so that the object cannot be resized while gpuwire uses its memory."""
    try:
        mv = memoryview(array)
    except TypeError:
        raise TypeError(f"gpuwire: {type(array).__name__} is not an array: expected a NumPy array, a "
                        "__cuda_array_interface__, DLPack or __array_interface__ array, or a buffer") from None
    if mv.readonly:
        raise ValueError(_READ_ONLY)
    if not mv.c_contiguous:
        # A Fortran-ordered memoryview too: ctypes takes only C-contiguous exported memory.
        raise ValueError(_NOT_CONTIGUOUS)
    fmt = mv.format
    order = "="
    if fmt[:1] in "@=<>!":
        order, fmt = fmt[0], fmt[1:]
    kind = _FORMATS.get(fmt)
    if kind is None:
        raise ValueError(f"gpuwire: unsupported buffer format {mv.format!r}")
    _check_byte_order({"@": "=", "!": ">"}.get(order, order), mv.format)
    dtype = _from_typestr("|" + kind + str(mv.itemsize))
    ptr = ctypes.addressof(ctypes.c_char.from_buffer(mv)) if mv.nbytes else 0
    return ptr, mv.nbytes // mv.itemsize, dtype, False, None, mv


class _Strided(ValueError):
    """A non-contiguous array (raised by _describe_array): its layout, for a strided buffer."""

    def __init__(self, ptr, shape, strides, itemsize, dtype, device, stream, keep):
        super().__init__(_NOT_CONTIGUOUS)
        self.ptr, self.shape, self.strides, self.itemsize = ptr, tuple(shape), tuple(strides), itemsize
        self.dtype, self.device, self.stream, self.keep = dtype, device, stream, keep

    def layout(self):
        """(lens, strides in elements), the first axis fastest (gpuwire_buffer_wrap_strided's
        order: NumPy's axes reversed). Axes of length 1 are left out: they move no element (and
        their strides may be anything), and wrap_strided takes at most 15 axes."""
        axes = [(int(n), s) for n, s in zip(self.shape, self.strides) if int(n) != 1] or [(1, self.itemsize)]
        for _, s in axes:
            if s < 0 or s % self.itemsize:
                raise ValueError(f"gpuwire: the array's strides {self.strides} (bytes) are not non-negative "
                                 f"multiples of its element size {self.itemsize}: it cannot be a strided buffer")
        return [n for n, _ in axes[::-1]], [s // self.itemsize for _, s in axes[::-1]]


def _describe_array(array):
    """(address, element count, gpuwire datatype, is_device, stream, object to keep alive) of a
    contiguous array, without copying it."""
    cai = getattr(array, "__cuda_array_interface__", None)
    if cai is not None:  # CuPy, PyTorch, Numba: device memory
        dtype = _from_typestr(cai["typestr"])
        itemsize = int(cai["typestr"][2:])
        if cai["data"][1]:
            raise ValueError(_READ_ONLY)
        ptr = array.data.ptr if hasattr(array, "data") and hasattr(array.data, "ptr") else cai["data"][0]
        stream = cai.get("stream")  # CUDA Array Interface v3: 1 = legacy, 2 = per-thread default
        if stream in (None, 0, 1):
            stream = None  # the legacy default stream, which gpuwire takes as NULL
        if not _contiguous(cai["shape"], cai.get("strides"), itemsize):
            raise _Strided(ptr, cai["shape"], cai["strides"], itemsize, dtype, True, stream, array)
        return ptr, _count(cai["shape"]), dtype, True, stream, array
    flags = getattr(array, "flags", None)
    if flags is not None and not getattr(flags, "writeable", True):
        # Read-only NumPy arrays, and NumPy scalars (immutable; their array interface points at a
        # temporary copy that is freed at once).
        raise ValueError(_READ_ONLY)
    if flags is not None and hasattr(array, "ctypes") and hasattr(array, "dtype"):  # NumPy
        if not flags.writeable:
            raise ValueError(_READ_ONLY)
        if not array.dtype.isnative:
            _check_byte_order(array.dtype.byteorder, array.dtype.str)
        name = array.dtype.name
        code = _pair_of(array.dtype)
        if code is None:
            if name not in _DTYPES:
                raise ValueError(f"gpuwire: unsupported dtype {name}")
            code = _DTYPES[name]
        if not flags.c_contiguous:
            # Fortran-ordered arrays too: their elements in C order (the array's index order), as
            # any view's, never their memory order.
            raise _Strided(array.ctypes.data, array.shape, array.strides, array.dtype.itemsize, code, False, None, array)
        return array.ctypes.data, array.size, code, False, None, array
    if hasattr(array, "__dlpack__") and hasattr(array, "__dlpack_device__"):  # PyTorch CPU, JAX, ...
        return _describe_dlpack(array)
    ai = getattr(array, "__array_interface__", None)
    if ai is not None:  # host memory
        dtype = _from_typestr(ai["typestr"])
        if not _contiguous(ai["shape"], ai.get("strides"), int(ai["typestr"][2:])):
            raise ValueError(_NOT_CONTIGUOUS)
        if ai["data"][1]:
            raise ValueError(_READ_ONLY)
        return ai["data"][0] + ai.get("offset", 0), _count(ai["shape"]), dtype, False, None, array
    return _describe_buffer(array)


_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"


def _check_byte_order(order, typestr):
    """Refuses an element type whose byte order ('<', '>'; '|' and '=' are native) is not this
    machine's: its bytes would be reduced and sent as native values."""
    if order not in ("|", "=", _NATIVE_ORDER):
        raise ValueError(_byte_order_message(typestr))


def _byte_order_message(typestr):
    """Why an array of elements `typestr` in the other byte order than this machine's is refused."""
    other = "little" if sys.byteorder == "big" else "big"
    return (f"gpuwire: the array's elements ({typestr}) are in {other}-endian byte order, not this machine's "
            f"({sys.byteorder}-endian): gpuwire would reduce and send their bytes as native values. Convert it "
            f"first: a.astype(a.dtype.newbyteorder('='))")


# The views that arrays from numpy() hold (_numpy_over), those over memory gpuwire allocated,
# which finalize releases: a view leaves the set when the last array over it is collected.
_VIEWS = weakref.WeakSet()


def _usable(handle, count, what, kind):
    """Refuses a freed handle, or any once gpuwire is finalized (finalize released the memory
    gpuwire allocated), with gpuwire.Error naming `what`, before any memory is touched; else the
    element count (`count`: gpuwire_buffer_count or gpuwire_darray_local_len)."""
    if not handle:
        raise Error(ERROR_INVALID_HANDLE, f"{what}: the {kind} was freed (free(), or the end of its `with` block)")
    n = c_int64()
    st = count(handle, ctypes.byref(n))
    if st == ERROR_ALREADY_FINALIZED:
        raise Error(st, f"{what}: gpuwire is finalized (gpuwire.finalize(), or MPI was finalized): the {kind} is "
                        "invalid, and the memory gpuwire allocated is released")
    _check(st)
    return n.value


def _numpy_over(pin, nbytes, dt):
    """A NumPy array of `dt` over the `nbytes` bytes of buffer `pin`, a view that only the array
    holds: the array keeps it, and so the memory, alive (a gpuwire view shares its original's
    memory past the original's free); finalize refuses while it lives over gpuwire's memory."""
    import numpy

    raw = (ctypes.c_char * nbytes).from_address(pin.pointer())
    raw._owner = pin  # the array's base: the view lives as long as the array (and its own views)
    if pin.owned():
        _VIEWS.add(pin)
    return numpy.frombuffer(raw, dtype=dt)


def _stream_ptr(stream):
    if stream is None:
        return None
    return getattr(stream, "ptr", stream)  # a cupy.cuda.Stream or an integer CUstream


class Buffer:
    """Owns a gpuwire_buffer handle; keeps the array it wraps (or its parent) alive."""

    def __init__(self, handle, keep=None, stream=None):
        self.handle = handle
        self._keep = keep
        self.stream = stream  # the default stream of operations on this buffer

    @classmethod
    def alloc(cls, count, dtype, space=SPACE_HOST, device=-1):
        return cls(_out(_handle, lib.gpuwire_buffer_alloc, count, dtype, space, device))

    @classmethod
    def wrap(cls, array, space=SPACE_AUTO):
        """A buffer over a NumPy or CuPy array's own memory (no copy); of a non-contiguous one, a
        strided buffer over its elements in C order (gpuwire_buffer_wrap_strided)."""
        try:
            ptr, count, dtype, _device, stream, keep = _describe_array(array)
        except _Strided as st:
            lens, strides = st.layout()
            stream = st.stream if st.stream is not None or not st.device else _cupy_current_stream()
            h = _out(_handle, lib.gpuwire_buffer_wrap_strided, st.ptr, len(lens), (c_int64 * len(lens))(*lens),
                     (c_int64 * len(lens))(*strides), st.dtype, space)
            return cls(h, keep=st.keep, stream=stream)
        if stream is None and _device:
            stream = _cupy_current_stream()
        return cls(_out(_handle, lib.gpuwire_buffer_wrap, ptr, count, dtype, space), keep=keep, stream=stream)

    def view(self, offset, count):
        return Buffer(_out(_handle, lib.gpuwire_buffer_view, self.handle, offset, count), keep=self, stream=self.stream)

    def view_strided(self, offset, count, blocklen, stride):
        """count blocks of blocklen elements, block i at element offset + i * stride, as
        MPI_Type_vector (gpuwire_buffer_view_strided)."""
        return Buffer(_out(_handle, lib.gpuwire_buffer_view_strided, self.handle, offset, count, blocklen, stride),
                      keep=self, stream=self.stream)

    def view_subarray(self, sizes, subsizes, starts, order=ORDER_C):
        """The subsizes block at starts of an array of sizes from the first element, as
        MPI_Type_create_subarray (gpuwire_buffer_view_subarray)."""
        n = len(sizes)
        if len(subsizes) != n or len(starts) != n:
            raise ValueError("gpuwire_buffer_view_subarray: sizes, subsizes and starts differ in length")
        arr = [_int64s(v, 1, "gpuwire_buffer_view_subarray: " + w)
               for v, w in ((sizes, "sizes"), (subsizes, "subsizes"), (starts, "starts"))]
        return Buffer(_out(_handle, lib.gpuwire_buffer_view_subarray, self.handle, n, arr[0], arr[1], arr[2], order),
                      keep=self, stream=self.stream)

    def copy_from_host(self, array, stream=None):
        ptr, count, dtype, device, _, _ = _describe_array(array)
        self._check_shape(count, dtype, device, "gpuwire_buffer_copy_from_host")
        _check(lib.gpuwire_buffer_copy_from_host(self.handle, ptr, _stream_ptr(stream or self.stream)))

    def copy_to_host(self, array, stream=None):
        ptr, count, dtype, device, _, _ = _describe_array(array)
        self._check_shape(count, dtype, device, "gpuwire_buffer_copy_to_host")
        _check(lib.gpuwire_buffer_copy_to_host(self.handle, ptr, _stream_ptr(stream or self.stream)))

    def _check_shape(self, count, dtype, device, what):
        if device:
            raise ValueError(f"{what}: the array must be in host memory")
        if dtype != self.dtype():
            raise Error(ERROR_DTYPE_MISMATCH, f"{what}: the array's datatype is not the buffer's")
        if count != self.count():
            raise Error(ERROR_COUNT_MISMATCH, f"{what}: the array has {count} elements, the buffer {self.count()}")

    def pointer(self):
        return _out(c_void_p, lib.gpuwire_buffer_pointer, self.handle) or 0

    def count(self):
        return _out(c_int64, lib.gpuwire_buffer_count, self.handle)

    def dtype(self):
        return _out(c_int32, lib.gpuwire_buffer_dtype, self.handle)

    def space(self):
        return _out(c_int32, lib.gpuwire_buffer_space, self.handle)

    def device(self):
        return _out(c_int32, lib.gpuwire_buffer_device, self.handle)

    def owned(self):
        return _out(c_int32, lib.gpuwire_buffer_owned, self.handle) != 0

    def contiguous(self):
        """Whether the elements are consecutive (gpuwire_buffer_contiguous): not a strided or
        subarray view."""
        return _out(c_int32, lib.gpuwire_buffer_contiguous, self.handle) != 0

    def numpy(self):
        """A NumPy array over a host buffer's memory (no copy: writes go to the buffer). The
        array keeps that memory alive, past free() too (the buffer's, or its DArray's): memory of
        gpuwire_buffer_alloc is released once it is freed and no such array is left. Not past
        gpuwire.finalize(), which releases it: finalize refuses while an array over memory
        gpuwire allocated is alive (one over a wrapped array's memory is the program's, and may
        stay). Called after free() or finalize(), raises gpuwire.Error ERROR_INVALID_HANDLE or
        ERROR_ALREADY_FINALIZED."""
        import numpy

        names = {v: k for k, v in _DTYPES.items()}
        n = _usable(self.handle, lib.gpuwire_buffer_count, "gpuwire.Buffer.numpy", "buffer")
        d = self.dtype()
        if self.space() == SPACE_DEVICE:
            raise ValueError("gpuwire: a device buffer has no NumPy view")
        if not self.contiguous():
            raise ValueError("gpuwire: a strided or subarray view's elements are not consecutive: it has no NumPy "
                             "view over them (copy_to_host gives them)")
        if d in _PAIRS:
            dt = pair_dtype(d)
        elif d in names:
            dt = numpy.dtype(names[d])
        else:
            raise ValueError(f"gpuwire: datatype {d} has no NumPy dtype")
        if n == 0:
            return numpy.empty(0, dtype=dt)
        pin = Buffer(_out(_handle, lib.gpuwire_buffer_view, self.handle, 0, n), keep=self)
        return _numpy_over(pin, n * dt.itemsize, dt)

    def free(self):
        """gpuwire_buffer_free. The array (or parent) stays referenced until this object is
        collected: a request or a view that holds this object may still use its memory."""
        if self.handle:
            h, self.handle = self.handle, 0
            _check(lib.gpuwire_buffer_free(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        if getattr(self, "handle", 0) and lib is not None:
            try:
                lib.gpuwire_buffer_free(self.handle)
            except Exception:
                pass


def _cupy_current_stream():
    try:
        import cupy

        ptr = cupy.cuda.get_current_stream().ptr
        return ptr or None
    except Exception:
        return None


def _as_buffer(x):
    """(Buffer, whether it was made for this call) for a Buffer, an array or None."""
    if x is None:
        return None, False
    if isinstance(x, Buffer):
        return x, False
    return Buffer.wrap(x), True


def _one_buffer(x):
    """_as_buffer of an argument that must be given (TypeError for None)."""
    if x is None:
        raise TypeError("gpuwire: expected an array or a gpuwire.Buffer, got None")
    return _as_buffer(x)


# Buffers that blocking operations wrapped inside this thread's open group (`with group():`):
# the operations start at the outermost end, so the arrays must live until then.
_GROUP = threading.local()


def _done(b):
    """Frees a buffer a blocking operation wrapped for its call, or, inside a group, keeps it
    (and its array) until the group ends."""
    held = getattr(_GROUP, "held", None)
    if held is not None:
        held.append(b)
    else:
        b.free()


# Arrays of requests abandoned (a timeout, a broken communicator) or left in flight at finalize:
# MPI may still read or write them.
_ABANDONED = []

# Requests released (free(), or collected) while their operation was in flight: it goes on, as
# after MPI_Request_free, and its arrays stay referenced until a later look (_reap, after every
# call of the package) finds it complete.
_DETACHED = collections.deque()


def _reap():
    """Tests each detached request once; lets go of the arrays of those that completed."""
    for _ in range(len(_DETACHED)):
        try:
            h, keep = _DETACHED.popleft()
        except IndexError:
            return
        flag = c_int32()
        st = lib.gpuwire_test(ctypes.byref(h), ctypes.byref(flag))
        if (st == SUCCESS and not flag.value) or st == ERROR_INVALID_ARGUMENT:
            _DETACHED.append((h, keep))  # pending, or refused: its group has not ended yet
        elif st in (ERROR_TIMEOUT, ERROR_COMM_BROKEN):
            _ABANDONED.append(keep)
        elif st not in (SUCCESS, ERROR_ALREADY_FINALIZED):
            warnings.warn(f"gpuwire: a released request failed: {last_error()}", RuntimeWarning, stacklevel=2)


class Request:
    """A nonblocking operation; keeps its buffer alive until it completes. Collected while still
    pending, it is cancelled (gpuwire_cancel: a receive whose message has not matched is
    withdrawn) and released without blocking; what was not cancelled goes on, as after
    MPI_Request_free, its arrays kept alive until it completes."""

    def __init__(self, handle, keep):
        self.handle = _handle(handle)
        self._keep = keep
        if _DETACHED:
            _reap()

    def _release(self):
        """Releases the request: one still in flight goes on, as after MPI_Request_free (a send, a
        receive, a nonblocking collective): it joins _DETACHED with its arrays, which a later
        look lets go once it completed. Returns the status (of the completion, where the test
        found it complete)."""
        flag = c_int32()
        st = lib.gpuwire_test(ctypes.byref(self.handle), ctypes.byref(flag))
        if st != SUCCESS or flag.value:
            self._settle(st)
            return st
        _DETACHED.append((self.handle, self._keep))
        self.handle, self._keep = _handle(0), None
        return SUCCESS

    def _settle(self, st):
        """After a call that may have finished the request (its handle is then NULL): its array is
        let go, unless the call abandoned the operation (TIMEOUT, COMM_BROKEN: MPI may still
        write it when a late peer arrives), which keeps the array alive for good."""
        if not self.handle.value and self._keep is not None:
            if st in (ERROR_TIMEOUT, ERROR_COMM_BROKEN):
                _ABANDONED.append(self._keep)
            self._keep = None

    def wait(self):
        st = lib.gpuwire_wait(ctypes.byref(self.handle))
        self._settle(st)
        _check(st)

    def test(self):
        flag = c_int32()
        st = lib.gpuwire_test(ctypes.byref(self.handle), ctypes.byref(flag))
        self._settle(st)
        _check(st)
        return flag.value != 0

    def wait_status(self):
        """gpuwire_wait_status: waits; what its receive matched (a StatusT: source, tag, count)."""
        st = StatusT()
        rc = lib.gpuwire_wait_status(ctypes.byref(self.handle), ctypes.byref(st))
        self._settle(rc)
        _check(rc)
        return st

    def test_status(self):
        """gpuwire_test_status: (completed, StatusT or None)."""
        flag, st = c_int32(), StatusT()
        rc = lib.gpuwire_test_status(ctypes.byref(self.handle), ctypes.byref(flag), ctypes.byref(st))
        self._settle(rc)
        _check(rc)
        return flag.value != 0, (st if flag.value else None)

    def active(self):
        return self.handle.value != 0

    def free(self):
        """Releases the request (as gpuwire_request_free, MPI_Request_free): its operation, if
        still in flight, goes on (a receive takes its message when it comes). The package keeps
        its handle and arrays and tests it after every later call of the package, which lets
        the arrays go once it completed (and unpacks a receive into a strided view then)."""
        if not self.handle.value:
            return
        _check(self._release())

    def cancel(self):
        """gpuwire_cancel (MPI_Cancel): a receive whose message has not matched is withdrawn (its
        array not written) and completes at once, its status's `cancelled` 1; anything else
        completes as it would have. Wait for, test or free the request afterwards."""
        if self.handle.value:
            _check(lib.gpuwire_cancel(ctypes.byref(self.handle)))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        """Waits for the request; after an exception in the block, cancels and frees it instead
        (a receive whose message has not matched is withdrawn; anything else goes on)."""
        if exc_type is None:
            self.wait()
        elif self.handle.value:
            try:
                self.cancel()
                self.free()
            except Error:
                pass  # the block's exception is the one to see

    def __del__(self):
        if getattr(self, "handle", None) is None or not self.handle.value or lib is None:
            return
        try:
            lib.gpuwire_cancel(ctypes.byref(self.handle))
            st = self._release()
            if st == ERROR_INVALID_ARGUMENT and self.handle.value:
                # Refused: a request of a group that has not ended. Its operation starts at the
                # group's end, so its arrays wait in _DETACHED until a later look finds it complete.
                _DETACHED.append((self.handle, self._keep))
            elif st in (ERROR_TIMEOUT, ERROR_COMM_BROKEN):
                warnings.warn(f"gpuwire.Request collected while pending: it failed ({last_error()}); wait() for "
                              "requests before dropping them", ResourceWarning, stacklevel=2)
        except Exception:
            pass


def waitall(requests):
    """gpuwire_waitall over a list of Request: all are completed (NULL) afterwards, unless the
    call was refused (the same request twice, inside a group: the requests are left as they
    were)."""
    arr = _request_array(requests)
    st = lib.gpuwire_waitall(len(requests), arr)
    _back(requests, arr, st)
    _check(st)


def _request_array(requests):
    return (_handle * max(len(requests), 1))(*(r.handle.value for r in requests))


def _back(requests, arr, st):
    """The handles the C call left, and what becomes of the arrays of those it finished (one
    that TIMEOUT or COMM_BROKEN may have abandoned among them keeps its array for good: the
    call's status does not say which)."""
    for r, h in zip(requests, arr):
        r.handle.value = h
        r._settle(st)


def waitany(requests):
    """gpuwire_waitany: waits until one request completes; (its index, its StatusT). The index is
    UNDEFINED when every request is already complete (NULL)."""
    arr, index, st = _request_array(requests), c_int32(), StatusT()
    rc = lib.gpuwire_waitany(len(requests), arr, ctypes.byref(index), ctypes.byref(st))
    _back(requests, arr, rc)
    _check(rc, index=index.value)
    return index.value, st


def testany(requests):
    """gpuwire_testany: (completed, index, StatusT); completed with index UNDEFINED when every
    request is NULL."""
    arr, index, flag, st = _request_array(requests), c_int32(), c_int32(), StatusT()
    rc = lib.gpuwire_testany(len(requests), arr, ctypes.byref(index), ctypes.byref(flag), ctypes.byref(st))
    _back(requests, arr, rc)
    _check(rc, index=index.value)
    return flag.value != 0, index.value, st


def testall(requests):
    """gpuwire_testall: (all completed, [StatusT per request] or None). A request that failed
    raises gpuwire.Error with .index naming it and .statuses (see Error)."""
    arr, flag = _request_array(requests), c_int32()
    sts = (StatusT * max(len(requests), 1))()
    rc = lib.gpuwire_testall(len(requests), arr, ctypes.byref(flag), sts)
    _back(requests, arr, rc)
    statuses = list(sts)[:len(requests)]
    _check(rc, index=next((i for i, s in enumerate(statuses) if s.error != SUCCESS), UNDEFINED), statuses=statuses)
    return flag.value != 0, (statuses if flag.value else None)


def _some(fn, requests):
    arr, out = _request_array(requests), c_int32()
    idx, sts = (c_int32 * max(len(requests), 1))(), (StatusT * max(len(requests), 1))()
    rc = fn(len(requests), arr, ctypes.byref(out), idx, sts)
    _back(requests, arr, rc)
    done = [(idx[k], sts[k]) for k in range(max(out.value, 0))]
    _check(rc, index=next((i for i, s in done if s.error != SUCCESS), UNDEFINED), completed=done)
    if out.value == UNDEFINED:
        return None
    return done


def waitsome(requests):
    """gpuwire_waitsome: waits until at least one request completes; [(index, StatusT)] of every
    request that has completed by then, in list order; None when every request is already
    complete (NULL). A request that failed is among them: gpuwire.Error is raised, with .index
    naming it and .completed the whole list (see Error)."""
    return _some(lib.gpuwire_waitsome, requests)


def testsome(requests):
    """gpuwire_testsome: as waitsome without blocking ([] when none has completed)."""
    return _some(lib.gpuwire_testsome, requests)


class group:
    """Operations started together (gpuwire_group_start / gpuwire_group_end, as ncclGroupStart/End):
    every operation this thread issues inside `with gpuwire.group():` starts at the end of the
    outermost block (groups nest), so sends and receives to many peers cannot deadlock on their
    order. Blocking forms inside return at once (host data in place when the block ends; the
    arrays they wrapped are kept alive until then); requests of nonblocking forms may be waited
    for after it. The end's error (the first of the
    group's operations) is raised, unless the block is left by an exception."""

    def __enter__(self):
        _check(lib.gpuwire_group_start())
        depth = getattr(_GROUP, "depth", 0)
        if depth == 0:
            _GROUP.held = []
        _GROUP.depth = depth + 1
        return self

    def __exit__(self, exc_type, *exc):
        st = lib.gpuwire_group_end()
        _GROUP.depth -= 1
        if _GROUP.depth == 0:
            held, _GROUP.held = _GROUP.held, None
            for b in held:  # the group's operations have started and, for blocking forms, ended
                b.free()
            if _DETACHED:
                _reap()
        if exc_type is None:
            _check(st)


def group_depth():
    """How deep this thread's groups are nested (gpuwire_group_depth): 0 outside a group."""
    d = c_int32()
    _check(lib.gpuwire_group_depth(ctypes.byref(d)))
    return d.value


# ---- communicators -----------------------------------------------------------------------------


class Comm:
    """Owns a gpuwire_comm. Comm() is MPI_COMM_WORLD; Comm(mpi4py_comm) goes through py2f().
    Operations take Buffer objects or arrays (wrapped for the call). Freed (collectively) only by
    free() or at the end of a `with` block; collected unfreed, it warns and is left to finalize()."""

    def __init__(self, mpi_comm=None, config=None, handle=None):
        cfg = ctypes.byref(config) if config is not None else None
        if handle is not None:
            self.handle = handle
        elif mpi_comm is None:
            self.handle = _out(_handle, lib.gpuwire_comm_world, cfg)
        else:
            fint = mpi_comm.py2f() if hasattr(mpi_comm, "py2f") else int(mpi_comm)
            self.handle = _out(_handle, lib.gpuwire_comm_create, fint, cfg)

    def rank(self):
        return _out(c_int32, lib.gpuwire_comm_rank, self.handle)

    def size(self):
        return _out(c_int32, lib.gpuwire_comm_size, self.handle)

    def local_rank(self):
        return _out(c_int32, lib.gpuwire_comm_local_rank, self.handle)

    def local_size(self):
        return _out(c_int32, lib.gpuwire_comm_local_size, self.handle)

    def backend(self):
        return _out(c_int32, lib.gpuwire_comm_backend, self.handle)

    def device(self):
        return _out(c_int32, lib.gpuwire_comm_device, self.handle)

    def mpi(self):
        """The Fortran handle of gpuwire's own duplicate (mpi4py: MPI.Comm.f2py(h))."""
        return _out(c_int32, lib.gpuwire_comm_mpi, self.handle)

    def describe(self):
        buf = ctypes.create_string_buffer(4096)
        _check(lib.gpuwire_comm_describe(self.handle, buf, len(buf)))
        return buf.value.decode(errors="replace")

    def split(self, color, key):
        h = _out(_handle, lib.gpuwire_comm_split, self.handle, color, key)
        return Comm(handle=h) if h else None

    def dup(self):
        return Comm(handle=_out(_handle, lib.gpuwire_comm_dup, self.handle))

    # Blocking operations free the buffers they wrapped for the call; isend and irecv hand
    # theirs to the Request, which keeps the array alive until the operation completes.
    def send(self, buf, dest, tag=0, stream=None):
        b, new = _one_buffer(buf)
        try:
            _check(lib.gpuwire_send(self.handle, b.handle, dest, tag, _stream_ptr(stream or b.stream)))
        finally:
            if new:
                _done(b)

    def recv(self, buf, source, tag=0, stream=None):
        b, new = _one_buffer(buf)
        try:
            _check(lib.gpuwire_recv(self.handle, b.handle, source, tag, _stream_ptr(stream or b.stream)))
        finally:
            if new:
                _done(b)

    def isend(self, buf, dest, tag=0, stream=None):
        """Returns a Request; the array stays referenced until it completes."""
        b, _ = _one_buffer(buf)
        r = _out(_handle, lib.gpuwire_isend, self.handle, b.handle, dest, tag, _stream_ptr(stream or b.stream))
        return Request(r, keep=b)

    def irecv(self, buf, source, tag=0, stream=None):
        b, _ = _one_buffer(buf)
        r = _out(_handle, lib.gpuwire_irecv, self.handle, b.handle, source, tag, _stream_ptr(stream or b.stream))
        return Request(r, keep=b)

    def recv_status(self, buf, source=ANY_SOURCE, tag=ANY_TAG, stream=None):
        """gpuwire_recv_status: up to the buffer's count, wildcards allowed; a StatusT (source,
        tag, count) of what it received."""
        b, new = _one_buffer(buf)
        st = StatusT()
        try:
            _check(lib.gpuwire_recv_status(self.handle, b.handle, source, tag, _stream_ptr(stream or b.stream),
                                           ctypes.byref(st)))
        finally:
            if new:
                _done(b)
        return st

    def irecv_status(self, buf, source=ANY_SOURCE, tag=ANY_TAG, stream=None):
        """gpuwire_irecv_status: a Request whose wait_status() says what it received."""
        b, _ = _one_buffer(buf)
        r = _out(_handle, lib.gpuwire_irecv_status, self.handle, b.handle, source, tag,
                 _stream_ptr(stream or b.stream))
        return Request(r, keep=b)

    def probe(self, source=ANY_SOURCE, tag=ANY_TAG, dtype=UINT8):
        """gpuwire_probe: the StatusT of the next matching message (count in `dtype` elements)."""
        st = StatusT()
        _check(lib.gpuwire_probe(self.handle, source, tag, _dtype_code(dtype), ctypes.byref(st)))
        return st

    def iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, dtype=UINT8):
        """gpuwire_iprobe: the StatusT of a matching message, or None when there is none."""
        flag, st = c_int32(), StatusT()
        _check(lib.gpuwire_iprobe(self.handle, source, tag, _dtype_code(dtype), ctypes.byref(flag),
                                  ctypes.byref(st)))
        return st if flag.value else None

    def abort(self):
        """gpuwire_comm_abort: every later operation fails with ERROR_COMM_BROKEN, and so do
        pending waits gpuwire runs in a loop; without a timeout a call blocked inside MPI (recv,
        probe, a large send, a collective) is not woken (see the C function)."""
        _check(lib.gpuwire_comm_abort(self.handle))

    def get_async_error(self):
        """gpuwire_comm_get_async_error: the asynchronous error's code, ERROR_COMM_BROKEN for a
        broken communicator, else SUCCESS."""
        return _out(c_int32, lib.gpuwire_comm_get_async_error, self.handle)

    def sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, stream=None):
        s, sn = _one_buffer(sendbuf)
        try:
            r, rn = _one_buffer(recvbuf)
        except BaseException:
            if sn:
                _done(s)
            raise
        try:
            _check(lib.gpuwire_sendrecv(self.handle, s.handle, dest, sendtag, r.handle, source, recvtag,
                                        _stream_ptr(stream or s.stream)))
        finally:
            for b, new in ((s, sn), (r, rn)):
                if new:
                    _done(b)

    def _refuse(self, fn, nbufs, args, nonblocking=False):
        """A collective refused on this rank before its C call (an argument Python checks): the
        C call is made with NULL buffer handles, so that it fails here too and, in checking mode,
        the other ranks fail instead of waiting for this one (as the C++ and Fortran bindings do).
        The caller then raises its own error."""
        extra = (ctypes.byref(_handle()),) if nonblocking else ()
        try:
            fn(self.handle, *([0] * nbufs), *args, None, *extra)
        except _UNCONVERTED:
            # The refused argument was one of `args` (a root past int32_t, a string): 0 in its
            # place, and in every other plain argument's (the NULL buffers fail the call anyway).
            plain = [a if a is None or isinstance(a, (ctypes._SimpleCData, ctypes.Array)) else 0 for a in args]
            try:
                fn(self.handle, *([0] * nbufs), *plain, None, *extra)
            except _UNCONVERTED:  # nothing more can be done here
                pass

    def _or_refuse(self, fn, nbufs, args, call, nonblocking=False):
        """call() (the C call of gpuwire function `fn`, with `nbufs` buffers and then `args`); an
        argument refused before the C call (an integer that does not fit its C type, one ctypes
        cannot convert) fails the call on every rank (`_refuse`) before it is raised."""
        try:
            return call()
        except _UNCONVERTED:
            self._refuse(fn, nbufs, args, nonblocking)
            raise

    def _in_place(self, fn, buf, args, stream, nonblocking=False):
        """The in-place form of collective `fn` (one buffer as both): its result (a request's
        handle when `nonblocking`) and the buffer; a buffer or argument refused here fails the
        call on every rank (`_refuse`)."""
        try:
            b, new = _one_buffer(buf)
        except (ValueError, TypeError, OverflowError):
            self._refuse(fn, 2, args, nonblocking)
            raise
        try:
            if nonblocking:
                return self._or_refuse(fn, 2, args, lambda: _out(_handle, fn, self.handle, b.handle, b.handle, *args,
                                                                  _stream_ptr(stream or b.stream)), True), b
            self._or_refuse(fn, 2, args, lambda: _check(fn(self.handle, b.handle, b.handle, *args, _stream_ptr(stream or b.stream))))
            return None, b
        finally:
            if new and not nonblocking:
                _done(b)

    def _wrap_all(self, fn, bufs, args, nonblocking=False):
        """`_as_buffer` of each of `bufs`; one refused fails the call on every rank (`_refuse`)."""
        wrapped = []
        try:
            for b in bufs:
                wrapped.append(_as_buffer(b))
        except (ValueError, TypeError, OverflowError):
            for b, new in wrapped:
                if new:
                    _done(b)
            self._refuse(fn, len(bufs), args, nonblocking)
            raise
        return wrapped

    def _collective(self, fn, bufs, args, stream):
        wrapped = self._wrap_all(fn, bufs, args)
        try:
            s = stream
            if s is None:
                s = next((b.stream for b, _ in wrapped if b is not None and b.stream is not None), None)
            handles = [b.handle if b is not None else 0 for b, _ in wrapped]
            self._or_refuse(fn, len(bufs), args, lambda: _check(fn(self.handle, *handles, *args, _stream_ptr(s))))
        finally:
            for b, new in wrapped:
                if new:
                    _done(b)

    def barrier(self, stream=None):
        _check(lib.gpuwire_barrier(self.handle, _stream_ptr(stream)))

    def bcast(self, buf, root=0, stream=None):
        self._collective(lib.gpuwire_bcast, [buf], [root], stream)

    def reduce(self, sendbuf, recvbuf, op=SUM, root=0, stream=None):
        """recvbuf matters at the root only (None elsewhere); the same object as sendbuf = in place."""
        if recvbuf is sendbuf:
            self._in_place(lib.gpuwire_reduce, sendbuf, [op, root], stream)
            return
        self._collective(lib.gpuwire_reduce, [sendbuf, recvbuf], [op, root], stream)

    def allreduce(self, sendbuf, recvbuf=None, op=SUM, stream=None):
        """In place when recvbuf is None (or the same object)."""
        if recvbuf is None or recvbuf is sendbuf:
            self._in_place(lib.gpuwire_allreduce, sendbuf, [op], stream)
            return
        self._collective(lib.gpuwire_allreduce, [sendbuf, recvbuf], [op], stream)

    def scan(self, sendbuf, recvbuf=None, op=SUM, stream=None):
        """As MPI_Scan; in place when recvbuf is None (or the same object)."""
        self._scan(lib.gpuwire_scan, sendbuf, recvbuf, op, stream)

    def exscan(self, sendbuf, recvbuf=None, op=SUM, stream=None):
        """As MPI_Exscan (rank 0's recvbuf is left untouched); in place when recvbuf is None."""
        self._scan(lib.gpuwire_exscan, sendbuf, recvbuf, op, stream)

    def _scan(self, fn, sendbuf, recvbuf, op, stream):
        if recvbuf is None or recvbuf is sendbuf:
            self._in_place(fn, sendbuf, [op], stream)
            return
        self._collective(fn, [sendbuf, recvbuf], [op], stream)

    def allgather(self, sendbuf, recvbuf, stream=None):
        self._collective(lib.gpuwire_allgather, [sendbuf, recvbuf], [], stream)

    def allgatherv(self, sendbuf, recvbuf, recvcounts=None, stream=None):
        """recvcounts: one count per rank, or None to let gpuwire exchange them."""
        counts = None
        if recvcounts is not None:
            try:
                if len(recvcounts) != self.size():
                    raise ValueError(f"gpuwire_allgatherv: {len(recvcounts)} recvcounts for {self.size()} ranks")
                counts = _int64s(recvcounts, what="gpuwire_allgatherv: recvcounts")
            except (ValueError, TypeError, OverflowError):
                self._refuse(lib.gpuwire_allgatherv, 2, [None])
                raise
        self._collective(lib.gpuwire_allgatherv, [sendbuf, recvbuf], [counts], stream)

    def reduce_scatter(self, sendbuf, recvbuf, op=SUM, stream=None):
        """Deprecated name of reduce_scatter_block (MPI_Reduce_scatter_block)."""
        self._collective(lib.gpuwire_reduce_scatter, [sendbuf, recvbuf], [op], stream)

    def reduce_scatter_block(self, sendbuf, recvbuf, op=SUM, stream=None):
        self._collective(lib.gpuwire_reduce_scatter_block, [sendbuf, recvbuf], [op], stream)

    # The v-collectives (as MPI_Alltoallv, MPI_Gatherv, MPI_Scatterv, MPI_Reduce_scatter):
    # counts and displacements are sequences of one int per rank, in elements; None is NULL
    # (displacements: blocks contiguous in rank order; counts: not significant on this rank).
    def _per_rank(self, name, a, what):
        if a is None:
            return None
        if len(a) != self.size():
            raise ValueError(f"{name}: {len(a)} counts or displacements for {self.size()} ranks")
        return _int64s(a, what=f"{name}: {what}")

    def _vrefuse(self, name, args, nonblocking):
        """`_refuse` of gpuwire_NAME (or its nonblocking form), args(0, 0) its arguments with
        NULL buffers."""
        fn = getattr(lib, ("gpuwire_i" if nonblocking else "gpuwire_") + name)
        self._refuse(fn, 0, args(0, 0), nonblocking)

    def _vargs(self, name, nonblocking, nulls, make):
        """make(): the per-rank arrays of gpuwire_NAME; one refused fails the call on every
        rank (`_vrefuse` with `nulls`, its arguments with NULL arrays)."""
        try:
            return make()
        except (ValueError, TypeError, OverflowError):
            self._vrefuse(name, nulls, nonblocking)
            raise

    def _vcall(self, name, sendbuf, recvbuf, stream, args, nonblocking):
        """Calls gpuwire_NAME (or its nonblocking form) with args(send_handle, recv_handle)."""
        # One object as both: one handle (in place, also for an empty array).
        try:
            (s, sn) = _as_buffer(sendbuf)
        except (ValueError, TypeError, OverflowError):
            self._vrefuse(name, args, nonblocking)
            raise
        try:
            (r, rn) = (s, False) if recvbuf is sendbuf else _as_buffer(recvbuf)
        except (ValueError, TypeError, OverflowError):
            if sn:
                _done(s)
            self._vrefuse(name, args, nonblocking)
            raise
        st = stream
        if st is None:
            st = next((b.stream for b in (s, r) if b is not None and b.stream is not None), None)
        sh, rh = (s.handle if s is not None else 0), (r.handle if r is not None else 0)
        fn = getattr(lib, ("gpuwire_i" if nonblocking else "gpuwire_") + name)
        if nonblocking:
            req = self._or_refuse(fn, 0, args(0, 0), lambda: _out(_handle, fn, self.handle, *args(sh, rh), _stream_ptr(st)), True)
            return Request(req, keep=[s, r])
        try:
            self._or_refuse(fn, 0, args(0, 0), lambda: _check(fn(self.handle, *args(sh, rh), _stream_ptr(st))))
        finally:
            for b, new in ((s, sn), (r, rn)):
                if new:
                    _done(b)

    def alltoallv(self, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, stream=None, _nb=False):
        """In place when recvbuf is sendbuf (sendcounts, sdispls are then ignored: may be None)."""
        name = "gpuwire_alltoallv"
        sc, sd, rc, rd = self._vargs("alltoallv", _nb, lambda s, r: (s, None, None, r, None, None), lambda: (
            self._per_rank(name, sendcounts, "sendcounts"), self._per_rank(name, sdispls, "sdispls"),
            self._per_rank(name, recvcounts, "recvcounts"), self._per_rank(name, rdispls, "rdispls")))
        return self._vcall("alltoallv", sendbuf, recvbuf, stream, lambda s, r: (s, sc, sd, r, rc, rd), _nb)

    def gatherv(self, sendbuf, recvbuf, recvcounts, displs=None, root=0, stream=None, _nb=False):
        """recvbuf, recvcounts and displs matter at the root only (None elsewhere)."""
        rc, d = self._vargs("gatherv", _nb, lambda s, r: (s, r, None, None, root), lambda: (
            self._per_rank("gpuwire_gatherv", recvcounts, "recvcounts"), self._per_rank("gpuwire_gatherv", displs, "displs")))
        return self._vcall("gatherv", sendbuf, recvbuf, stream, lambda s, r: (s, r, rc, d, root), _nb)

    def scatterv(self, sendbuf, sendcounts, displs, recvbuf, root=0, stream=None, _nb=False):
        """sendbuf, sendcounts and displs matter at the root only (None elsewhere)."""
        sc, d = self._vargs("scatterv", _nb, lambda s, r: (s, None, None, r, root), lambda: (
            self._per_rank("gpuwire_scatterv", sendcounts, "sendcounts"), self._per_rank("gpuwire_scatterv", displs, "displs")))
        return self._vcall("scatterv", sendbuf, recvbuf, stream, lambda s, r: (s, sc, d, r, root), _nb)

    def reduce_scatterv(self, sendbuf, recvbuf, recvcounts, op=SUM, stream=None, _nb=False):
        """In place when recvbuf is sendbuf: the result is then in its first recvcounts[rank] elements."""
        rc = self._vargs("reduce_scatterv", _nb, lambda s, r: (s, r, None, op),
                         lambda: self._per_rank("gpuwire_reduce_scatterv", recvcounts, "recvcounts"))
        return self._vcall("reduce_scatterv", sendbuf, recvbuf, stream, lambda s, r: (s, r, rc, op), _nb)

    def alltoall(self, sendbuf, recvbuf, stream=None):
        self._collective(lib.gpuwire_alltoall, [sendbuf, recvbuf], [], stream)

    def gather(self, sendbuf, recvbuf, root=0, stream=None):
        self._collective(lib.gpuwire_gather, [sendbuf, recvbuf], [root], stream)

    def scatter(self, sendbuf, recvbuf, root=0, stream=None):
        self._collective(lib.gpuwire_scatter, [sendbuf, recvbuf], [root], stream)

    # Nonblocking collectives: arguments as the blocking forms; each returns a Request, which
    # keeps the buffers (and the arrays they wrap) alive until it completes.
    def _icollective(self, fn, bufs, args, stream):
        wrapped = [b for b, _ in self._wrap_all(fn, bufs, args, nonblocking=True)]
        s = stream
        if s is None:
            s = next((b.stream for b in wrapped if b is not None and b.stream is not None), None)
        handles = [b.handle if b is not None else 0 for b in wrapped]
        r = self._or_refuse(fn, len(bufs), args, lambda: _out(_handle, fn, self.handle, *handles, *args, _stream_ptr(s)), True)
        return Request(r, keep=wrapped)

    def ibarrier(self, stream=None):
        return Request(_out(_handle, lib.gpuwire_ibarrier, self.handle, _stream_ptr(stream)), keep=None)

    def ibcast(self, buf, root=0, stream=None):
        return self._icollective(lib.gpuwire_ibcast, [buf], [root], stream)

    def ireduce(self, sendbuf, recvbuf, op=SUM, root=0, stream=None):
        """recvbuf matters at the root only (None elsewhere); the same object as sendbuf = in place."""
        if recvbuf is sendbuf:
            r, b = self._in_place(lib.gpuwire_ireduce, sendbuf, [op, root], stream, nonblocking=True)
            return Request(r, keep=b)
        return self._icollective(lib.gpuwire_ireduce, [sendbuf, recvbuf], [op, root], stream)

    def iallreduce(self, sendbuf, recvbuf=None, op=SUM, stream=None):
        """In place when recvbuf is None (or the same object)."""
        if recvbuf is None or recvbuf is sendbuf:
            r, b = self._in_place(lib.gpuwire_iallreduce, sendbuf, [op], stream, nonblocking=True)
            return Request(r, keep=b)
        return self._icollective(lib.gpuwire_iallreduce, [sendbuf, recvbuf], [op], stream)

    def iscan(self, sendbuf, recvbuf=None, op=SUM, stream=None):
        """As MPI_Iscan; in place when recvbuf is None (or the same object)."""
        return self._iscan(lib.gpuwire_iscan, sendbuf, recvbuf, op, stream)

    def iexscan(self, sendbuf, recvbuf=None, op=SUM, stream=None):
        """As MPI_Iexscan (rank 0's recvbuf is left untouched); in place when recvbuf is None."""
        return self._iscan(lib.gpuwire_iexscan, sendbuf, recvbuf, op, stream)

    def _iscan(self, fn, sendbuf, recvbuf, op, stream):
        if recvbuf is None or recvbuf is sendbuf:
            r, b = self._in_place(fn, sendbuf, [op], stream, nonblocking=True)
            return Request(r, keep=b)
        return self._icollective(fn, [sendbuf, recvbuf], [op], stream)

    def iallgather(self, sendbuf, recvbuf, stream=None):
        return self._icollective(lib.gpuwire_iallgather, [sendbuf, recvbuf], [], stream)

    def iallgatherv(self, sendbuf, recvbuf, recvcounts=None, stream=None):
        """recvcounts: one count per rank (copied by the call), or None to let gpuwire exchange them."""
        counts = None
        if recvcounts is not None:
            try:
                if len(recvcounts) != self.size():
                    raise ValueError(f"gpuwire_iallgatherv: {len(recvcounts)} recvcounts for {self.size()} ranks")
                counts = _int64s(recvcounts, what="gpuwire_iallgatherv: recvcounts")
            except (ValueError, TypeError, OverflowError):
                self._refuse(lib.gpuwire_iallgatherv, 2, [None], nonblocking=True)
                raise
        return self._icollective(lib.gpuwire_iallgatherv, [sendbuf, recvbuf], [counts], stream)

    def ireduce_scatter(self, sendbuf, recvbuf, op=SUM, stream=None):
        """Deprecated name of ireduce_scatter_block."""
        return self._icollective(lib.gpuwire_ireduce_scatter, [sendbuf, recvbuf], [op], stream)

    def ireduce_scatter_block(self, sendbuf, recvbuf, op=SUM, stream=None):
        return self._icollective(lib.gpuwire_ireduce_scatter_block, [sendbuf, recvbuf], [op], stream)

    def ialltoallv(self, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, stream=None):
        return self.alltoallv(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, stream, _nb=True)

    def igatherv(self, sendbuf, recvbuf, recvcounts, displs=None, root=0, stream=None):
        return self.gatherv(sendbuf, recvbuf, recvcounts, displs, root, stream, _nb=True)

    def iscatterv(self, sendbuf, sendcounts, displs, recvbuf, root=0, stream=None):
        return self.scatterv(sendbuf, sendcounts, displs, recvbuf, root, stream, _nb=True)

    def ireduce_scatterv(self, sendbuf, recvbuf, recvcounts, op=SUM, stream=None):
        return self.reduce_scatterv(sendbuf, recvbuf, recvcounts, op, stream, _nb=True)

    def ialltoall(self, sendbuf, recvbuf, stream=None):
        return self._icollective(lib.gpuwire_ialltoall, [sendbuf, recvbuf], [], stream)

    def igather(self, sendbuf, recvbuf, root=0, stream=None):
        return self._icollective(lib.gpuwire_igather, [sendbuf, recvbuf], [root], stream)

    def iscatter(self, sendbuf, recvbuf, root=0, stream=None):
        return self._icollective(lib.gpuwire_iscatter, [sendbuf, recvbuf], [root], stream)

    def async_error(self):
        """Raises the Error of an operation that failed after its call had returned
        (gpuwire_comm_async_error; reported once)."""
        _check(lib.gpuwire_comm_async_error(self.handle))

    def free(self):
        if self.handle:
            h, self.handle = self.handle, 0
            _check(lib.gpuwire_comm_free(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        # Never gpuwire_comm_free here: it is collective, and the collector does not run at the
        # same point on every rank (communicators collected in different orders would deadlock).
        if getattr(self, "handle", 0) and lib is not None:
            try:
                warnings.warn(f"gpuwire.Comm (handle {self.handle:#x}) collected without free(): not freed, "
                              "because gpuwire_comm_free is collective and the garbage collector runs at "
                              "different moments on different ranks; gpuwire.finalize() releases it. Call "
                              "free() on every rank, or use `with gpuwire.Comm(...) as comm:`",
                              ResourceWarning, stacklevel=2)
            except Exception:
                pass


# ---- distributed arrays ------------------------------------------------------------------------


def _numpy():
    import numpy

    return numpy


def _dtype_code(dtype):
    """A gpuwire datatype from a gpuwire constant or anything numpy.dtype() takes (a pair_dtype
    too)."""
    if isinstance(dtype, int):
        return dtype
    dt = _numpy().dtype(dtype)
    pair = _pair_of(dt)
    if pair is not None:
        return pair
    if dt.name not in _DTYPES:
        raise ValueError(f"gpuwire: unsupported dtype {dt.name}")
    return _DTYPES[dt.name]


class DArray:
    """Owns a gpuwire_darray: one global array split over the ranks of a Comm (gpuwire.h, section
    distributed arrays). Collective to create:

        x = gpuwire.DArray(comm, 11, np.float64)                    # 1-D, the default split
        g = gpuwire.DArray(comm, (n, n), np.float64, halo=1)        # N-D, split along axis 0
        b = gpuwire.DArray(comm, 16, np.float64, partition=gpuwire.PARTITION_BROADCAST)
        c = gpuwire.DArray(comm, (n, n, n), np.float64, procs=(0, 0, 0), halo=(1, 1, 1),
                           periodic=(True, False, False))         # a process grid
        w = gpuwire.DArray.wrap(comm, own, (n, n), procs=(0, 1), halo=(1, 0), periodic=(1, 0))

    A process grid (gpuwire_darray_create_cart): `procs` one entry per axis (0 = chosen as
    MPI_Dims_create), `halo` and `periodic` a number or one entry per axis. DArray.wrap makes one
    over the program's memory (a NumPy array, or an address: this rank's block with its ghosts).

    Host data is NumPy: set_global takes the global array (of the array's dtype: another is refused;
    ranks that do not read it may pass None), allgather and gather return a new NumPy array of the global
    shape (or fill `out`, which must have the array's dtype and global size), numpy() views a host
    array's owned elements. Scalars (fill, axpy, scale) have the array's dtype (a Python number
    of its kind is taken); results (dot, sum, min, max) come back as NumPy scalars of it, norm as
    a float. An `out` of
    another dtype or size, read-only or not an array, is checked where the C function uses it: it
    goes to the C call as NULL, so that the call fails there (agreed across ranks in checking mode)
    and raises the mismatch.
    """

    def __init__(self, comm, shape, dtype=FLOAT64, space=SPACE_HOST, partition=PARTITION_SCATTER, local=DECIDE,
                 halo=0, procs=None, periodic=None, _wrap=None):
        refused = None
        try:
            code = _dtype_code(dtype)
        except (ValueError, TypeError) as e:
            # Refused on this rank: the collective creation still runs, with no datatype (-1),
            # so that it fails on every rank and none waits for this one (a helper's hunt).
            code, refused = -1, e
        try:
            self._create(comm, shape, code, space, partition, local, halo, procs, periodic, _wrap)
        except Error:
            if refused is not None:
                raise refused from None
            raise

    def _create(self, comm, shape, code, space, partition, local, halo, procs, periodic, _wrap):
        """`__init__`'s collective creation, of datatype `code`."""
        # A number is any integer, NumPy's too (numbers.Integral), never taken for a per-axis list.
        if isinstance(shape, numbers.Integral):
            shape = int(shape)
        if isinstance(halo, numbers.Integral):
            halo = int(halo)
        if procs is not None or periodic is not None or _wrap is not None or not isinstance(halo, int):
            # A process grid is SCATTER, split as gpuwire_darray_create_cart splits: refuse what
            # it would otherwise ignore.
            if partition != PARTITION_SCATTER or local != DECIDE:
                raise ValueError("gpuwire: a process grid (procs, per-axis halo, periodic) is a SCATTER array split "
                                 "by gpuwire: partition and local cannot be given with it")
            dims = [shape] if isinstance(shape, int) else [int(d) for d in shape]
            n = len(dims)

            def axes(v, kind, what):
                v = [0] * n if v is None else ([v] * n if isinstance(v, numbers.Integral) else list(v))
                if len(v) != n:
                    raise ValueError(f"gpuwire: {what} has {len(v)} entries for {n} axes")
                # Refused, as every integer argument, where it does not fit (ctypes would keep its
                # low bits: a periodic flag of 2**32 became 0).
                bits = 8 * ctypes.sizeof(kind)
                for i, x in enumerate(v):
                    if not -(1 << (bits - 1)) <= int(x) < (1 << (bits - 1)):
                        fn = "gpuwire_darray_create_cart" if _wrap is None else "gpuwire_darray_wrap"
                        raise OverflowError(f"{fn}: {what}[{i}] = {int(x)} does not fit int{bits}_t")
                return (kind * max(n, 1))(*[int(x) for x in v])

            try:
                args = (n, axes(dims, c_int64, "shape"), axes(procs, c_int64, "procs"), axes(halo, c_int64, "halo"),
                        axes(periodic, c_int32, "periodic"), code, space)
            except (ValueError, TypeError, OverflowError):
                # The collective creation with an ndim of -1 fails on every rank (none waits).
                z, zi, out = (c_int64 * 1)(0), (c_int32 * 1)(0), _handle()
                head = (comm.handle,) if _wrap is None else (comm.handle, c_void_p(_wrap[0]))
                fn = lib.gpuwire_darray_create_cart if _wrap is None else lib.gpuwire_darray_wrap
                fn(*head, -1, z, z, z, zi, code, space, ctypes.byref(out))
                raise
            if _wrap is None:
                h = _out(_handle, lib.gpuwire_darray_create_cart, comm.handle, *args)
            else:
                h = _out(_handle, lib.gpuwire_darray_wrap, comm.handle, c_void_p(_wrap[0]), *args)
                self._memory = _wrap[1]  # the wrapped NumPy array stays alive with the darray
        elif isinstance(shape, int) and halo == 0:
            h = _out(_handle, lib.gpuwire_darray_create, comm.handle, shape, local, code, space, partition)
        else:
            dims = [shape] if isinstance(shape, int) else [int(d) for d in shape]
            arr = _int64s(dims, 1, "gpuwire_darray_create_nd: shape")
            h = _out(_handle, lib.gpuwire_darray_create_nd, comm.handle, len(dims), arr, local, halo, code, space,
                     partition)
        self.handle = h
        self._comm = comm  # for the rank count (local_lens) and the rank (gather)
        self._nranks = comm.size()
        self._rank = comm.rank()

    @classmethod
    def wrap(cls, comm, memory, shape, dtype=None, procs=None, halo=0, periodic=None, space=SPACE_AUTO):
        """A SCATTER array over the program's memory (gpuwire_darray_wrap): `memory` a NumPy array
        (C-contiguous, writable, in native byte order, at least this rank's block with its ghosts;
        its dtype unless `dtype` is given) or an address (then pass `dtype`; its size cannot be
        checked). The
        memory stays the program's. Collective: an array refused on one rank (ValueError) is
        refused on every rank."""
        procs = procs if procs is not None else [0] * (1 if isinstance(shape, numbers.Integral) else len(shape))
        if isinstance(memory, int):
            if dtype is None:
                raise ValueError("gpuwire: DArray.wrap of an address needs its dtype")
            return cls(comm, shape, dtype, space, halo=halo, procs=procs, periodic=periodic, _wrap=(memory, None))
        # A NumPy array: what is wrong with it is found on its rank, and every rank raises (after
        # the collective creation, over a placeholder where the memory is not an array), so that no
        # rank is left waiting in a collective the others never make.
        np = _numpy()
        problem = None
        if not isinstance(memory, np.ndarray) or not memory.flags["C_CONTIGUOUS"]:
            problem = "gpuwire: DArray.wrap takes a C-contiguous NumPy array or an address"
        elif not memory.flags.writeable:
            problem = _READ_ONLY
        elif not memory.dtype.isnative:
            problem = _byte_order_message(memory.dtype.str)
        keep = memory if isinstance(memory, np.ndarray) else np.empty(1)
        dtype = keep.dtype if dtype is None else dtype
        try:
            _dtype_code(dtype)
        except (ValueError, TypeError) as e:  # an element type gpuwire has not: a placeholder's
            problem = problem or str(e)
            dtype = FLOAT64
        space = SPACE_HOST if space == SPACE_AUTO else space
        d = cls(comm, shape, dtype, space, halo=halo, procs=procs, periodic=periodic, _wrap=(keep.ctypes.data, keep))
        if problem is None:
            ghosts = d.cart()["halo"]
            need = d._np_dtype().itemsize
            for n, h in zip(d.local_shape(), ghosts):
                need *= n + 2 * h
            if memory.nbytes < need:
                problem = (f"gpuwire: DArray.wrap: the array holds {memory.nbytes} bytes; this rank's block with its "
                           f"ghosts, {tuple(n + 2 * h for n, h in zip(d.local_shape(), ghosts))} elements, needs {need}")
        flag = np.array([0 if problem is None else 1], dtype=np.int32)
        comm.allreduce(flag, op=MAX)
        if flag[0]:
            d.free()
            raise ValueError(problem or "gpuwire: DArray.wrap: another rank's memory was refused (its error says why)")
        return d

    def cart(self):
        """The decomposition (gpuwire_darray_cart): a dict of per-axis lists procs, coords, starts,
        halo, periodic."""
        n = self.ndim()
        out = [(c_int64 * max(n, 1))() for _ in range(4)] + [(c_int32 * max(n, 1))()]
        _check(lib.gpuwire_darray_cart(self.handle, *out))
        names = ("procs", "coords", "starts", "halo", "periodic")
        return {k: [int(x) for x in v[:n]] for k, v in zip(names, out)}

    # queries (local)
    def global_len(self):
        return _out(c_int64, lib.gpuwire_darray_global_len, self.handle)

    def local_len(self):
        return _out(c_int64, lib.gpuwire_darray_local_len, self.handle)

    def global_offset(self):
        return _out(c_int64, lib.gpuwire_darray_global_offset, self.handle)

    def ndim(self):
        return _out(c_int32, lib.gpuwire_darray_ndim, self.handle)

    def halo(self):
        return _out(c_int64, lib.gpuwire_darray_halo, self.handle)

    def dtype(self):
        return _out(c_int32, lib.gpuwire_darray_dtype, self.handle)

    def space(self):
        return _out(c_int32, lib.gpuwire_darray_space, self.handle)

    def partition(self):
        return _out(c_int32, lib.gpuwire_darray_partition, self.handle)

    def data(self):
        """The address of the first owned element (a device address for device arrays; 0 if none)."""
        return _out(c_void_p, lib.gpuwire_darray_data, self.handle) or 0

    def _int64s(self, fn, n):
        v = (c_int64 * max(n, 1))()
        _check(fn(self.handle, v))
        return tuple(v[:n])

    def local_lens(self):
        """Every rank's number of owned elements, in rank order."""
        return list(self._int64s(lib.gpuwire_darray_local_lens, self._nranks))

    def comm(self):
        """gpuwire_darray_comm: (a Comm of the array's communicator, its number of ranks); free()
        the Comm (local: the array keeps the communicator)."""
        h, n = _handle(), c_int32()
        _check(lib.gpuwire_darray_comm(self.handle, ctypes.byref(h), ctypes.byref(n)))
        return Comm(handle=h.value), n.value

    def shape(self):
        return self._int64s(lib.gpuwire_darray_shape, self.ndim())

    def local_shape(self):
        return self._int64s(lib.gpuwire_darray_local_shape, self.ndim())

    def local(self):
        """A Buffer viewing the owned elements (keeps this array alive)."""
        return Buffer(_out(_handle, lib.gpuwire_darray_local, self.handle), keep=self)

    def local_with_halo(self):
        """A Buffer viewing the ghost rows above, the owned rows and the ghost rows below."""
        return Buffer(_out(_handle, lib.gpuwire_darray_local_with_halo, self.handle), keep=self)

    def _np_dtype(self):
        names = {v: k for k, v in _DTYPES.items()}
        d = self.dtype()
        if d in _PAIRS:
            return pair_dtype(d)
        if d not in names:
            raise ValueError(f"gpuwire: datatype {d} has no NumPy dtype")
        return _numpy().dtype(names[d])

    def numpy(self):
        """A NumPy view of a host array's owned elements, in the local shape (no copy). It keeps
        the array's memory alive, past free() too, but not past gpuwire.finalize(), which
        refuses while such a view of a DArray that gpuwire allocated is alive (Buffer.numpy says
        more). Called after free() or finalize(), raises gpuwire.Error ERROR_INVALID_HANDLE or
        ERROR_ALREADY_FINALIZED."""
        np = _numpy()
        n = _usable(self.handle, lib.gpuwire_darray_local_len, "gpuwire.DArray.numpy", "distributed array")
        if self.space() == SPACE_DEVICE:
            raise ValueError("gpuwire: a device array has no NumPy view")
        shape, dt = self.local_shape(), self._np_dtype()
        if n == 0:
            return np.empty(shape, dtype=dt)
        halo = self.cart()["halo"]
        if any(halo[1:]):
            # A halo beyond axis 0: the owned elements are a box of the padded storage.
            b = self.local_with_halo()
            whole = _numpy_over(b, b.count() * dt.itemsize, dt).reshape([d + 2 * h for d, h in zip(shape, halo)])
            return whole[tuple(slice(h, h + d) for d, h in zip(shape, halo))]
        return _numpy_over(self.local(), n * dt.itemsize, dt).reshape(shape)

    # scalars: of the array's dtype (results come back as NumPy scalars of it)
    def _scalar(self, value, what="the scalar"):
        """`value` as a 0-d array of the array's dtype: a NumPy value must have that dtype; a
        Python number must be of its kind (an int for an integer array; an int or a float for a
        real one; any number for a complex one). Anything else is refused, not converted."""
        np = _numpy()
        dt = self._np_dtype()
        if isinstance(value, (np.ndarray, np.generic)):
            if value.dtype != dt or value.size != 1:
                raise Error(ERROR_DTYPE_MISMATCH, f"{what}: a NumPy {value.dtype} value for a distributed array of "
                                                  f"{dt}: convert it first (numpy.{dt}(x))")
            return np.array(value, dtype=dt).reshape(())
        kinds = {"i": (int,), "u": (int,), "f": (int, float), "c": (int, float, complex)}.get(dt.kind, ())
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise Error(ERROR_DTYPE_MISMATCH, f"{what}: a {type(value).__name__} for a distributed array of {dt}")
        # A number its dtype cannot hold is refused, never stored with its low bits (NumPy 1.x
        # wraps integers: 300 became 44 in int8).
        if dt.kind in "iu" and not np.iinfo(dt).min <= value <= np.iinfo(dt).max:
            raise OverflowError(f"{what}: {value} does not fit {dt}")
        try:
            return np.array(value, dtype=dt)
        except OverflowError as e:
            raise OverflowError(f"{what}: {value!r} does not fit {dt} ({e})") from None

    def _result(self, fn, *args, stream=None):
        r = _numpy().zeros(1, dtype=self._np_dtype())
        _check(fn(*args, r.ctypes.data, _stream_ptr(stream)))
        return r[0]

    def _with_scalar(self, value, what, call):
        """call(pointer) of `value` as the array's dtype (`_scalar`). A value refused there goes to
        the C call as NULL, so that where the call is collective the other ranks fail too in
        checking mode instead of waiting (as C++'s darray::scalar); then the refusal is raised (or
        the C call's own error, had it another)."""
        try:
            v = self._scalar(value, what)
        except (Error, OverflowError):
            st = call(None)
            if st != ERROR_NULL_ARGUMENT:
                _check(st)
            raise
        _check(call(v.ctypes.data))

    def fill(self, value, stream=None):
        self._with_scalar(value, "gpuwire_darray_fill", lambda p: lib.gpuwire_darray_fill(self.handle, p, _stream_ptr(stream)))

    def axpy(self, alpha, x, stream=None):
        """self = alpha x + self (gpuwire_darray_axpy(alpha, x, self))."""
        self._with_scalar(alpha, "gpuwire_darray_axpy", lambda p: lib.gpuwire_darray_axpy(p, x.handle, self.handle, _stream_ptr(stream)))

    def scale(self, alpha, stream=None):
        self._with_scalar(alpha, "gpuwire_darray_scale", lambda p: lib.gpuwire_darray_scale(self.handle, p, _stream_ptr(stream)))

    def dot(self, y, stream=None):
        """sum_i conj(self_i) y_i."""
        return self._result(lib.gpuwire_darray_dot, self.handle, y.handle, stream=stream)

    def norm(self, kind=NORM_2, stream=None):
        """NORM_1, NORM_2 or NORM_INF, as a float for every dtype."""
        v = c_double()
        _check(lib.gpuwire_darray_norm(self.handle, kind, ctypes.byref(v), _stream_ptr(stream)))
        return v.value

    def sum(self, stream=None):
        return self._result(lib.gpuwire_darray_sum, self.handle, stream=stream)

    def min(self, stream=None):
        return self._result(lib.gpuwire_darray_min, self.handle, stream=stream)

    def max(self, stream=None):
        return self._result(lib.gpuwire_darray_max, self.handle, stream=stream)

    # data movement
    def _host(self, what, array, call, writes=False):
        """Calls `call(address)` with a host NumPy array of the array's dtype and global size
        (writable where the call `writes` it), or with NULL when `array` is None or does not fit
        (the C call then fails where it uses it)."""
        fits = False
        if array is not None and isinstance(array, _numpy().ndarray):
            fits = (array.dtype == self._np_dtype() and array.size == self.global_len()
                    and array.flags.c_contiguous and (array.flags.writeable or not writes))
        st = call(array.ctypes.data if fits and array.size else None)
        if st == ERROR_NULL_ARGUMENT and array is not None and not fits:
            if not isinstance(array, _numpy().ndarray):
                raise TypeError(f"{what}: expected a NumPy array, got {type(array).__name__}")
            if not array.dtype.isnative and array.dtype.newbyteorder("=") == self._np_dtype():
                raise Error(ERROR_DTYPE_MISMATCH, f"{what}: the array's elements ({array.dtype.str}) are not in "
                                                  f"this machine's byte order ({sys.byteorder}-endian); the "
                                                  f"distributed array holds native {self._np_dtype()}")
            if array.dtype != self._np_dtype():
                raise Error(ERROR_DTYPE_MISMATCH, f"{what}: the array holds {array.dtype}, the distributed "
                                                  f"array {self._np_dtype()}")
            if not array.flags.c_contiguous:
                raise Error(ERROR_INVALID_ARGUMENT, f"{what}: the array is not C-contiguous")
            if writes and not array.flags.writeable:
                raise Error(ERROR_INVALID_ARGUMENT, f"{what}: the array is read-only, and the call writes it")
            raise Error(ERROR_COUNT_MISMATCH, f"{what}: the array has {array.size} elements, the "
                                              f"distributed array {self.global_len()}")
        _check(st)

    def set_global(self, src, stream=None):
        """This rank's part of the global array `src`: a NumPy array (or array-like, taken with
        numpy.asarray) of the array's dtype and global size; None where it is not read. Another
        dtype is refused (ERROR_DTYPE_MISMATCH), as in C, never converted; only the byte order
        and the memory layout are made native and C-contiguous (the values are the same)."""
        if src is not None:
            np = _numpy()
            src = np.asarray(src)
            dt = self._np_dtype()
            if src.dtype != dt and src.dtype.newbyteorder("=") == dt:
                src = src.astype(dt)  # the same values in this machine's byte order
            if src.dtype == dt:
                src = np.ascontiguousarray(src)
        self._host("gpuwire_darray_set_global", src,
                   lambda p: lib.gpuwire_darray_set_global(self.handle, p, _stream_ptr(stream)))

    def allgather(self, out=None, stream=None):
        """The whole array on every rank: `out`, or a new NumPy array of the global shape."""
        if out is None:
            out = _numpy().empty(self.shape(), dtype=self._np_dtype())
        self._host("gpuwire_darray_allgather", out,
                   lambda p: lib.gpuwire_darray_allgather(self.handle, p, _stream_ptr(stream)), writes=True)
        return out

    def gather(self, root=0, out=None, stream=None):
        """The whole array at `root` (a new NumPy array there unless `out` is given; None elsewhere)."""
        if out is None and self._rank == root:
            out = _numpy().empty(self.shape(), dtype=self._np_dtype())
        self._host("gpuwire_darray_gather", out,
                   lambda p: lib.gpuwire_darray_gather(self.handle, p, root, _stream_ptr(stream)), writes=True)
        return out

    def redistribute(self, dst, stream=None):
        """Copies this array's values into `dst`, split as `dst` is."""
        _check(lib.gpuwire_darray_redistribute(self.handle, dst.handle, _stream_ptr(stream)))

    def bcast(self, root=0, stream=None):
        _check(lib.gpuwire_darray_bcast(self.handle, root, _stream_ptr(stream)))

    def halo_exchange(self, width=1, stream=None):
        _check(lib.gpuwire_darray_halo_exchange(self.handle, width, _stream_ptr(stream)))

    def halo_exchange_axes(self, widths=None, corners=False, stream=None):
        """Halo exchange of every axis (gpuwire_darray_halo_exchange_axes): `widths` one per axis
        (None: the array's halos); `corners` fills edges and corners too (axis by axis)."""
        what = "gpuwire_darray_halo_exchange_axes: widths"
        try:
            w = None if widths is None else _int64s([int(x) for x in widths], 1, what)
            if w is not None and len(widths) != self.ndim():
                raise ValueError(f"gpuwire: {len(widths)} widths for {self.ndim()} axes")
        except (ValueError, TypeError, OverflowError):
            # Widths of -1 make the C call fail here too (in checking mode the others fail
            # instead of waiting).
            nd = max(self.ndim(), 1)
            lib.gpuwire_darray_halo_exchange_axes(self.handle, (c_int64 * nd)(*([-1] * nd)),
                                                  HALO_CORNERS if corners else 0, _stream_ptr(stream))
            raise
        _check(lib.gpuwire_darray_halo_exchange_axes(self.handle, w, HALO_CORNERS if corners else 0,
                                                     _stream_ptr(stream)))

    def free(self):
        if self.handle:
            h, self.handle = self.handle, 0
            _check(lib.gpuwire_darray_free(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        # gpuwire_darray_free is local (not collective): the collector may free it.
        if getattr(self, "handle", 0) and lib is not None:
            try:
                lib.gpuwire_darray_free(self.handle)
            except Exception:
                pass
