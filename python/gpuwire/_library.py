"""Finding and loading libgpuwire, with the prototypes of _capi.

Where, in this order (the first that loads wins):
  1. $GPUWIRE_LIBRARY, a path (then nothing else is tried);
  2. the library of the install prefix: `make install` writes its path into _INSTALLED_LIBRARY
     in the copy of this package it puts in PREFIX/share/gpuwire/python;
  3. pkg-config: LIBDIR/libgpuwire.so.X.Y of `pkg-config --variable=libdir gpuwire` (set
     PKG_CONFIG_PATH to PREFIX/lib/pkgconfig for a `pip install`ed package);
  4. sys.prefix/lib (a virtual environment or conda prefix gpuwire was installed into);
  5. the loader's search path (LD_LIBRARY_PATH, the system directories).
The library must be the version of the header this package was generated from (checked), and
link the same MPI as mpi4py.
"""

import ctypes
import os
import shutil
import subprocess
import sys

from . import _capi

# `make install` writes the installed library's path here, in its copy of this file.
_INSTALLED_LIBRARY = None

# The soname (build.rs): libgpuwire.so.0.MINOR below 1.0, libgpuwire.so.MAJOR from 1.0 on.
SONAME = (f"libgpuwire.so.0.{_capi.VERSION_MINOR}" if _capi.VERSION_MAJOR == 0
          else f"libgpuwire.so.{_capi.VERSION_MAJOR}")


def _pkg_config_libdir():
    if shutil.which("pkg-config") is None:
        return None
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "gpuwire"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = r.stdout.strip()
    return libdir if r.returncode == 0 and libdir else None


def candidates():
    """[(where, path or name)] in the order they are tried."""
    env = os.environ.get("GPUWIRE_LIBRARY")
    if env:
        return [("GPUWIRE_LIBRARY", env)]
    found = []
    if _INSTALLED_LIBRARY:
        found.append(("the install prefix", _INSTALLED_LIBRARY))
    libdir = _pkg_config_libdir()
    if libdir:
        found.append(("pkg-config", os.path.join(libdir, SONAME)))
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        path = os.path.join(prefix, "lib", SONAME)
        if os.path.exists(path):
            found.append(("sys.prefix", path))
    found.append(("the loader's search path", SONAME))
    return found


def integer(value):
    """`value` as a Python int when it is an integer of any kind (int, bool, a NumPy integer
    scalar or 0-d array: what has __index__), else None (ctypes then takes or refuses it)."""
    if type(value) is int:
        return value
    index = getattr(type(value), "__index__", None)
    if index is None:
        return None
    try:
        return index(value)
    except TypeError:  # a NumPy array of more than one element, or of floats
        return None


# The by-value integer arguments (ranks, tags, roots, colors, keys, codes, counts) and their bits.
_INTEGERS = {ctypes.c_int32: 32, ctypes.c_int64: 64}


def _checking(name, f):
    """`f`, the function `name` of the library, or where it takes integers by value a function
    that first refuses one that does not fit with OverflowError naming the function and the
    argument, then calls `f`. ctypes alone would keep an integer's low bits (rank 2**40 became
    rank 0, a count of np.uint64(2**64 - 1) a count of -1), and an argument type that refuses
    one in from_param raises ctypes.ArgumentError, not OverflowError."""
    argnames = _capi._ARGUMENTS[name]
    checks = tuple((i, -(1 << (bits - 1)), 1 << (bits - 1), bits, argnames[i])
                   for i, bits in enumerate(_INTEGERS.get(a) for a in f.argtypes) if bits)
    if not checks:
        return f
    nargs = len(f.argtypes)

    def call(*args):
        if len(args) == nargs:  # else ctypes says what is wrong
            for i, lo, hi, bits, arg in checks:
                v = args[i]
                if type(v) is not int or not lo <= v < hi:
                    n = integer(v)
                    if n is not None and not lo <= n < hi:
                        raise OverflowError(f"{name}: {arg} = {n} does not fit the C argument's int{bits}_t")
        return f(*args)

    call.__name__ = call.__qualname__ = name
    call.__wrapped__, call.argtypes, call.restype = f, f.argtypes, f.restype
    return call


def load():
    """(the ctypes.CDLL with every prototype set, where it was found)."""
    errors = []
    for where, name in candidates():
        try:
            # RTLD_GLOBAL: MPI's plugins look for libmpi's symbols globally.
            lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            errors.append(f"{name} ({where}): {e}")
            continue
        missing = [f for f in _capi._PROTOTYPES if not hasattr(lib, f)]
        if missing:
            errors.append(f"{name} ({where}): lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                          "(an older gpuwire?)")
            continue
        for fname, (restype, argtypes) in _capi._PROTOTYPES.items():
            f = getattr(lib, fname)
            f.restype = restype
            f.argtypes = argtypes
            setattr(lib, fname, _checking(fname, f))
        v = [ctypes.c_int32() for _ in range(3)]
        lib.gpuwire_get_version(*(ctypes.byref(x) for x in v))
        have = tuple(x.value for x in v)
        if have[:2] != (_capi.VERSION_MAJOR, _capi.VERSION_MINOR):
            errors.append(f"{name} ({where}): gpuwire {'.'.join(map(str, have))}, this package is for "
                          f"{_capi.VERSION_STRING}")
            continue
        return lib, f"{name} ({where})"
    raise OSError("gpuwire: cannot load libgpuwire (set GPUWIRE_LIBRARY to its path, or PKG_CONFIG_PATH to "
                  "PREFIX/lib/pkgconfig): " + "; ".join(errors))
