"""gpuwire from Python through ctypes: communicators from mpi4py, buffers over NumPy and CuPy arrays.

A small module over libgpuwire.so, with no build step: every C function of gpuwire.h is declared
in _PROTOTYPES (scripts/check-bindings.py checks them against the header), and the main ones
have Pythonic wrappers:

    from mpi4py import MPI
    import numpy as np
    import gpuwire

    gpuwire.init()                            # adopts the MPI that mpi4py initialized
    comm = gpuwire.Comm(MPI.COMM_WORLD)       # through comm.py2f(), the Fortran handle
    x = np.full(8, comm.rank(), np.float64)
    comm.allreduce(x, op=gpuwire.SUM)         # in place; a CuPy array works the same on a GPU
    comm.free()
    gpuwire.finalize()                        # before mpi4py finalizes MPI at exit

Arrays: NumPy arrays (host memory, through arr.ctypes.data) and CuPy or any
__cuda_array_interface__ array (device memory, through arr.data.ptr) become buffers over their
own memory, never a copy: a non-contiguous array (a[:, 1]) is refused with ValueError, so a
nonblocking call can never send a temporary; so is an array whose byte order is not the
machine's (np.full(3, 1.0, '>f8') on x86 or ARM, a CuPy view with such a dtype), whose bytes
gpuwire would otherwise reduce and send as native values: convert it first
(a.astype(a.dtype.newbyteorder('='))). Buffers and requests keep the arrays they use alive.
For device arrays the operations take the array's stream (CuPy's current stream) unless given
stream=.

Freeing: gpuwire_comm_free is collective, and the garbage collector runs at different moments
on different ranks, so a Comm is freed only by free() or at the end of a `with` block, on every
rank. A Comm collected without free() is not freed: a ResourceWarning says so (shown with
python -W default::ResourceWarning or -X dev), and gpuwire.finalize() releases it. Buffers and
distributed arrays free locally (gpuwire_buffer_free, gpuwire_darray_free are not collective),
so the collector frees them. A Request collected while pending is released through
gpuwire_request_free, which never blocks longer than its communicator's timeout: one that does
not complete by then is abandoned (the communicator is then broken), with a ResourceWarning, and
its array is kept alive for good, since MPI may still use its memory.

The library: $GPUWIRE_LIBRARY (a path) if set; else, in the copy `make install` puts in
PREFIX/share/gpuwire/python, the installed library; else libgpuwire.so.0.1 from the loader's
search path (LD_LIBRARY_PATH, the system directories). It must link the same MPI as mpi4py.

Distributed arrays: gpuwire.DArray(comm, shape, dtype, ...) owns a gpuwire_darray, with NumPy for
host data (set_global, allgather, gather, numpy()); examples-python/darray.py uses every method.

Errors raise gpuwire.Error with .code (the gpuwire_status) and the detailed message.
"""

import ctypes
import os
import sys
import threading
import warnings
from ctypes import POINTER, c_char_p, c_double, c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p

# ---- constants (as gpuwire.h) ------------------------------------------------------------------

SUCCESS = 0
ERROR_NULL_ARGUMENT = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_INVALID_HANDLE = 3
ERROR_COUNT_MISMATCH = 4
ERROR_DTYPE_MISMATCH = 5
ERROR_OP_MISMATCH = 6
ERROR_ROOT_MISMATCH = 7
ERROR_UNSUPPORTED_DTYPE = 8
ERROR_UNSUPPORTED_OP = 9
ERROR_BACKEND_UNAVAILABLE = 10
ERROR_MPI = 11
ERROR_CUDA = 12
ERROR_NCCL = 13
ERROR_TIMEOUT = 14
ERROR_NOT_INITIALIZED = 15
ERROR_ALREADY_FINALIZED = 16
ERROR_INTERNAL = 17
ERROR_REMOTE_ARGUMENT = 18
ERROR_COMM_BROKEN = 19

INT8, UINT8, INT32, UINT32, INT64, UINT64 = 0, 1, 2, 3, 4, 5
FLOAT16, FLOAT32, FLOAT64, BFLOAT16, COMPLEX64, COMPLEX128 = 6, 7, 8, 9, 10, 11
SUM, PROD, MAX, MIN, AVG, BAND, BOR, BXOR = 0, 1, 2, 3, 4, 5, 6, 7
SPACE_AUTO, SPACE_HOST, SPACE_DEVICE, SPACE_PINNED, SPACE_MANAGED = 0, 1, 2, 3, 4
BACKEND_AUTO, BACKEND_HOST, BACKEND_MPI_STAGED, BACKEND_MPI_CUDA_AWARE, BACKEND_NCCL, BACKEND_IPC = 0, 1, 2, 3, 4, 5
STAGING_PINNED, STAGING_PAGEABLE = 0, 1
THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3
PROC_NULL = -1000
UNDEFINED = -1
PARTITION_SCATTER, PARTITION_BROADCAST = 0, 1
NORM_INF, NORM_1, NORM_2 = 0, 1, 2
DECIDE = -1

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
# __cuda_array_interface__ typestr (without the byte order) -> gpuwire datatypes.
_TYPESTRS = {"i1": INT8, "u1": UINT8, "i4": INT32, "u4": UINT32, "i8": INT64, "u8": UINT64,
             "f2": FLOAT16, "f4": FLOAT32, "f8": FLOAT64, "c8": COMPLEX64, "c16": COMPLEX128}


class Config(ctypes.Structure):
    """gpuwire_config, field for field."""

    _fields_ = [
        ("backend", c_int32),
        ("device", c_int32),
        ("check", c_int32),
        ("staging", c_int32),
        ("timeout_seconds", c_double),
        ("chunk_bytes", c_int64),
    ]


# ---- the C functions ---------------------------------------------------------------------------

_status = c_int  # gpuwire_status is a C enum
_handle = c_uint64  # gpuwire_comm, gpuwire_buffer, gpuwire_request, gpuwire_darray

# Every function of gpuwire.h: (result, [arguments]). Checked against the header by
# scripts/check-bindings.py.
_PROTOTYPES = {
    "gpuwire_buffer_alloc": (_status, [c_int64, c_int32, c_int32, c_int32, POINTER(_handle)]),
    "gpuwire_buffer_wrap": (_status, [c_void_p, c_int64, c_int32, c_int32, POINTER(_handle)]),
    "gpuwire_buffer_view": (_status, [_handle, c_int64, c_int64, POINTER(_handle)]),
    "gpuwire_buffer_free": (_status, [_handle]),
    "gpuwire_buffer_copy_from_host": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_buffer_copy_to_host": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_buffer_pointer": (_status, [_handle, POINTER(c_void_p)]),
    "gpuwire_buffer_count": (_status, [_handle, POINTER(c_int64)]),
    "gpuwire_buffer_dtype": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_buffer_space": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_buffer_device": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_buffer_owned": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_dtype_size": (_status, [c_int32, POINTER(c_int64)]),
    "gpuwire_config_init": (_status, [POINTER(Config)]),
    "gpuwire_comm_create": (_status, [c_int32, POINTER(Config), POINTER(_handle)]),
    "gpuwire_comm_world": (_status, [POINTER(Config), POINTER(_handle)]),
    "gpuwire_comm_free": (_status, [_handle]),
    "gpuwire_comm_split": (_status, [_handle, c_int32, c_int32, POINTER(_handle)]),
    "gpuwire_comm_dup": (_status, [_handle, POINTER(_handle)]),
    "gpuwire_comm_rank": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_comm_size": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_comm_local_rank": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_comm_local_size": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_comm_backend": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_comm_device": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_comm_mpi": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_comm_describe": (_status, [_handle, c_char_p, c_size_t]),
    "gpuwire_init": (_status, []),
    "gpuwire_finalize": (_status, []),
    "gpuwire_initialized": (_status, [POINTER(c_int32)]),
    "gpuwire_query_thread": (_status, [POINTER(c_int32)]),
    "gpuwire_owns_mpi": (_status, [POINTER(c_int32)]),
    "gpuwire_send": (_status, [_handle, _handle, c_int32, c_int32, c_void_p]),
    "gpuwire_recv": (_status, [_handle, _handle, c_int32, c_int32, c_void_p]),
    "gpuwire_isend": (_status, [_handle, _handle, c_int32, c_int32, c_void_p, POINTER(_handle)]),
    "gpuwire_irecv": (_status, [_handle, _handle, c_int32, c_int32, c_void_p, POINTER(_handle)]),
    "gpuwire_wait": (_status, [POINTER(_handle)]),
    "gpuwire_test": (_status, [POINTER(_handle), POINTER(c_int32)]),
    "gpuwire_request_free": (_status, [POINTER(_handle)]),
    "gpuwire_waitall": (_status, [c_int32, POINTER(_handle)]),
    "gpuwire_sendrecv": (_status, [_handle, _handle, c_int32, c_int32, _handle, c_int32, c_int32, c_void_p]),
    "gpuwire_barrier": (_status, [_handle, c_void_p]),
    "gpuwire_bcast": (_status, [_handle, _handle, c_int32, c_void_p]),
    "gpuwire_reduce": (_status, [_handle, _handle, _handle, c_int32, c_int32, c_void_p]),
    "gpuwire_allreduce": (_status, [_handle, _handle, _handle, c_int32, c_void_p]),
    "gpuwire_allgather": (_status, [_handle, _handle, _handle, c_void_p]),
    "gpuwire_allgatherv": (_status, [_handle, _handle, _handle, POINTER(c_int64), c_void_p]),
    "gpuwire_reduce_scatter": (_status, [_handle, _handle, _handle, c_int32, c_void_p]),
    "gpuwire_alltoall": (_status, [_handle, _handle, _handle, c_void_p]),
    "gpuwire_gather": (_status, [_handle, _handle, _handle, c_int32, c_void_p]),
    "gpuwire_scatter": (_status, [_handle, _handle, _handle, c_int32, c_void_p]),
    "gpuwire_ibarrier": (_status, [_handle, c_void_p, POINTER(_handle)]),
    "gpuwire_ibcast": (_status, [_handle, _handle, c_int32, c_void_p, POINTER(_handle)]),
    "gpuwire_ireduce": (_status, [_handle, _handle, _handle, c_int32, c_int32, c_void_p, POINTER(_handle)]),
    "gpuwire_iallreduce": (_status, [_handle, _handle, _handle, c_int32, c_void_p, POINTER(_handle)]),
    "gpuwire_iallgather": (_status, [_handle, _handle, _handle, c_void_p, POINTER(_handle)]),
    "gpuwire_iallgatherv": (_status, [_handle, _handle, _handle, POINTER(c_int64), c_void_p, POINTER(_handle)]),
    "gpuwire_ireduce_scatter": (_status, [_handle, _handle, _handle, c_int32, c_void_p, POINTER(_handle)]),
    "gpuwire_ialltoall": (_status, [_handle, _handle, _handle, c_void_p, POINTER(_handle)]),
    "gpuwire_igather": (_status, [_handle, _handle, _handle, c_int32, c_void_p, POINTER(_handle)]),
    "gpuwire_iscatter": (_status, [_handle, _handle, _handle, c_int32, c_void_p, POINTER(_handle)]),
    "gpuwire_group_start": (_status, []),
    "gpuwire_group_end": (_status, []),
    "gpuwire_comm_async_error": (_status, [_handle]),
    "gpuwire_status_string": (c_char_p, [c_int32]),
    "gpuwire_last_error": (_status, [c_char_p, c_size_t]),
    "gpuwire_get_version": (_status, [POINTER(c_int32), POINTER(c_int32), POINTER(c_int32)]),
    "gpuwire_darray_create": (_status, [_handle, c_int64, c_int64, c_int32, c_int32, c_int32, POINTER(_handle)]),
    "gpuwire_darray_create_nd": (_status, [_handle, c_int32, POINTER(c_int64), c_int64, c_int64, c_int32, c_int32,
                                           c_int32, POINTER(_handle)]),
    "gpuwire_darray_free": (_status, [_handle]),
    "gpuwire_darray_global_len": (_status, [_handle, POINTER(c_int64)]),
    "gpuwire_darray_local_len": (_status, [_handle, POINTER(c_int64)]),
    "gpuwire_darray_global_offset": (_status, [_handle, POINTER(c_int64)]),
    "gpuwire_darray_ndim": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_darray_halo": (_status, [_handle, POINTER(c_int64)]),
    "gpuwire_darray_dtype": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_darray_space": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_darray_partition": (_status, [_handle, POINTER(c_int32)]),
    "gpuwire_darray_data": (_status, [_handle, POINTER(c_void_p)]),
    "gpuwire_darray_local_lens": (_status, [_handle, POINTER(c_int64)]),
    "gpuwire_darray_shape": (_status, [_handle, POINTER(c_int64)]),
    "gpuwire_darray_local_shape": (_status, [_handle, POINTER(c_int64)]),
    "gpuwire_darray_local": (_status, [_handle, POINTER(_handle)]),
    "gpuwire_darray_local_with_halo": (_status, [_handle, POINTER(_handle)]),
    "gpuwire_darray_fill": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_darray_set_global": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_darray_allgather": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_darray_gather": (_status, [_handle, c_void_p, c_int32, c_void_p]),
    "gpuwire_darray_redistribute": (_status, [_handle, _handle, c_void_p]),
    "gpuwire_darray_bcast": (_status, [_handle, c_int32, c_void_p]),
    "gpuwire_darray_axpy": (_status, [c_void_p, _handle, _handle, c_void_p]),
    "gpuwire_darray_scale": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_darray_dot": (_status, [_handle, _handle, c_void_p, c_void_p]),
    "gpuwire_darray_norm": (_status, [_handle, c_int32, POINTER(c_double), c_void_p]),
    "gpuwire_darray_sum": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_darray_min": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_darray_max": (_status, [_handle, c_void_p, c_void_p]),
    "gpuwire_darray_halo_exchange": (_status, [_handle, c_int64, c_void_p]),
}


# `make install` writes the installed library's path here, in its copy of this file.
_INSTALLED_LIBRARY = None


def _load():
    path = os.environ.get("GPUWIRE_LIBRARY") or _INSTALLED_LIBRARY
    candidates = [path] if path else ["libgpuwire.so.0.1", "libgpuwire.so"]
    errors = []
    for name in candidates:
        try:
            # RTLD_GLOBAL: MPI's plugins look for libmpi's symbols globally.
            return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            errors.append(f"{name}: {e}")
    raise OSError("gpuwire: cannot load the library (set GPUWIRE_LIBRARY to libgpuwire.so): " + "; ".join(errors))


lib = _load()
for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _f = getattr(lib, _name)
    _f.restype = _restype
    _f.argtypes = _argtypes

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
    """A failed gpuwire call: .code is the gpuwire_status, the message gpuwire's."""

    def __init__(self, code, message):
        super().__init__(f"{message} (status {code}: {status_string(code)})")
        self.code = code


def _check(st):
    if st != SUCCESS:
        raise Error(st, last_error())


def _out(ctype, fn, *args):
    v = ctype()
    _check(fn(*args, ctypes.byref(v)))
    return v.value


# ---- library -----------------------------------------------------------------------------------


def init():
    """gpuwire_init (adopts MPI when mpi4py initialized it)."""
    _check(lib.gpuwire_init())


def finalize():
    """gpuwire_finalize: call it before MPI is finalized (mpi4py does that at exit)."""
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


def _describe_array(array):
    """(address, element count, gpuwire datatype, is_device, stream) of a contiguous array."""
    cai = getattr(array, "__cuda_array_interface__", None)
    if cai is not None:  # CuPy, PyTorch, Numba: device memory
        strides = cai.get("strides")
        flags = getattr(array, "flags", None)
        contiguous = strides is None or (flags is not None and (flags.c_contiguous or flags.f_contiguous))
        if not contiguous:
            raise ValueError("gpuwire: the array is not contiguous; a buffer must be the array's own "
                             "memory (make a contiguous copy and keep it alive)")
        _check_byte_order(cai["typestr"][0], cai["typestr"])
        typestr = cai["typestr"][1:]
        if typestr not in _TYPESTRS:
            raise ValueError(f"gpuwire: unsupported element type {cai['typestr']}")
        count = 1
        for n in cai["shape"]:
            count *= n
        ptr = array.data.ptr if hasattr(array, "data") and hasattr(array.data, "ptr") else cai["data"][0]
        stream = cai.get("stream")  # CUDA Array Interface v3: 1 = legacy, 2 = per-thread default
        if stream in (None, 0, 1):
            stream = None  # the legacy default stream, which gpuwire takes as NULL
        return ptr, count, _TYPESTRS[typestr], True, stream
    flags = getattr(array, "flags", None)
    if flags is None or not hasattr(array, "ctypes"):
        raise TypeError("gpuwire: expected a NumPy array or a __cuda_array_interface__ array")
    if not (flags.c_contiguous or flags.f_contiguous):
        raise ValueError("gpuwire: the array is not contiguous (a section such as a[:, 1]?); a buffer "
                         "must be the array's own memory: use numpy.ascontiguousarray and keep the copy")
    if not flags.writeable:
        raise ValueError("gpuwire: the array is read-only (a buffer may be received into)")
    if not array.dtype.isnative:
        _check_byte_order(array.dtype.byteorder, array.dtype.str)
    name = array.dtype.name
    if name not in _DTYPES:
        raise ValueError(f"gpuwire: unsupported dtype {name}")
    return array.ctypes.data, array.size, _DTYPES[name], False, None


_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"


def _check_byte_order(order, typestr):
    """Refuses an element type whose byte order ('<', '>'; '|' and '=' are native) is not this
    machine's: its bytes would be reduced and sent as native values."""
    if order not in ("|", "=", _NATIVE_ORDER):
        raise ValueError(f"gpuwire: the array's elements ({typestr}) are in {'big' if order == '>' else 'little'}-endian "
                         f"byte order, not this machine's ({sys.byteorder}-endian): gpuwire would reduce and send "
                         f"their bytes as native values. Convert it first: a.astype(a.dtype.newbyteorder('='))")


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
        """A buffer over a contiguous NumPy or CuPy array's own memory (no copy)."""
        ptr, count, dtype, _device, stream = _describe_array(array)
        if stream is None and _device:
            stream = _cupy_current_stream()
        return cls(_out(_handle, lib.gpuwire_buffer_wrap, ptr, count, dtype, space), keep=array, stream=stream)

    def view(self, offset, count):
        return Buffer(_out(_handle, lib.gpuwire_buffer_view, self.handle, offset, count), keep=self, stream=self.stream)

    def copy_from_host(self, array, stream=None):
        ptr, count, dtype, device, _ = _describe_array(array)
        self._check_shape(count, dtype, device, "gpuwire_buffer_copy_from_host")
        _check(lib.gpuwire_buffer_copy_from_host(self.handle, ptr, _stream_ptr(stream or self.stream)))

    def copy_to_host(self, array, stream=None):
        ptr, count, dtype, device, _ = _describe_array(array)
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

    def numpy(self):
        """A NumPy array over a host buffer's memory (no copy; valid while the buffer lives)."""
        import numpy

        names = {v: k for k, v in _DTYPES.items()}
        n = self.count()
        if self.space() == SPACE_DEVICE:
            raise ValueError("gpuwire: a device buffer has no NumPy view")
        if n == 0:
            return numpy.empty(0, dtype=names[self.dtype()])
        raw = (ctypes.c_char * (n * dtype_size(self.dtype()))).from_address(self.pointer())
        a = numpy.frombuffer(raw, dtype=names[self.dtype()])
        return a

    def free(self):
        if self.handle:
            h, self.handle = self.handle, 0
            self._keep = None
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


# Arrays of requests abandoned by the garbage collector: MPI may still read or write them.
_ABANDONED = []


class Request:
    """A nonblocking operation; keeps its buffer alive until it completes. Collected while still
    pending, it is released through gpuwire_request_free (never blocking longer than the
    communicator's timeout); one abandoned then warns (ResourceWarning), breaks its communicator
    and keeps its array alive for good."""

    def __init__(self, handle, keep):
        self.handle = _handle(handle)
        self._keep = keep

    def wait(self):
        try:
            _check(lib.gpuwire_wait(ctypes.byref(self.handle)))
        finally:
            if not self.handle.value:
                self._keep = None

    def test(self):
        flag = c_int32()
        _check(lib.gpuwire_test(ctypes.byref(self.handle), ctypes.byref(flag)))
        if flag.value:
            self._keep = None
        return flag.value != 0

    def active(self):
        return self.handle.value != 0

    def free(self):
        """gpuwire_request_free: completes the request within the communicator's timeout, else
        abandons it (raising Error ERROR_TIMEOUT or ERROR_COMM_BROKEN; the communicator is then
        broken and the array kept alive for good)."""
        if not self.handle.value:
            return
        st = lib.gpuwire_request_free(ctypes.byref(self.handle))
        if st in (ERROR_TIMEOUT, ERROR_COMM_BROKEN) and self._keep is not None:
            _ABANDONED.append(self._keep)  # MPI may still use its memory
        self._keep = None
        _check(st)

    def __del__(self):
        if getattr(self, "handle", None) is None or not self.handle.value or lib is None:
            return
        try:
            st = lib.gpuwire_request_free(ctypes.byref(self.handle))
            if st in (ERROR_TIMEOUT, ERROR_COMM_BROKEN):
                if self._keep is not None:
                    _ABANDONED.append(self._keep)
                warnings.warn(f"gpuwire.Request collected while pending: abandoned ({last_error()}); wait() for "
                              "requests before dropping them", ResourceWarning, stacklevel=2)
        except Exception:
            pass


def waitall(requests):
    """gpuwire_waitall over a list of Request: all are completed (NULL) afterwards."""
    arr = (_handle * len(requests))(*(r.handle.value for r in requests))
    st = lib.gpuwire_waitall(len(requests), arr)
    for r, h in zip(requests, arr):
        r.handle.value = h
        r._keep = None
    _check(st)


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
        if exc_type is None:
            _check(st)


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
        buf = ctypes.create_string_buffer(1024)
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
        b, new = _as_buffer(buf)
        try:
            _check(lib.gpuwire_send(self.handle, b.handle, dest, tag, _stream_ptr(stream or b.stream)))
        finally:
            if new:
                _done(b)

    def recv(self, buf, source, tag=0, stream=None):
        b, new = _as_buffer(buf)
        try:
            _check(lib.gpuwire_recv(self.handle, b.handle, source, tag, _stream_ptr(stream or b.stream)))
        finally:
            if new:
                _done(b)

    def isend(self, buf, dest, tag=0, stream=None):
        """Returns a Request; the array stays referenced until it completes."""
        b, _ = _as_buffer(buf)
        r = _out(_handle, lib.gpuwire_isend, self.handle, b.handle, dest, tag, _stream_ptr(stream or b.stream))
        return Request(r, keep=b)

    def irecv(self, buf, source, tag=0, stream=None):
        b, _ = _as_buffer(buf)
        r = _out(_handle, lib.gpuwire_irecv, self.handle, b.handle, source, tag, _stream_ptr(stream or b.stream))
        return Request(r, keep=b)

    def sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, stream=None):
        (s, sn), (r, rn) = _as_buffer(sendbuf), _as_buffer(recvbuf)
        try:
            _check(lib.gpuwire_sendrecv(self.handle, s.handle, dest, sendtag, r.handle, source, recvtag,
                                        _stream_ptr(stream or s.stream)))
        finally:
            for b, new in ((s, sn), (r, rn)):
                if new:
                    _done(b)

    def _collective(self, fn, bufs, args, stream):
        wrapped = [_as_buffer(b) for b in bufs]
        try:
            s = stream
            if s is None:
                s = next((b.stream for b, _ in wrapped if b is not None and b.stream is not None), None)
            handles = [b.handle if b is not None else 0 for b, _ in wrapped]
            _check(fn(self.handle, *handles, *args, _stream_ptr(s)))
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
            b, new = _as_buffer(sendbuf)
            try:
                _check(lib.gpuwire_reduce(self.handle, b.handle, b.handle, op, root, _stream_ptr(stream or b.stream)))
            finally:
                if new:
                    _done(b)
            return
        self._collective(lib.gpuwire_reduce, [sendbuf, recvbuf], [op, root], stream)

    def allreduce(self, sendbuf, recvbuf=None, op=SUM, stream=None):
        """In place when recvbuf is None (or the same object)."""
        if recvbuf is None or recvbuf is sendbuf:
            b, new = _as_buffer(sendbuf)
            try:
                _check(lib.gpuwire_allreduce(self.handle, b.handle, b.handle, op, _stream_ptr(stream or b.stream)))
            finally:
                if new:
                    _done(b)
            return
        self._collective(lib.gpuwire_allreduce, [sendbuf, recvbuf], [op], stream)

    def allgather(self, sendbuf, recvbuf, stream=None):
        self._collective(lib.gpuwire_allgather, [sendbuf, recvbuf], [], stream)

    def allgatherv(self, sendbuf, recvbuf, recvcounts=None, stream=None):
        """recvcounts: one count per rank, or None to let gpuwire exchange them."""
        counts = None
        if recvcounts is not None:
            if len(recvcounts) != self.size():
                raise ValueError(f"gpuwire_allgatherv: {len(recvcounts)} recvcounts for {self.size()} ranks")
            counts = (c_int64 * len(recvcounts))(*recvcounts)
        self._collective(lib.gpuwire_allgatherv, [sendbuf, recvbuf], [counts], stream)

    def reduce_scatter(self, sendbuf, recvbuf, op=SUM, stream=None):
        self._collective(lib.gpuwire_reduce_scatter, [sendbuf, recvbuf], [op], stream)

    def alltoall(self, sendbuf, recvbuf, stream=None):
        self._collective(lib.gpuwire_alltoall, [sendbuf, recvbuf], [], stream)

    def gather(self, sendbuf, recvbuf, root=0, stream=None):
        self._collective(lib.gpuwire_gather, [sendbuf, recvbuf], [root], stream)

    def scatter(self, sendbuf, recvbuf, root=0, stream=None):
        self._collective(lib.gpuwire_scatter, [sendbuf, recvbuf], [root], stream)

    # Nonblocking collectives: arguments as the blocking forms; each returns a Request, which
    # keeps the buffers (and the arrays they wrap) alive until it completes.
    def _icollective(self, fn, bufs, args, stream):
        wrapped = [_as_buffer(b)[0] for b in bufs]
        s = stream
        if s is None:
            s = next((b.stream for b in wrapped if b is not None and b.stream is not None), None)
        handles = [b.handle if b is not None else 0 for b in wrapped]
        r = _out(_handle, fn, self.handle, *handles, *args, _stream_ptr(s))
        return Request(r, keep=wrapped)

    def ibarrier(self, stream=None):
        return Request(_out(_handle, lib.gpuwire_ibarrier, self.handle, _stream_ptr(stream)), keep=None)

    def ibcast(self, buf, root=0, stream=None):
        return self._icollective(lib.gpuwire_ibcast, [buf], [root], stream)

    def ireduce(self, sendbuf, recvbuf, op=SUM, root=0, stream=None):
        """recvbuf matters at the root only (None elsewhere); the same object as sendbuf = in place."""
        if recvbuf is sendbuf:
            b, _ = _as_buffer(sendbuf)
            r = _out(_handle, lib.gpuwire_ireduce, self.handle, b.handle, b.handle, op, root, _stream_ptr(stream or b.stream))
            return Request(r, keep=b)
        return self._icollective(lib.gpuwire_ireduce, [sendbuf, recvbuf], [op, root], stream)

    def iallreduce(self, sendbuf, recvbuf=None, op=SUM, stream=None):
        """In place when recvbuf is None (or the same object)."""
        if recvbuf is None or recvbuf is sendbuf:
            b, _ = _as_buffer(sendbuf)
            r = _out(_handle, lib.gpuwire_iallreduce, self.handle, b.handle, b.handle, op, _stream_ptr(stream or b.stream))
            return Request(r, keep=b)
        return self._icollective(lib.gpuwire_iallreduce, [sendbuf, recvbuf], [op], stream)

    def iallgather(self, sendbuf, recvbuf, stream=None):
        return self._icollective(lib.gpuwire_iallgather, [sendbuf, recvbuf], [], stream)

    def iallgatherv(self, sendbuf, recvbuf, recvcounts=None, stream=None):
        """recvcounts: one count per rank (copied by the call), or None to let gpuwire exchange them."""
        counts = None
        if recvcounts is not None:
            if len(recvcounts) != self.size():
                raise ValueError(f"gpuwire_iallgatherv: {len(recvcounts)} recvcounts for {self.size()} ranks")
            counts = (c_int64 * len(recvcounts))(*recvcounts)
        return self._icollective(lib.gpuwire_iallgatherv, [sendbuf, recvbuf], [counts], stream)

    def ireduce_scatter(self, sendbuf, recvbuf, op=SUM, stream=None):
        return self._icollective(lib.gpuwire_ireduce_scatter, [sendbuf, recvbuf], [op], stream)

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
    """A gpuwire datatype from a gpuwire constant or anything numpy.dtype() takes."""
    if isinstance(dtype, int):
        return dtype
    name = _numpy().dtype(dtype).name
    if name not in _DTYPES:
        raise ValueError(f"gpuwire: unsupported dtype {name}")
    return _DTYPES[name]


class DArray:
    """Owns a gpuwire_darray: one global array split over the ranks of a Comm (gpuwire.h, section
    distributed arrays). Collective to create:

        x = gpuwire.DArray(comm, 11, np.float64)                    # 1-D, the default split
        g = gpuwire.DArray(comm, (n, n), np.float64, halo=1)        # N-D, split along axis 0
        b = gpuwire.DArray(comm, 16, np.float64, partition=gpuwire.PARTITION_BROADCAST)

    Host data is NumPy: set_global takes the global array (converted to the array's dtype; ranks
    that do not read it may pass None), allgather and gather return a new NumPy array of the global
    shape (or fill `out`, which must have the array's dtype and global size), numpy() views a host
    array's owned elements. Scalars (fill, axpy, scale) are converted to the array's dtype;
    results (dot, sum, min, max) come back as NumPy scalars of it, norm as a float. An `out` of
    another dtype or size is checked where the C function uses it: it goes to the C call as NULL,
    so that the call fails there (agreed across ranks in checking mode) and raises the mismatch.
    """

    def __init__(self, comm, shape, dtype=FLOAT64, space=SPACE_HOST, partition=PARTITION_SCATTER, local=DECIDE,
                 halo=0):
        code = _dtype_code(dtype)
        if isinstance(shape, int) and halo == 0:
            h = _out(_handle, lib.gpuwire_darray_create, comm.handle, shape, local, code, space, partition)
        else:
            dims = [shape] if isinstance(shape, int) else [int(d) for d in shape]
            arr = (c_int64 * max(len(dims), 1))(*dims)
            h = _out(_handle, lib.gpuwire_darray_create_nd, comm.handle, len(dims), arr, local, halo, code, space,
                     partition)
        self.handle = h
        self._comm = comm  # for the rank count (local_lens) and the rank (gather)
        self._nranks = comm.size()
        self._rank = comm.rank()

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
        if d not in names:
            raise ValueError(f"gpuwire: datatype {d} has no NumPy dtype")
        return _numpy().dtype(names[d])

    def numpy(self):
        """A NumPy view of a host array's owned elements, in the local shape (no copy; valid while
        this array lives)."""
        np = _numpy()
        if self.space() == SPACE_DEVICE:
            raise ValueError("gpuwire: a device array has no NumPy view")
        shape, dt = self.local_shape(), self._np_dtype()
        n = self.local_len()
        if n == 0:
            return np.empty(shape, dtype=dt)
        raw = (ctypes.c_char * (n * dt.itemsize)).from_address(self.data())
        return np.frombuffer(raw, dtype=dt).reshape(shape)

    # scalars: converted to the array's dtype; results as NumPy scalars of it
    def _scalar(self, value):
        return _numpy().array(value, dtype=self._np_dtype())

    def _result(self, fn, *args, stream=None):
        r = _numpy().zeros(1, dtype=self._np_dtype())
        _check(fn(*args, r.ctypes.data, _stream_ptr(stream)))
        return r[0]

    def fill(self, value, stream=None):
        v = self._scalar(value)
        _check(lib.gpuwire_darray_fill(self.handle, v.ctypes.data, _stream_ptr(stream)))

    def axpy(self, alpha, x, stream=None):
        """self = alpha x + self (gpuwire_darray_axpy(alpha, x, self))."""
        a = self._scalar(alpha)
        _check(lib.gpuwire_darray_axpy(a.ctypes.data, x.handle, self.handle, _stream_ptr(stream)))

    def scale(self, alpha, stream=None):
        a = self._scalar(alpha)
        _check(lib.gpuwire_darray_scale(self.handle, a.ctypes.data, _stream_ptr(stream)))

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
    def _host(self, what, array, call):
        """Calls `call(address)` with a host NumPy array of the array's dtype and global size, or
        with NULL when `array` is None or does not fit (the C call then fails where it uses it)."""
        fits = False
        if array is not None:
            np = _numpy()
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{what}: expected a NumPy array")
            fits = (array.dtype == self._np_dtype() and array.size == self.global_len()
                    and array.flags.c_contiguous)
        st = call(array.ctypes.data if fits and array.size else None)
        if st == ERROR_NULL_ARGUMENT and array is not None and not fits:
            if not array.dtype.isnative and array.dtype.newbyteorder("=") == self._np_dtype():
                raise Error(ERROR_DTYPE_MISMATCH, f"{what}: the array's elements ({array.dtype.str}) are not in "
                                                  f"this machine's byte order ({sys.byteorder}-endian); the "
                                                  f"distributed array holds native {self._np_dtype()}")
            if array.dtype != self._np_dtype():
                raise Error(ERROR_DTYPE_MISMATCH, f"{what}: the array holds {array.dtype}, the distributed "
                                                  f"array {self._np_dtype()}")
            if not array.flags.c_contiguous:
                raise Error(ERROR_INVALID_ARGUMENT, f"{what}: the array is not C-contiguous")
            raise Error(ERROR_COUNT_MISMATCH, f"{what}: the array has {array.size} elements, the "
                                              f"distributed array {self.global_len()}")
        _check(st)

    def set_global(self, src, stream=None):
        """This rank's part of the global array `src` (any array-like, converted to the array's
        dtype; None where it is not read)."""
        if src is not None:
            src = _numpy().ascontiguousarray(src, dtype=self._np_dtype())
        self._host("gpuwire_darray_set_global", src,
                   lambda p: lib.gpuwire_darray_set_global(self.handle, p, _stream_ptr(stream)))

    def allgather(self, out=None, stream=None):
        """The whole array on every rank: `out`, or a new NumPy array of the global shape."""
        if out is None:
            out = _numpy().empty(self.shape(), dtype=self._np_dtype())
        self._host("gpuwire_darray_allgather", out,
                   lambda p: lib.gpuwire_darray_allgather(self.handle, p, _stream_ptr(stream)))
        return out

    def gather(self, root=0, out=None, stream=None):
        """The whole array at `root` (a new NumPy array there unless `out` is given; None elsewhere)."""
        if out is None and self._rank == root:
            out = _numpy().empty(self.shape(), dtype=self._np_dtype())
        self._host("gpuwire_darray_gather", out,
                   lambda p: lib.gpuwire_darray_gather(self.handle, p, root, _stream_ptr(stream)))
        return out

    def redistribute(self, dst, stream=None):
        """Copies this array's values into `dst`, split as `dst` is."""
        _check(lib.gpuwire_darray_redistribute(self.handle, dst.handle, _stream_ptr(stream)))

    def bcast(self, root=0, stream=None):
        _check(lib.gpuwire_darray_bcast(self.handle, root, _stream_ptr(stream)))

    def halo_exchange(self, width=1, stream=None):
        _check(lib.gpuwire_darray_halo_exchange(self.handle, width, _stream_ptr(stream)))

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
