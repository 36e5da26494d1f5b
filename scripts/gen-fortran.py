#!/usr/bin/env python3
"""gen-fortran.py: generates the mechanical part of gpuwire's Fortran interface from
include/gpuwire.h (which `cargo build` regenerates with cbindgen).

Writes three files included by the hand-written include/gpuwire.f90 (Fortran INCLUDE lines, so a
program still compiles the one file gpuwire.f90), and the test of the per-type procedures
(tests/fortran/test_kinds.inc, included by tests/fortran/test_fortran.f90):

  include/gpuwire_c.inc          modules gpuwire_types (every GPUWIRE_* constant, the handle
                                 types, gpuwire_config) and gpuwire_c (one bind(C) interface per
                                 function of the header, with the C names and arguments)
  include/gpuwire_generics.inc   the generic interfaces of module gpuwire whose specifics differ
                                 only in the Fortran type of an array or scalar (and their
                                 `private` statement)
  include/gpuwire_kinds.inc      those specifics: one template per generic (TEMPLATES below),
                                 instantiated for each Fortran type in KINDS (and, for
                                 gpuwire_buffer_wrap, for each rank 0 to 15)

What the header cannot say is in the tables below: which pointer arguments are arrays, which are
optional, which are read and written (ARRAYS, OPTIONAL, INOUT), and the Fortran types that
correspond to gpuwire's datatypes (KINDS).

usage: scripts/gen-fortran.py              regenerate the files (run after `cargo build`)
       scripts/gen-fortran.py --check      exit 1, with a diff, if a committed file differs from
                                           what the header generates (`make test` runs this)
       scripts/gen-fortran.py --self-test  check that changes of the header change the output
Python 3 standard library only.
"""

import argparse
import difflib
import os
import re
import sys
import textwrap

# ---- what the header cannot say -----------------------------------------------------------------

# Pointer arguments that are arrays (Fortran `name(*)`); char * arguments always are.
ARRAYS = {
    ("gpuwire_waitall", "requests"),
    ("gpuwire_allgatherv", "recvcounts"),
    ("gpuwire_iallgatherv", "recvcounts"),
    *[(f, a) for f in ("gpuwire_alltoallv", "gpuwire_ialltoallv") for a in ("sendcounts", "sdispls", "recvcounts", "rdispls")],
    *[(f, a) for f in ("gpuwire_gatherv", "gpuwire_igatherv") for a in ("recvcounts", "displs")],
    *[(f, a) for f in ("gpuwire_scatterv", "gpuwire_iscatterv") for a in ("sendcounts", "displs")],
    ("gpuwire_reduce_scatterv", "recvcounts"),
    ("gpuwire_ireduce_scatterv", "recvcounts"),
    ("gpuwire_darray_create_nd", "shape"),
    ("gpuwire_darray_local_lens", "lens"),
    ("gpuwire_darray_shape", "shape"),
    ("gpuwire_darray_local_shape", "shape"),
    ("gpuwire_waitany", "requests"),
    ("gpuwire_testany", "requests"),
    ("gpuwire_testall", "requests"),
    ("gpuwire_testall", "statuses"),
    *[(f, a) for f in ("gpuwire_waitsome", "gpuwire_testsome") for a in ("requests", "indices", "statuses")],
    ("gpuwire_buffer_view_subarray", "sizes"),
    ("gpuwire_buffer_view_subarray", "subsizes"),
    ("gpuwire_buffer_view_subarray", "starts"),
    ("gpuwire_buffer_wrap_strided", "lens"),
    ("gpuwire_buffer_wrap_strided", "strides"),
}
# Pointer arguments that may be NULL (Fortran `optional`: absent = NULL).
OPTIONAL = {
    ("gpuwire_comm_create", "cfg"),
    ("gpuwire_comm_world", "cfg"),
    ("gpuwire_allgatherv", "recvcounts"),
    ("gpuwire_iallgatherv", "recvcounts"),
    ("gpuwire_waitany", "status"),
    ("gpuwire_testany", "status"),
    ("gpuwire_testall", "statuses"),
    ("gpuwire_waitsome", "statuses"),
    ("gpuwire_testsome", "statuses"),
}
# Non-const pointer arguments that are read and written (intent(inout)); the others are
# outputs (intent(out)).
INOUT = {
    ("gpuwire_wait", "request"),
    ("gpuwire_test", "request"),
    ("gpuwire_request_free", "request"),
    ("gpuwire_waitall", "requests"),
    ("gpuwire_wait_status", "request"),
    ("gpuwire_test_status", "request"),
    ("gpuwire_waitany", "requests"),
    ("gpuwire_testany", "requests"),
    ("gpuwire_testall", "requests"),
    ("gpuwire_waitsome", "requests"),
    ("gpuwire_testsome", "requests"),
    ("gpuwire_cancel", "request"),
}

# The Fortran types of gpuwire's datatypes: (suffix, Fortran type, datatype constant, class).
# Class: i integer, r real, c complex (for the templates' `kinds`).
KINDS = [
    ("i8", "integer(int8)", "GPUWIRE_INT8", "i"),
    ("i32", "integer(int32)", "GPUWIRE_INT32", "i"),
    ("i64", "integer(int64)", "GPUWIRE_INT64", "i"),
    ("r32", "real(real32)", "GPUWIRE_FLOAT32", "r"),
    ("r64", "real(real64)", "GPUWIRE_FLOAT64", "r"),
    ("c32", "complex(real32)", "GPUWIRE_COMPLEX64", "c"),
    ("c64", "complex(real64)", "GPUWIRE_COMPLEX128", "c"),
]
MAX_RANK = 15  # Fortran 2018's
# gpuwire_buffer_wrap takes non-contiguous sections (A(2, :), A(:, j, :)) of ranks 1 to this one,
# as strided buffers (gpuwire_buffer_wrap_strided); higher ranks need simply contiguous arrays.
SECTION_RANK = 7

# ---- the per-type procedures of module gpuwire ----------------------------------------------------
#
# One template per generic. `name` is the specific's name ({k}: the kind suffix), `kinds` the
# classes it exists for, `args` its dummy arguments, `decls` their declarations ({T}: the
# Fortran type; {dims}: the rank's dimensions, for `ranks`), `body` its statements ({DT}: the
# datatype constant). The helpers called (wrap_address, copy_host, darray_host, darray_scalar,
# host_collective, first_address) are hand-written in gpuwire.f90.

OPT = ["type(c_ptr), intent(in), optional :: stream", "integer, intent(out), optional :: ierror"]
TEMPLATES = [
    dict(
        generic="gpuwire_buffer_wrap",
        comment="wrap(array, buf [, space] [, ierror]): a TARGET or POINTER scalar, an array of "
        "rank 1 to 15, or an array section of rank 1 to 7 (non-contiguous: a strided buffer over "
        "the section's elements where they are)",
        name="wrap_{k}_{rank}",
        kinds="irc",
        ranks=True,
        args="array, buf, space, ierror",
        decls=[
            "{T}, pointer{contiguous}, intent(in) :: array{dims}",
            "type(gpuwire_buffer), intent(out) :: buf",
            "integer, intent(in), optional :: space",
            "integer, intent(out), optional :: ierror",
        ],
        section_decls=["integer :: lb({rank})", "integer(int64) :: st({rank})"],
        body=[
            "if (associated(array)) then",
            "  call wrap_address(first_address(array), {count}, {DT}, buf, space, ierror)",
            "else ! a disassociated pointer: GPUWIRE_ERROR_NULL_ARGUMENT",
            "  call wrap_address(c_null_ptr, 1_int64, {DT}, buf, space, ierror)",
            "end if",
        ],
    ),
    dict(
        generic="gpuwire_buffer_copy_from_host",
        name="copy_from_{k}",
        kinds="irc",
        args="buf, src, stream, ierror",
        decls=["type(gpuwire_buffer), intent(in) :: buf", "{T}, contiguous, target, intent(in) :: src(..)"] + OPT,
        body=["call copy_host(.true., buf, first_address(src), size(src, kind=int64), {DT}, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_buffer_copy_to_host",
        name="copy_to_{k}",
        kinds="irc",
        args="buf, dst, stream, ierror",
        decls=["type(gpuwire_buffer), intent(in) :: buf", "{T}, contiguous, target, intent(inout) :: dst(..)"] + OPT,
        body=["call copy_host(.false., buf, first_address(dst), size(dst, kind=int64), {DT}, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_allreduce",
        comment="allreduce(comm, sendbuf, recvbuf, op [, stream] [, ierror]) on Fortran variables "
        "(scalars or arrays, host memory; blocking)",
        name="allreduce_{k}",
        kinds="irc",
        args="comm, sendbuf, recvbuf, op, stream, ierror",
        decls=[
            "type(gpuwire_comm), intent(in) :: comm",
            "{T}, contiguous, target, intent(in) :: sendbuf(..)",
            "{T}, contiguous, target, intent(inout) :: recvbuf(..)",
            "integer, intent(in) :: op",
        ]
        + OPT,
        body=[
            "call host_collective(1, comm, first_address(sendbuf), size(sendbuf, kind=int64), &",
            "  first_address(recvbuf), size(recvbuf, kind=int64), {DT}, op, 0, stream, ierror)",
        ],
    ),
    dict(
        generic="gpuwire_allreduce",
        comment="allreduce(comm, GPUWIRE_IN_PLACE, buffer, op [, stream] [, ierror]): in place, as "
        "MPI_IN_PLACE",
        name="allreduce_in_place_{k}",
        kinds="irc",
        args="comm, sendbuf, recvbuf, op, stream, ierror",
        decls=[
            "type(gpuwire_comm), intent(in) :: comm",
            "type(gpuwire_in_place_marker), intent(in) :: sendbuf",
            "{T}, contiguous, target, intent(inout) :: recvbuf(..)",
            "integer, intent(in) :: op",
        ]
        + OPT,
        body=[
            "call host_collective(sendbuf%collective, comm, first_address(recvbuf), &",
            "  size(recvbuf, kind=int64), first_address(recvbuf), size(recvbuf, kind=int64), {DT}, op, &",
            "  0, stream, ierror)",
        ],
    ),
    dict(
        generic="gpuwire_reduce",
        comment="reduce(comm, sendbuf, recvbuf, op, root [, stream] [, ierror]) on Fortran variables "
        "(recvbuf is used at the root only: other ranks may pass any variable of the type)",
        name="reduce_{k}",
        kinds="irc",
        args="comm, sendbuf, recvbuf, op, root, stream, ierror",
        decls=[
            "type(gpuwire_comm), intent(in) :: comm",
            "{T}, contiguous, target, intent(in) :: sendbuf(..)",
            "{T}, contiguous, target, intent(inout) :: recvbuf(..)",
            "integer, intent(in) :: op, root",
        ]
        + OPT,
        body=[
            "call host_collective(3, comm, first_address(sendbuf), size(sendbuf, kind=int64), &",
            "  first_address(recvbuf), size(recvbuf, kind=int64), {DT}, op, root, stream, ierror)",
        ],
    ),
    dict(
        generic="gpuwire_allgather",
        comment="allgather(comm, sendbuf, recvbuf [, stream] [, ierror]) on Fortran variables: "
        "recvbuf holds every rank's sendbuf, in rank order",
        name="allgather_{k}",
        kinds="irc",
        args="comm, sendbuf, recvbuf, stream, ierror",
        decls=[
            "type(gpuwire_comm), intent(in) :: comm",
            "{T}, contiguous, target, intent(in) :: sendbuf(..)",
            "{T}, contiguous, target, intent(inout) :: recvbuf(..)",
        ]
        + OPT,
        body=[
            "call host_collective(4, comm, first_address(sendbuf), size(sendbuf, kind=int64), &",
            "  first_address(recvbuf), size(recvbuf, kind=int64), {DT}, 0, 0, stream, ierror)",
        ],
    ),
    dict(
        generic="gpuwire_bcast",
        comment="bcast(comm, buffer, root [, stream] [, ierror]) on a Fortran variable (a scalar or "
        "an array, host memory; blocking)",
        name="bcast_{k}",
        kinds="irc",
        args="comm, buffer, root, stream, ierror",
        decls=["type(gpuwire_comm), intent(in) :: comm", "{T}, contiguous, target, intent(inout) :: buffer(..)", "integer, intent(in) :: root"] + OPT,
        body=[
            "call host_collective(5, comm, first_address(buffer), size(buffer, kind=int64), &",
            "  first_address(buffer), size(buffer, kind=int64), {DT}, 0, root, stream, ierror)",
        ],
    ),
    dict(
        generic="gpuwire_darray_set_global",
        name="darray_set_global_{k}",
        kinds="irc",
        args="darray, src, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: darray", "{T}, contiguous, target, intent(in) :: src(..)"] + OPT,
        body=["call darray_host(1, darray, first_address(src), size(src, kind=int64), {DT}, 0, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_allgather",
        name="darray_allgather_{k}",
        kinds="irc",
        args="darray, dst, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: darray", "{T}, contiguous, target, intent(inout) :: dst(..)"] + OPT,
        body=["call darray_host(2, darray, first_address(dst), size(dst, kind=int64), {DT}, 0, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_gather",
        name="darray_gather_{k}",
        kinds="irc",
        args="darray, dst, root, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: darray", "{T}, contiguous, target, intent(inout) :: dst(..)", "integer, intent(in) :: root"] + OPT,
        body=["call darray_host(3, darray, first_address(dst), size(dst, kind=int64), {DT}, root, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_fill",
        name="darray_fill_{k}",
        kinds="irc",
        args="darray, value, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: darray", "{T}, target, intent(in) :: value"] + OPT,
        body=["call darray_scalar(1, darray, darray, c_loc(value), {DT}, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_scale",
        name="darray_scale_{k}",
        kinds="rc",
        args="darray, alpha, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: darray", "{T}, target, intent(in) :: alpha"] + OPT,
        body=["call darray_scalar(2, darray, darray, c_loc(alpha), {DT}, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_axpy",
        name="darray_axpy_{k}",
        kinds="rc",
        args="alpha, x, y, stream, ierror",
        decls=["{T}, target, intent(in) :: alpha", "type(gpuwire_darray), intent(in) :: x, y"] + OPT,
        body=["call darray_scalar(3, x, y, c_loc(alpha), {DT}, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_dot",
        name="darray_dot_{k}",
        kinds="rc",
        args="x, y, result, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: x, y", "{T}, target, intent(out) :: result"] + OPT,
        body=["call darray_scalar(4, x, y, c_loc(result), {DT}, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_sum",
        name="darray_sum_{k}",
        kinds="irc",
        args="darray, result, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: darray", "{T}, target, intent(out) :: result"] + OPT,
        body=["call darray_scalar(5, darray, darray, c_loc(result), {DT}, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_min",
        name="darray_min_{k}",
        kinds="ir",
        args="darray, result, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: darray", "{T}, target, intent(out) :: result"] + OPT,
        body=["call darray_scalar(6, darray, darray, c_loc(result), {DT}, stream, ierror)"],
    ),
    dict(
        generic="gpuwire_darray_max",
        name="darray_max_{k}",
        kinds="ir",
        args="darray, result, stream, ierror",
        decls=["type(gpuwire_darray), intent(in) :: darray", "{T}, target, intent(out) :: result"] + OPT,
        body=["call darray_scalar(7, darray, darray, c_loc(result), {DT}, stream, ierror)"],
    ),
]

# ---- reading the header -------------------------------------------------------------------------


class Header:
    """Constants, enums, handle types, structs and functions of gpuwire.h, with doc comments."""

    def __init__(self, text):
        self.defines = []  # (name, value text, doc)
        self.enums = []  # (C type name, doc, [(name, value)])
        self.handles = []  # (name, doc)
        self.structs = []  # (name, doc, [(C type, field, doc)])
        self.functions = []  # (name, return type, [(C type, name)])
        self.int32_types = {"int32_t", "int", "gpuwire_status"}
        # Conditional compilation (the enums' C23/C++ underlying type, extern "C") is left out:
        # every branch declares the same ABI.
        kept = []
        for line in text.splitlines():
            if re.match(r"\s*#\s*(if|ifdef|ifndef|else|elif|endif|include)\b", line):
                continue
            if re.match(r'\s*extern "C" \{|\}\s*// extern "C"', line):
                continue
            kept.append(line)
        text = "\n".join(kept) + "\n"
        # Declarations with the doc comment right before them.
        pos = 0
        doc = ""
        token = re.compile(r"/\*\*(.*?)\*/|/\*.*?\*/|//[^\n]*|(#[^\n]*)|([^;#/{}]*(?:\{[^}]*\}[^;#/]*)?;)", re.S)
        while pos < len(text):
            m = token.match(text, pos)
            if not m:
                pos += 1
                continue
            pos = m.end()
            if m.group(1) is not None:
                doc = clean_doc(m.group(1))
            elif m.group(2) is not None:
                line = m.group(2)
                d = re.match(r"#define\s+(GPUWIRE_\w+)[ \t]+(\S.*?)\s*$", line)
                if d and d.group(1) != "GPUWIRE_H":
                    # A NULL handle as a value of its struct: C's ((gpuwire_x){N}) and C++'s
                    # (gpuwire_x{N}), defined once for each language: its value is N, once.
                    value = d.group(2)
                    v = re.fullmatch(r"\(*\s*(?:\(\s*gpuwire_\w+\s*\)|gpuwire_\w+)\s*\{\s*(-?\d+)\s*\}\s*\)*", value)
                    if v:
                        value = v.group(1)
                    if all(n != d.group(1) for n, _, _ in self.defines):
                        self.defines.append((d.group(1), value, doc))
                # A doc comment before `#ifdef __cplusplus` documents the defines inside.
                if not re.match(r"#\s*(ifdef|ifndef|if|else|endif)\b", line):
                    doc = ""
            elif m.group(3) is not None:
                self.declaration(m.group(3), doc)
                doc = ""

    def declaration(self, raw, doc):
        decl = " ".join(re.sub(r"([;,(){}*:])", r" \1 ", re.sub(r"/\*.*?\*/", " ", raw, flags=re.S)).split())
        m = re.fullmatch(r"typedef enum \{(.*)\} (\w+) ;", decl) or re.fullmatch(r"enum (\w+)(?: : int32_t)? \{(.*)\} ;", decl)
        if m:
            body, name = (m.group(1), m.group(2)) if decl.startswith("typedef") else (m.group(2), m.group(1))
            values = re.findall(r"(GPUWIRE_\w+) = (-?\d+)", body)
            self.enums.append((name, doc, [(n, int(v)) for n, v in values]))
            self.int32_types.add(name)
            return
        m = re.fullmatch(r"typedef (?:int32_t|enum \w+) (\w+) ;", decl)
        if m:
            self.int32_types.add(m.group(1))
            return
        # A handle: a 64-bit integer, a struct of one 64-bit integer passed by value, or a
        # pointer to an opaque struct (Vulkan's non-dispatchable handles on 64-bit machines).
        m = re.fullmatch(r"typedef uint64_t (\w+) ;", decl) or re.fullmatch(r"typedef struct \w+ \* (\w+) ;", decl)
        if m:
            self.handles.append((m.group(1), doc))
            return
        m = re.fullmatch(r"typedef struct (?:\w+ )?\{(.*)\} (\w+) ;", decl)
        if m:
            body = raw[raw.index("{") + 1 : raw.rindex("}")]
            fields = re.findall(r"(?:/\*\*(.*?)\*/)?\s*(\w+)\s+(\w+)\s*;", body, re.S)
            if len(fields) == 1 and fields[0][1] == "uint64_t":
                self.handles.append((m.group(2), doc))  # a one-field handle struct: one 64-bit value
            else:
                self.structs.append((m.group(2), doc, [(t, n, clean_doc(d)) for d, t, n in fields]))
            return
        m = re.fullmatch(r"(const char \*|gpuwire_status) (gpuwire_\w+) \( ?(.*?) ?\) ;", decl)
        if m:
            args = [] if m.group(3).strip() in ("", "void") else [a.strip() for a in m.group(3).split(" , ")]
            parsed = []
            for a in args:
                am = re.fullmatch(r"(.*?[\s\*])(\w+)", a)
                parsed.append((" ".join(am.group(1).replace("*", " * ").split()), am.group(2)))
            self.functions.append((m.group(2), m.group(1).strip(), parsed))


def clean_doc(raw):
    lines = [re.sub(r"^\s*\*? ?", "", l).rstrip() for l in raw.strip().splitlines()]
    return " ".join(" ".join(lines).split())


def first_sentence(doc):
    m = re.match(r"(.+?\.)\s+[A-Z`]", doc)
    return (m.group(1) if m else doc).rstrip(".")


# ---- writing Fortran ------------------------------------------------------------------------------

WIDTH = 100


def comment(text, indent):
    pre = " " * indent + "! "
    return textwrap.wrap(text, WIDTH - len(pre), initial_indent=pre, subsequent_indent=pre, break_on_hyphens=False) if text else []


def continued(head, items, indent, cont_indent):
    """`head` followed by `items`, comma-separated, wrapped at WIDTH with `&` continuations."""
    lines, cur = [], " " * indent + head
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        add = piece if i == 0 else " " + piece
        if i > 0 and len(cur + add) + 2 > WIDTH:
            lines.append(cur + " &")
            cur = " " * cont_indent + piece
        else:
            cur += add
    lines.append(cur)
    return lines


def c_to_fortran(func, ctype, name, h):
    """(declaration, iso_c_binding names used, extra imports) of one argument of a bind(C)
    interface."""
    words = ctype.replace("*", " * ").split()
    stars = words.count("*")
    const = "const" in words
    base = [w for w in words if w not in ("const", "*")][0]
    handles = {n for n, _ in h.handles}
    structs = {n for n, _, _ in h.structs}
    if base == "void" and stars == 1:
        return "type(c_ptr), value", {"c_ptr"}, set()
    if base == "void" and stars == 2:
        return "type(c_ptr), intent(out)", {"c_ptr"}, set()
    if base == "char" and stars == 1:  # a string: a NUL-terminated input, or a buffer to fill
        return f"character(kind=c_char), intent({'in' if const else 'out'})", {"c_char"}, set()
    if base in handles:
        spec, names, extra = "integer(gpuwire_handle_kind)", set(), {"gpuwire_handle_kind"}
    elif base in structs:
        spec, names, extra = f"type({base})", set(), {base}
    elif base in h.int32_types:
        spec, names, extra = "integer(c_int32_t)", {"c_int32_t"}, set()
    else:
        # Fortran has no unsigned integers: uint64_t and uint32_t pass as the signed type of the
        # same size (the same ABI).
        scalar = {"int64_t": "c_int64_t", "uint64_t": "c_int64_t", "uint32_t": "c_int32_t", "size_t": "c_size_t",
                  "double": "c_double", "float": "c_float"}.get(base)
        if scalar is None:
            raise SystemExit(f"gen-fortran.py: {func}: cannot map the C type '{ctype}' (teach c_to_fortran)")
        spec = ("real" if base in ("double", "float") else "integer") + f"({scalar})"
        names, extra = {scalar}, set()
    if stars == 0:
        return spec + ", value", names, extra
    if stars != 1:
        raise SystemExit(f"gen-fortran.py: {func}: cannot map the C type '{ctype}'")
    intent = "in" if const else ("inout" if (func, name) in INOUT else "out")
    decl = f"{spec}, intent({intent})"
    if (func, name) in OPTIONAL:
        decl += ", optional"
    return decl, names, extra


def gen_c_inc(h, header_name):
    out = [
        f"! GENERATED by scripts/gen-fortran.py from include/{header_name}: do not edit. Change the",
        "! Rust sources (the header follows from them), then `cargo build && python3 scripts/gen-fortran.py`.",
        "! Included by gpuwire.f90: modules gpuwire_types and gpuwire_c (see the top of gpuwire.f90).",
        "",
        "! ---------------------------------------------------------------------------------------------",
        "module gpuwire_types",
        "  use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_int64_t, c_double",
        "  implicit none",
        "  private",
    ]
    out += continued("public :: ", ["gpuwire_handle_kind"] + [n for n, _ in h.handles] + [n for n, _, _ in h.structs], 2, 4)
    out.append("  public :: operator(==), operator(/=)")
    handle_nulls = {}
    for name, value, doc in h.defines:
        for hn, _ in h.handles:
            if name == hn.upper() + "_NULL":
                handle_nulls[hn] = (name, value, doc)
    plain = [(n, v, d) for n, v, d in h.defines if (n, v, d) not in handle_nulls.values()]
    for name, value, doc in plain:
        if doc:
            out.append("")
            out += comment(first_sentence(doc) + ".", 2)
        if value.startswith('"'):
            out.append(f"  character(len=*), parameter, public :: {name} = {value}")
        else:
            v = value.strip("()")
            # A local length, a rank or a color: default integers (GPUWIRE_DECIDE goes with
            # default-integer and int64 lengths alike); the rest int32 as the C enums.
            kind = "integer" if name in ("GPUWIRE_DECIDE",) or name.startswith("GPUWIRE_VERSION_") else "integer(c_int32_t)"
            out.append(f"  {kind}, parameter, public :: {name} = {v}")
    for cname, doc, values in h.enums:
        out.append("")
        out += comment(f"{cname}: {first_sentence(doc)}.", 2)
        if cname == "gpuwire_dtype":
            out += comment("The Fortran types of module gpuwire's array and scalar forms: " + ", ".join(f"{t} {d}" for _, t, d, _ in KINDS) + ".", 2)
        kind = "integer(c_int)" if cname == "gpuwire_status" else "integer(c_int32_t)"
        for n, v in values:
            out.append(f"  {kind}, parameter, public :: {n} = {v}")
    out += [
        "",
        "  ! Handles: 64-bit values in C; every value gpuwire issues fits an integer(c_int64_t).",
        "  integer, parameter :: gpuwire_handle_kind = c_int64_t",
    ]
    for name, doc in h.handles:
        out.append("")
        out += comment(first_sentence(doc) + ". Compare handles with == and /=.", 2)
        out += [f"  type :: {name}", "    integer(gpuwire_handle_kind) :: handle = 0", f"  end type {name}"]
    out.append("")
    for hn, (name, value, doc) in handle_nulls.items():
        if doc:
            out += comment(first_sentence(doc) + ".", 2)
        out += [f"  type({hn}), parameter, public :: &", f"    {name} = {hn}({value}_gpuwire_handle_kind)"]
    for sname, doc, fields in h.structs:
        out.append("")
        out += comment(f"{sname}: the C struct, field for field. {doc}", 2)
        out.append(f"  type, bind(C) :: {sname}")
        for ctype, fname, fdoc in fields:
            spec = {"int32_t": "integer(c_int32_t)", "int64_t": "integer(c_int64_t)", "double": "real(c_double)"}.get(ctype)
            if spec is None:
                raise SystemExit(f"gen-fortran.py: struct {sname}: cannot map the field type '{ctype}'")
            out += comment(first_sentence(fdoc) + ".", 4)
            out.append(f"    {spec} :: {fname}")
        out.append(f"  end type {sname}")
    out += ["", "  interface operator(==)"]
    out += continued("module procedure ", [n.replace("gpuwire_", "") + "_eq" for n, _ in h.handles], 4, 6)
    out += ["  end interface", "  interface operator(/=)"]
    out += continued("module procedure ", [n.replace("gpuwire_", "") + "_ne" for n, _ in h.handles], 4, 6)
    out += ["  end interface", "", "contains"]
    for name, _ in h.handles:
        for op, sym in (("eq", "=="), ("ne", "/=")):
            f = name.replace("gpuwire_", "") + "_" + op
            out += ["", f"  elemental logical function {f}(a, b)", f"    type({name}), intent(in) :: a, b", f"    {f} = a%handle {sym} b%handle", f"  end function {f}"]
    out += ["", "end module gpuwire_types", ""]

    # Module gpuwire_c.
    out += [
        "! ---------------------------------------------------------------------------------------------",
        f"! The C functions themselves: the names, arguments and results of include/{header_name} (whose",
        "! comments document them). Statuses are integer(c_int) results; handles are",
        "! integer(gpuwire_handle_kind) values; optional arguments are passed as NULL when absent.",
        "module gpuwire_c",
        "  use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_int64_t, c_size_t, c_double, &",
        "    c_ptr, c_char",
        "  use gpuwire_types, only: " + ", ".join(["gpuwire_handle_kind"] + [n for n, _, _ in h.structs]),
        "  implicit none",
        "  private",
    ]
    out += continued("public :: ", [f for f, _, _ in h.functions], 2, 4)
    out += ["", "  interface"]
    for i, (fname, ret, args) in enumerate(h.functions):
        if i:
            out.append("")
        names = [a for _, a in args]
        head = f"function {fname}(" + ", ".join(names) + ")"
        bind = f'bind(C, name="{fname}") result({"str" if ret.startswith("const char") else "st"})'
        if len("    " + head + " " + bind) <= WIDTH:
            out.append("    " + head + " " + bind)
        else:
            out += [l for l in continued(f"function {fname}(", [n for n in names], 4, 8)]
            out[-1] += ") &"
            out.append("        " + bind)
        decls, imports, extra = [], set(), set()
        for ctype, a in args:
            d, n, e = c_to_fortran(fname, ctype, a, h)
            imports |= n
            extra |= e
            dims = "(*)" if ((fname, a) in ARRAYS or ctype.replace(" ", "") in ("char*",)) else ""
            decls.append(f"      {d} :: {a}{dims}")
        if ret.startswith("const char"):
            imports.add("c_ptr")
            decls.append("      type(c_ptr) :: str")
        else:
            imports.add("c_int")
            decls.append("      integer(c_int) :: st")
        out += continued("import :: ", sorted(imports) + sorted(extra), 6, 8)
        out += decls
        out.append(f"    end function {fname}")
    out += ["  end interface", "", "end module gpuwire_c"]
    return "\n".join(out) + "\n"


def section_body(rank):
    """The body of gpuwire_buffer_wrap's specific of `rank` that also takes non-contiguous
    sections: their lengths, and strides measured between elements' addresses."""

    def at(bump):
        return "array(" + ", ".join(f"lb({d})" + (" + 1" if d == bump else "") for d in range(1, rank + 1)) + ")"

    # Contiguity is read from the elements' addresses, not from is_contiguous: gfortran 12 calls
    # a component section (t(:)%x, z%re) contiguous, and its elements would be taken as packed.
    out = [
        "if (.not. associated(array)) then ! a disassociated pointer: GPUWIRE_ERROR_NULL_ARGUMENT",
        "  call wrap_address(c_null_ptr, 1_int64, {DT}, buf, space, ierror)",
        "else if (size(array) == 0) then",
        "  call wrap_address(c_null_ptr, 0_int64, {DT}, buf, space, ierror)",
        "else ! the elements where they are, by the strides between their addresses",
        "  lb = lbound(array)",
        "  st = 0",
    ]
    for d in range(1, rank + 1):
        out += [
            f"  if (size(array, {d}) > 1) then",
            f"    call section_stride(st({d}), c_loc({at(d)}), c_loc({at(0)}), storage_size(array))",
            "  end if",
        ]
    out += [
        "  if (dense(shape(array, kind=int64), st)) then ! the first element's address (no copy-in)",
        f"    call wrap_address(c_loc({at(0)}), {{count}}, {{DT}}, buf, space, ierror)",
        "  else",
        f"    call wrap_section(c_loc({at(0)}), shape(array, kind=int64), st, {{DT}}, buf, space, ierror)",
        "  end if",
        "end if",
    ]
    return out


def instances():
    """(template, specific name, Fortran lines) for every per-type procedure."""
    found = []
    for t in TEMPLATES:
        for k, ftype, dt, cls in KINDS:
            if cls not in t["kinds"]:
                continue
            for rank in range(0, MAX_RANK + 1) if t.get("ranks") else [None]:
                fields = dict(k=k, T=ftype, DT=dt, rank=rank)
                section = rank is not None and 1 <= rank <= SECTION_RANK and "section_decls" in t
                if rank is not None:
                    fields["dims"] = "" if rank == 0 else "(" + ",".join([":"] * rank) + ")"
                    fields["contiguous"] = "" if rank == 0 or section else ", contiguous"
                    fields["count"] = "1_int64" if rank == 0 else "size(array, kind=int64)"
                name = t["name"].format(**fields)
                lines = [f"  subroutine {name}({t['args']})"]
                lines += ["    " + d.format(**fields) for d in t["decls"]]
                body = t["body"]
                if section:
                    lines += ["    " + d.format(**fields) for d in t["section_decls"]]
                    body = section_body(rank)
                stmt = ""
                for b in body:  # statements: continuation lines joined, wrapped again below
                    b = b.format(**fields)
                    if b.endswith("&"):
                        stmt += b.rstrip("&").strip() + " " if stmt else b.rstrip("&").rstrip() + " "
                        continue
                    lines.append("    " + (stmt + b.strip() if stmt else b))
                    stmt = ""
                lines.append(f"  end subroutine {name}")
                found.append((t, name, lines))
    return found


def gen_generics_inc():
    out = [
        "! GENERATED by scripts/gen-fortran.py (its TEMPLATES and KINDS): do not edit. Included in the",
        "! specification part of module gpuwire: the specifics, one per Fortran type, of generics whose",
        "! other forms (type(c_ptr) addresses, buffer handles) are written out in gpuwire.f90. A generic",
        "! may have several interface blocks; the compiler joins them.",
    ]
    by_generic = {}
    for t, name, _ in instances():
        by_generic.setdefault(t["generic"], (t, []))[1].append(name)
    private = []
    for generic, (t, names) in by_generic.items():
        out.append("")
        if t.get("comment"):
            out += comment(t["comment"] + ".", 2)
        out.append(f"  interface {generic}")
        out += continued("module procedure ", names, 4, 6)
        out.append("  end interface")
        private += names
    out.append("")
    out += continued("private :: ", private, 2, 4)
    return "\n".join(out) + "\n"


def gen_kinds_inc():
    out = [
        "! GENERATED by scripts/gen-fortran.py (its TEMPLATES and KINDS): do not edit. Included after",
        "! `contains` in module gpuwire: the specifics of gpuwire_generics.inc, each a call of a helper",
        "! of gpuwire.f90 with its array's (or scalar's) address, element count and datatype.",
    ]
    for _, _, lines in instances():
        out.append("")
        for l in lines:
            if len(l) > WIDTH and l.strip().startswith("call "):
                # Wrap a long call after an argument.
                head, rest = l.split("(", 1)
                out += continued(head.rstrip() + "(", split_args(rest[:-1]), 0, len(head) - len(head.lstrip()) + 2)
                out[-1] += ")"
            else:
                out.append(l)
    return "\n".join(out) + "\n"


def split_args(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    parts.append(cur.strip())
    return parts


def gen_test_inc():
    """tests/fortran/test_kinds.inc: for each Fortran type, a test of every per-type specific
    (each rank of gpuwire_buffer_wrap), included in tests/fortran/test_fortran.f90, whose
    helpers (expect, check_buffer, split) and variables (world, rank, nranks) it uses. The
    answers are computed here from the data, independently of the library."""
    out = [
        "! GENERATED by scripts/gen-fortran.py (gen_test_inc): do not edit. Included in",
        "! tests/fortran/test_fortran.f90: one test per Fortran type of every per-type specific of",
        "! module gpuwire (gpuwire_kinds.inc), with answers computed from the data.",
        "",
        "  subroutine test_every_kind()",
    ]
    out += [f"    call test_kind_{k}()" for k, _, _, _ in KINDS]
    out.append("  end subroutine test_every_kind")
    for k, ftype, dt, cls in KINDS:
        kind = ftype[ftype.index("(") + 1 : -1]
        cv = {"i": "int({}, " + kind + ")", "r": "real({}, " + kind + ")", "c": "cmplx({}, kind=" + kind + ")"}[cls].format
        arrays = [f"r{r}(" + ", ".join(["1"] * (r - 1) + ["2"]) + ")" for r in range(1, MAX_RANK + 1)]
        t = [
            "",
            f"  ! {ftype}: buffers over a scalar and arrays of every rank; copies; allreduce and bcast",
            "  ! on Fortran variables; the distributed-array forms.",
            f"  subroutine test_kind_{k}()",
            "    integer, parameter :: n = 5",
            f"    {ftype}, target :: s, s2, a(3), a2(3), g(n), out(n), one, two, res",
        ]
        t += continued(f"    {ftype}, target :: ", arrays, 0, 6)
        t += [
            f"    {ftype}, allocatable, target :: every(:)",
            "    type(gpuwire_buffer) :: b",
            "    type(gpuwire_darray) :: x, y",
            "    integer(int64) :: bytes",
            "    integer :: i",
            f"    character(len=*), parameter :: what = '{ftype}'",
            f"    call gpuwire_dtype_size({dt}, bytes)",
            "    call expect(bytes * 8 == storage_size(s), what // ': the datatype has the type''s size')",
            "    ! A scalar is a buffer of one element; arrays of rank 1 to 15 (shape 1, ..., 1, 2).",
            "    call gpuwire_buffer_wrap(s, b)",
            f"    call check_buffer(b, 1_int64, {dt}, c_loc(s), what // ' scalar')",
        ]
        for r in range(1, MAX_RANK + 1):
            t += [f"    call gpuwire_buffer_wrap(r{r}, b)", f"    call check_buffer(b, 2_int64, {dt}, c_loc(r{r}), what // ' rank {r}')"]
        t += [
            "    ! Blocking copies: a scalar, and an array section with stride -1.",
            f"    s = {cv('3')}",
            f"    call gpuwire_buffer_alloc(1, {dt}, GPUWIRE_SPACE_HOST, -1, b)",
            "    call gpuwire_buffer_copy_from_host(b, s)",
            f"    s2 = {cv('0')}",
            "    call gpuwire_buffer_copy_to_host(b, s2)",
            "    call expect(s2 == 3, what // ': copy of a scalar in and out')",
            "    call gpuwire_buffer_free(b)",
            f"    a = [({cv('i')}, i = 1, 3)]",
            f"    call gpuwire_buffer_alloc(3, {dt}, GPUWIRE_SPACE_HOST, -1, b)",
            "    call gpuwire_buffer_copy_from_host(b, a(3:1:-1))",
            f"    a2 = {cv('0')}",
            "    call gpuwire_buffer_copy_to_host(b, a2)",
            "    call expect(all(a2 == [3, 2, 1]), what // ': copies through a reversed section')",
            "    call gpuwire_buffer_free(b)",
            "    ! allreduce of a scalar and of an array; bcast of a scalar and of an array.",
            f"    s = {cv('rank + 1')}",
            f"    s2 = {cv('-1')}",
            "    call gpuwire_allreduce(world, s, s2, GPUWIRE_SUM)",
            "    call expect(s2 == nranks * (nranks + 1) / 2, what // ': scalar allreduce')",
            f"    a = [({cv('rank + i')}, i = 1, 3)]",
            f"    a2 = {cv('-1')}",
        ]
        if cls in "ir":
            t += [
                "    call gpuwire_allreduce(world, a, a2, GPUWIRE_MAX, ierror=ierr)",
                "    call expect_ok(ierr, what // ': array allreduce')",
                "    call expect(all(a2 == [(nranks - 1 + i, i = 1, 3)]), what // ': array allreduce MAX')",
            ]
        else:  # complex numbers have no MAX
            t += [
                "    call gpuwire_allreduce(world, a, a2, GPUWIRE_SUM, ierror=ierr)",
                "    call expect_ok(ierr, what // ': array allreduce')",
                "    call expect(all(a2 == [(nranks * (nranks - 1) / 2 + nranks * i, i = 1, 3)]), &",
                "      what // ': array allreduce SUM')",
            ]
        t += [
            f"    s = {cv('merge(7, 0, rank == nranks - 1)')}",
            "    call gpuwire_bcast(world, s, nranks - 1)",
            "    call expect(s == 7, what // ': scalar bcast')",
            f"    a = {cv('merge(4, 0, rank == 0)')}",
            "    call gpuwire_bcast(world, a, 0, ierror=ierr)",
            "    call expect(ierr == GPUWIRE_SUCCESS .and. all(a == 4), what // ': array bcast')",
            "    call gpuwire_allreduce(world, a, a2(1:2), GPUWIRE_SUM, ierror=ierr)",
            "    call expect(ierr /= GPUWIRE_SUCCESS, what // ': allreduce of 3 into 2 elements fails')",
            "    ! In place (GPUWIRE_IN_PLACE), reduce to the last rank, allgather of a scalar.",
            f"    s = {cv('rank + 1')}",
            "    call gpuwire_allreduce(world, GPUWIRE_IN_PLACE, s, GPUWIRE_SUM)",
            "    call expect(s == nranks * (nranks + 1) / 2, what // ': scalar allreduce in place')",
            f"    a = [({cv('rank + i')}, i = 1, 3)]",
            "    call gpuwire_allreduce(world, GPUWIRE_IN_PLACE, a, GPUWIRE_SUM)",
            "    call expect(all(a == [(nranks * (nranks - 1) / 2 + nranks * i, i = 1, 3)]), &",
            "      what // ': array allreduce in place')",
            f"    s = {cv('rank + 1')}",
            f"    s2 = {cv('-1')}",
            "    call gpuwire_reduce(world, s, s2, GPUWIRE_SUM, nranks - 1)",
            "    if (rank == nranks - 1) then",
            "      call expect(s2 == nranks * (nranks + 1) / 2, what // ': scalar reduce at the root')",
            "    else",
            "      call expect(s2 == -1, what // ': reduce leaves recvbuf alone on other ranks')",
            "    end if",
            "    allocate (every(nranks))",
            f"    every = {cv('0')}",
            "    call gpuwire_allgather(world, s, every)",
            "    call expect(all(every == [(i, i = 1, nranks)]), what // ': scalar allgather')",
            "    ! Distributed arrays: set_global, allgather, gather, fill, sum (and min, max, scale,",
            "    ! axpy, dot where the datatype has them).",
            f"    g = [({cv('i')}, i = 1, n)]",
            f"    call gpuwire_darray_create(world, n, GPUWIRE_DECIDE, {dt}, GPUWIRE_SPACE_HOST, &",
            "      GPUWIRE_PARTITION_SCATTER, x)",
            f"    call gpuwire_darray_create(world, n, GPUWIRE_DECIDE, {dt}, GPUWIRE_SPACE_HOST, &",
            "      GPUWIRE_PARTITION_SCATTER, y)",
            "    call gpuwire_darray_set_global(x, g)",
            f"    out = {cv('0')}",
            "    call gpuwire_darray_allgather(x, out)",
            "    call expect(all(out == g), what // ': darray set_global, allgather')",
            f"    out = {cv('0')}",
            "    call gpuwire_darray_gather(x, out, 0)",
            "    if (rank == 0) call expect(all(out == g), what // ': darray gather')",
            "    call gpuwire_darray_sum(x, res)",
            "    call expect(res == n * (n + 1) / 2, what // ': darray sum')",
            f"    two = {cv('2')}",
            "    call gpuwire_darray_fill(y, two)",
            "    call gpuwire_darray_sum(y, res)",
            "    call expect(res == 2 * n, what // ': darray fill')",
        ]
        if cls in "ir":
            t += [
                "    call gpuwire_darray_min(x, res)",
                "    call expect(res == 1, what // ': darray min')",
                "    call gpuwire_darray_max(x, res)",
                "    call expect(res == n, what // ': darray max')",
            ]
        if cls in "rc":
            t += [
                "    call gpuwire_darray_scale(y, two)",
                f"    one = {cv('1')}",
                "    call gpuwire_darray_axpy(one, x, y)",
                "    call gpuwire_darray_allgather(y, out)",
                "    call expect(all(out == g + 4), what // ': darray scale, axpy')",
                "    call gpuwire_darray_dot(x, x, res)",
                "    call expect(res == sum(g * g), what // ': darray dot')",
            ]
        else:
            t.append(f"    one = {cv('1')}")
            t.append("    call expect(one == 1, what)")
        t += ["    call gpuwire_darray_free(x)", "    call gpuwire_darray_free(y)", f"  end subroutine test_kind_{k}"]
        out += t
    return "\n".join(out) + "\n"


def outputs(root, header_text=None):
    if header_text is None:
        with open(os.path.join(root, "include", "gpuwire.h"), encoding="utf-8") as fh:
            header_text = fh.read()
    h = Header(header_text)
    if not h.functions or not h.enums:
        raise SystemExit("gen-fortran.py: no function or enum found in include/gpuwire.h")
    return {
        "include/gpuwire_c.inc": gen_c_inc(h, "gpuwire.h"),
        "include/gpuwire_generics.inc": gen_generics_inc(),
        "include/gpuwire_kinds.inc": gen_kinds_inc(),
        "tests/fortran/test_kinds.inc": gen_test_inc(),
    }


def comm_handle(h, replacement):
    """The header with gpuwire_comm's one-field struct written as `replacement`."""
    return re.sub(r"typedef struct \{[^{}]*?uint64_t h;\s*\} gpuwire_comm;", lambda _: replacement, h, count=1, flags=re.S)


def self_test(root):
    """Each change of the header must change the generated files where it should (so that the
    --check of `make test` fails until they are regenerated)."""
    with open(os.path.join(root, "include", "gpuwire.h"), encoding="utf-8") as fh:
        h = fh.read()
    base = outputs(root, h)
    new_fn = "gpuwire_status gpuwire_init(void);"
    mutations = [
        ("a new function", h.replace(new_fn, new_fn + "\n\ngpuwire_status gpuwire_group_start(gpuwire_comm comm,\n                                  int64_t *count);"),
         "function gpuwire_group_start(comm, count) bind(C, name=\"gpuwire_group_start\") result(st)"),
        ("an argument's type changed", h.replace("gpuwire_status gpuwire_buffer_view(gpuwire_buffer buf,\n                                   int64_t offset,", "gpuwire_status gpuwire_buffer_view(gpuwire_buffer buf,\n                                   int32_t offset,"),
         "integer(c_int32_t), value :: offset"),
        ("an enumerator added", h.replace("GPUWIRE_BXOR = 7,", "GPUWIRE_BXOR = 7,\n  GPUWIRE_LAND = 8,"), "GPUWIRE_LAND = 8"),
        ("a struct field added", h.replace("\n} gpuwire_config;", "\n  int32_t spare;\n} gpuwire_config;", 1), ":: spare"),
        ("a handle type added", h.replace("} gpuwire_request;", "} gpuwire_request;\n\ntypedef struct {\n  uint64_t h;\n} gpuwire_group;", 1), "type :: gpuwire_group"),
    ]
    # The same ABI written otherwise generates the same files.
    same = [
        ("a handle as a plain uint64_t", comm_handle(h, "typedef uint64_t gpuwire_comm;")),
        ("a handle as a pointer to an opaque struct", comm_handle(h, "typedef struct gpuwire_comm_T *gpuwire_comm;")),
    ]
    failures = 0
    for what, text in same:
        if text == h:
            print(f"self-test FAIL: the mutation '{what}' did not change the header (update the self-test)")
            failures += 1
        elif outputs(root, text) == base:
            print(f"self-test PASS: {what} generates the same files")
        else:
            print(f"self-test FAIL: {what} generates other files")
            failures += 1
    for what, text, expect in mutations:
        if text == h:
            print(f"self-test FAIL: the mutation '{what}' did not change the header (update the self-test)")
            failures += 1
            continue
        got = outputs(root, text)["include/gpuwire_c.inc"]
        if got != base["include/gpuwire_c.inc"] and expect in got:
            print(f"self-test PASS: {what} changes gpuwire_c.inc ('{expect}')")
        else:
            print(f"self-test FAIL: {what} does not show in gpuwire_c.inc as '{expect}'")
            failures += 1
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    ap.add_argument("--self-test", action="store_true", help="check that header changes change the output")
    args = ap.parse_args()
    if args.self_test:
        return self_test(args.root)
    stale = 0
    for rel, text in outputs(args.root).items():
        path = os.path.join(args.root, rel)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if args.check:
            if old != text:
                stale += 1
                sys.stdout.writelines(difflib.unified_diff((old or "").splitlines(True), text.splitlines(True), "a/" + rel, "b/" + rel))
                print(f"FAIL {rel} is not what include/gpuwire.h generates: run `python3 scripts/gen-fortran.py` and commit it")
            else:
                print(f"PASS {rel} is what include/gpuwire.h generates")
        elif old != text:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            print(f"gen-fortran.py: wrote {rel}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
