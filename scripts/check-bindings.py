#!/usr/bin/env python3
"""check-bindings.py: fails when the language bindings disagree with include/gpuwire.h.

Checks, for every function the C header declares:
  1. include/gpuwire.f90, module gpuwire_c, has a bind(C, name="F") interface also named F, with
     the same number of arguments, the same argument kinds in the same order (int32, int64,
     handle, size_t, double, void*, void**, char*, int32*, int64*, handle*, struct X*, ...) and
     the same result kind;
  2. module gpuwire has a generic interface F (the mpi_f08-style wrapper);
  3. include/gpuwire.hpp uses F outside comments (a C++ wrapper calls it);
  4. a Fortran test or example calls F (tests/fortran/*.f90, examples-fortran/*.f90);
  5. python/gpuwire/_capi.py declares it in _PROTOTYPES with the same ctypes argument kinds
     and result;
and, for the header's data:
  6. every GPUWIRE_* constant (enumerators and #defines) is a parameter of module gpuwire_types
     with the same value;
  7. every struct typedef (gpuwire_config) has a bind(C) derived type of the same name with the
     same fields, in the same order, of the same kinds.
With --fortran-coverage (scripts/run-c-tests.sh, after running the Fortran tests on a build with
--coverage): every procedure of modules gpuwire_types, gpuwire and gpuwire_f08 (each wrapper and
each per-type specific) was run by a Fortran test.

For a function missing from the Fortran module it prints the bind(C) interface to add.

usage: scripts/check-bindings.py [--root DIR]     check the tree (default: this checkout)
       scripts/check-bindings.py --self-test      check that the checker catches mismatches
       scripts/check-bindings.py --fortran-coverage GCOV_SUMMARY
Exit status 0 when everything agrees, 1 otherwise.
"""

import argparse
import glob
import os
import re
import sys

# ---- C ------------------------------------------------------------------------------------------

C_SCALARS = {
    "int32_t": "int32",
    "int": "int32",
    "int64_t": "int64",
    "size_t": "size_t",
    "double": "double",
    "float": "float",
    "uint64_t": "uint64",
}


def strip_c_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


class CHeader:
    def __init__(self, text):
        self.problems = []
        code = strip_c_comments(text)
        # Typedefs: handles (a struct of one uint64_t h, passed as a uint64_t), int32 enums, enum
        # and struct types.
        self.types = dict(C_SCALARS)
        for name in re.findall(r"typedef\s+struct\s*(?:\w+\s*)?\{\s*uint64_t\s+h\s*;\s*\}\s*(\w+)\s*;", code):
            self.types[name] = "handle"
        for name in re.findall(r"typedef\s+int32_t\s+(\w+)\s*;", code):
            self.types[name] = "int32"
        for name in re.findall(r"typedef\s+enum\s*(?:\w+\s*)?\{[^}]*\}\s*(\w+)\s*;", code, re.S):
            self.types[name] = "int32"  # a C enum is an int
        for name in re.findall(r"^enum\s+(\w+)", code, re.M):
            self.types.setdefault(name, "int32")
        self.structs = {}
        for body, name in re.findall(r"typedef\s+struct\s*(?:\w+\s*)?\{([^}]*)\}\s*(\w+)\s*;", code, re.S):
            if self.types.get(name) == "handle":
                continue
            fields = []
            for decl in body.split(";"):
                decl = " ".join(decl.split())
                if not decl:
                    continue
                m = re.match(r"(\w+)\s+(\w+)$", decl)
                if not m or m.group(1) not in C_SCALARS:
                    self.problems.append(f"struct {name}: cannot read field '{decl}'")
                    continue
                fields.append((m.group(2), C_SCALARS[m.group(1)]))
            self.structs[name] = fields
            self.types[name] = "struct " + name
        # Constants: enumerators and #defines with a value.
        self.constants = {}
        for name, value in re.findall(r"^\s*(GPUWIRE_\w+)\s*=\s*(-?\d+)\s*,?\s*$", code, re.M):
            self.constants[name] = int(value)
        for name, value in re.findall(r"^#define\s+(GPUWIRE_\w+)[ \t]+(.+?)\s*$", code, re.M):
            value = value.strip()
            if re.fullmatch(r"\(?-?\d+\)?", value):
                self.constants[name] = int(value.strip("()"))
            elif re.fullmatch(r'"[^"]*"', value):
                self.constants[name] = value[1:-1]
            elif hm := re.fullmatch(r"\(\((\w+)\)\{(-?\d+)\}\)|\((\w+)\{(-?\d+)\}\)", value):
                # a handle value, ((T){N}) in C and (T{N}) in C++: N
                self.constants[name] = int(hm.group(2) or hm.group(4))
        # Functions: a declaration at the start of a line, outside typedefs.
        self.functions = {}
        for ret, name, args in re.findall(
            r"^(?!typedef|#|enum|struct|extern)([A-Za-z_][\w \t]*?[\w\*])\s*\b(gpuwire_\w+)\s*\(([^)]*)\)\s*;",
            code,
            re.M | re.S,
        ):
            self.functions[name] = (self.ret_kind(name, ret), self.arg_kinds(name, args))

    def kind(self, func, decl):
        """The kind of one C parameter declaration (without its name)."""
        stars = decl.count("*")
        words = [w for w in re.findall(r"\w+", decl) if w not in ("const", "volatile", "restrict")]
        if len(words) != 1:
            self.problems.append(f"{func}: cannot read the type '{decl}'")
            return "?"
        base = words[0]
        if stars == 0:
            if base not in self.types:
                self.problems.append(f"{func}: unknown C type '{base}' (teach scripts/check-bindings.py)")
                return "?"
            return self.types[base]
        if stars == 1:
            if base == "void":
                return "void*"
            if base == "char":
                return "char*"
            if base not in self.types:
                self.problems.append(f"{func}: unknown C type '{base}' (teach scripts/check-bindings.py)")
                return "?"
            return self.types[base] + "*"
        if stars == 2 and base == "void":
            return "void**"
        self.problems.append(f"{func}: cannot map the C type '{decl}'")
        return "?"

    def ret_kind(self, func, ret):
        ret = " ".join(ret.split())
        if "*" in ret:
            return "pointer"
        return self.kind(func, ret)

    def arg_kinds(self, func, args):
        args = " ".join(args.split())
        if args in ("", "void"):
            return []
        kinds = []
        for a in args.split(","):
            a = a.strip()
            m = re.match(r"(.*?)(\w+)$", a)
            kinds.append((m.group(2), self.kind(func, m.group(1))))
        return kinds


# ---- Fortran ------------------------------------------------------------------------------------


def fortran_statements(text):
    """Lower-cased statements with comments removed and continuation lines joined; strings keep
    their case."""
    out, cur = [], ""
    for raw in text.splitlines():
        line, quote = "", None
        for ch in raw:
            if quote:
                line += ch
                if ch == quote:
                    quote = None
            elif ch in "'\"":
                quote = ch
                line += ch
            elif ch == "!":
                break
            else:
                line += ch.lower()
        line = line.strip()
        if cur and line.startswith("&"):
            line = line[1:].strip()
        if line.endswith("&"):
            cur += line[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.extend(s.strip() for s in split_top(cur, ";") if s.strip())
        cur = ""
    return out


def split_top(s, sep=","):
    """Splits on `sep` outside parentheses and quotes."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in s:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


F_VALUE_KINDS = {
    "integer(c_int32_t)": "int32",
    "integer(c_int)": "int32",
    "integer(c_int64_t)": "int64",
    "integer(gpuwire_handle_kind)": "handle",
    "integer(c_size_t)": "size_t",
    "real(c_double)": "double",
    "real(c_float)": "float",
    "type(c_ptr)": "void*",
}
F_REF_KINDS = {
    "integer(c_int32_t)": "int32*",
    "integer(c_int)": "int32*",
    "integer(c_int64_t)": "int64*",
    "integer(gpuwire_handle_kind)": "handle*",
    "integer(c_size_t)": "size_t*",
    "real(c_double)": "double*",
    "real(c_float)": "float*",
    "type(c_ptr)": "void**",
    "type(*)": "void*",
    "character(kind=c_char)": "char*",
    "character(kind=c_char,len=1)": "char*",
}
# For the interfaces this script suggests: a kind back to a Fortran declaration.
SUGGEST = {
    "int32": "integer(c_int32_t), value",
    "int64": "integer(c_int64_t), value",
    "handle": "integer(gpuwire_handle_kind), value",
    "size_t": "integer(c_size_t), value",
    "double": "real(c_double), value",
    "void*": "type(c_ptr), value",
    "void**": "type(c_ptr), intent(out)",
    "char*": "character(kind=c_char), intent(out)",
    "int32*": "integer(c_int32_t), intent(out)",
    "int64*": "integer(c_int64_t), intent(out)",
    "handle*": "integer(gpuwire_handle_kind), intent(out)",
}


def parse_decl(stmt):
    """(type spec, attributes, [names]) of a type declaration statement, or None."""
    m = re.match(r"^(integer|real|complex|logical|character|type)\s*(\([^:]*?\))?\s*(,[^:]*)?::\s*(.+)$", stmt)
    if not m:
        return None
    spec = (m.group(1) + (m.group(2) or "")).replace(" ", "")
    attrs = [a.replace(" ", "") for a in split_top((m.group(3) or "").lstrip(","))] if m.group(3) else []
    names = [n.strip() for n in split_top(m.group(4))]
    return spec, attrs, names


class FortranModule:
    def __init__(self, text):
        self.problems = []
        self.statements = fortran_statements(text)
        self.modules = {}
        current = None
        for s in self.statements:
            m = re.match(r"^module\s+(\w+)$", s)
            if m:
                current = m.group(1)
                self.modules[current] = []
                continue
            if re.match(r"^end\s*module\b", s):
                current = None
                continue
            if current:
                self.modules[current].append(s)
        self.interfaces = self.bind_c_interfaces(self.modules.get("gpuwire_c", []))
        self.generics = set()
        for s in self.modules.get("gpuwire", []):
            m = re.match(r"^interface\s+(\w+)$", s)
            if m:
                self.generics.add(m.group(1))
        self.constants = {}
        self.types = {}
        self.read_types_module(self.modules.get("gpuwire_types", []))

    def bind_c_interfaces(self, stmts):
        found = {}
        i = 0
        while i < len(stmts):
            m = re.match(
                r'^(?:(?:integer|real|type)\s*\([^)]*\)\s+)?(function|subroutine)\s+(\w+)\s*\(([^)]*)\)\s*bind\s*\(\s*c\s*,\s*name\s*=\s*"(\w+)"\s*\)(?:\s*result\s*\(\s*(\w+)\s*\))?$',
                stmts[i],
            )
            if not m:
                i += 1
                continue
            what, fname, args, cname, result = m.groups()
            dummies = [a.strip() for a in args.split(",") if a.strip()]
            decls = {}
            i += 1
            while i < len(stmts) and not re.match(r"^end\s*(function|subroutine)\b", stmts[i]):
                d = parse_decl(stmts[i])
                if d:
                    spec, attrs, names = d
                    for n in names:
                        base = re.match(r"(\w+)", n).group(1)
                        decls[base] = (spec, attrs, "(" in n)
                i += 1
            kinds = []
            for a in dummies:
                if a not in decls:
                    self.problems.append(f"{cname}: dummy argument '{a}' has no declaration")
                    kinds.append((a, "?"))
                    continue
                kinds.append((a, self.kind(cname, *decls[a])))
            if what == "subroutine":
                ret = "void"
            else:
                r = decls.get(result or fname)
                if not r:
                    ret = "?"
                    self.problems.append(f"{cname}: the function result has no declaration")
                elif r[0] == "type(c_ptr)":
                    ret = "pointer"
                else:
                    ret = F_VALUE_KINDS.get(r[0], "?")
            found[cname] = (fname, ret, kinds)
            i += 1
        return found

    def kind(self, cname, spec, attrs, is_array):
        if "value" in attrs:
            k = F_VALUE_KINDS.get(spec)
        else:
            k = F_REF_KINDS.get(spec)
            if k is None:
                m = re.fullmatch(r"type\((\w+)\)", spec)
                if m:
                    k = "struct " + m.group(1) + "*"
        if k is None:
            self.problems.append(f"{cname}: cannot map the Fortran declaration '{spec}, {', '.join(attrs)}'")
            return "?"
        return k

    def read_types_module(self, stmts):
        in_type = None
        for s in stmts:
            m = re.match(r"^type\s*,\s*bind\s*\(\s*c\s*\)\s*::\s*(\w+)$", s)
            if m:
                in_type = m.group(1)
                self.types[in_type] = []
                continue
            if re.match(r"^end\s*type\b", s):
                in_type = None
                continue
            d = parse_decl(s)
            if not d:
                continue
            spec, attrs, names = d
            if in_type:
                for n in names:
                    self.types[in_type].append((n.split("=")[0].strip(), F_VALUE_KINDS.get(spec, spec)))
                continue
            if "parameter" not in attrs:
                continue
            for item in names:
                if "=" not in item:
                    continue
                name, value = (x.strip() for x in item.split("=", 1))
                sm = re.fullmatch(r'"([^"]*)"|\'([^\']*)\'', value)
                if sm:
                    self.constants[name] = sm.group(1) if sm.group(1) is not None else sm.group(2)
                    continue
                im = re.fullmatch(r"(?:\w+\()?\s*(-?\d+)(?:_\w+)?\s*\)?", value)
                if im:
                    self.constants[name] = int(im.group(1))
                else:
                    self.constants[name] = value


# ---- Python (ctypes) ---------------------------------------------------------------------------

PY_KINDS = {
    "c_int32": "int32",
    "c_int": "int32",
    "_status": "int32",
    "c_int64": "int64",
    "_handle": "handle",
    "c_size_t": "size_t",
    "c_double": "double",
    "c_void_p": "void*",
    "c_char_p": "char*",
}


def py_kind(expr):
    expr = expr.strip()
    m = re.fullmatch(r"POINTER\((\w+)\)", expr)
    if m:
        inner = m.group(1)
        if inner == "c_void_p":
            return "void**"
        if inner in PY_KINDS:
            return PY_KINDS[inner] + "*"
        if inner[:1].isupper():
            # A struct's class (gen-python.py's class_name): Config is gpuwire_config, StatusT gpuwire_status_t.
            return "struct gpuwire_" + re.sub(r"(?<!^)([A-Z])", r"_\1", inner).lower() + "*"
        return inner + "*"
    return PY_KINDS.get(expr, "?" + expr)


def python_prototypes(text):
    """{name: (result kind, [argument kinds])} from the _PROTOTYPES table of gpuwire.py."""
    protos = {}
    m = re.search(r"^_PROTOTYPES = \{(.*?)^\}", text, re.S | re.M)
    if not m:
        return protos
    for name, ret, args in re.findall(r'"(gpuwire_\w+)":\s*\((\w+),\s*\[([^\]]*)\]\)', m.group(1)):
        kinds = [py_kind(a) for a in split_top(args)] if args.strip() else []
        r = py_kind(ret)
        protos[name] = ("pointer" if r == "char*" else r, kinds)
    return protos


# ---- the checks ---------------------------------------------------------------------------------


def suggest_interface(name, ret, args):
    lines = [f'    function {name}({", ".join(a for a, _ in args)}) bind(C, name="{name}") result(st)']
    imports = {"c_int" if ret == "int32" else "c_ptr"}
    for _, k in args:
        decl = SUGGEST.get(k, "")
        imports.update(re.findall(r"\b(c_\w+|gpuwire_\w+)\b", decl))
        if k.startswith("struct ") and k.endswith("*"):
            imports.add(k[7:-1])
    lines.append(f"      import :: {', '.join(sorted(imports))}")
    for a, k in args:
        decl = SUGGEST.get(k)
        if decl is None and k.startswith("struct ") and k.endswith("*"):
            decl = f"type({k[7:-1]}), intent(out)"
        if decl is None:
            decl = f"<{k}: add a mapping>"
        dims = "(*)" if k == "char*" else ""
        lines.append(f"      {decl} :: {a}{dims}")
    lines.append("      integer(c_int) :: st" if ret == "int32" else "      type(c_ptr) :: st")
    lines.append(f"    end function {name}")
    return "\n".join(lines)


def check(header_text, fortran_text, hpp_text, fortran_uses, python_text=None):
    """Returns (problems, summary): a list of strings describing each disagreement."""
    h = CHeader(header_text)
    f = FortranModule(fortran_text)
    problems = list(h.problems) + list(f.problems)
    hpp_code = strip_c_comments(hpp_text)
    if not h.functions:
        problems.append("no function found in the header (is it include/gpuwire.h?)")
    for name, (ret, args) in h.functions.items():
        c_sig = f"{ret} {name}({', '.join(k for _, k in args)})"
        if name not in f.interfaces:
            problems.append(
                f"{name}: no bind(C, name=\"{name}\") interface in module gpuwire_c of gpuwire.f90; add:\n"
                + suggest_interface(name, ret, args)
            )
        else:
            fname, fret, fargs = f.interfaces[name]
            f_sig = f"{fret} {name}({', '.join(k for _, k in fargs)})"
            if fname != name:
                problems.append(f"{name}: the Fortran interface is named '{fname}', not '{name}'")
            if len(fargs) != len(args):
                problems.append(
                    f"{name}: {len(args)} arguments in C, {len(fargs)} in Fortran\n    C:       {c_sig}\n    Fortran: {f_sig}"
                )
            else:
                for i, ((ca, ck), (fa, fk)) in enumerate(zip(args, fargs)):
                    if ck != fk:
                        problems.append(
                            f"{name}: argument {i + 1} ('{ca}' / '{fa}') is {ck} in C, {fk} in Fortran"
                            f"\n    C:       {c_sig}\n    Fortran: {f_sig}"
                        )
            if fret != ret:
                problems.append(f"{name}: the result is {ret} in C, {fret} in Fortran")
        if name not in f.generics:
            problems.append(f"{name}: module gpuwire has no generic interface {name} (the mpi_f08-style wrapper)")
        if not re.search(r"\b" + re.escape(name) + r"\b", hpp_code):
            problems.append(f"{name}: include/gpuwire.hpp does not call it (no C++ wrapper)")
        if python_text is not None:
            protos = python_prototypes(python_text)
            if name not in protos:
                problems.append(f"{name}: missing from _PROTOTYPES in python/gpuwire/_capi.py (run python3 scripts/gen-python.py)")
            elif protos[name] != (ret, [k for _, k in args]):
                problems.append(
                    f"{name}: python/gpuwire/_capi.py declares {protos[name][0]} ({', '.join(protos[name][1])}), "
                    f"the header {ret} ({', '.join(k for _, k in args)})"
                )
        if fortran_uses is not None and not re.search(r"\b" + re.escape(name) + r"\s*\(", fortran_uses, re.I):
            problems.append(f"{name}: no Fortran test or example calls it (tests/fortran, examples-fortran)")
    for name in sorted(set(f.interfaces) - set(h.functions)):
        problems.append(f"{name}: bound in gpuwire.f90 but not declared in gpuwire.h")
    for name, value in h.constants.items():
        key = name.lower()
        if key not in f.constants:
            problems.append(f"{name}: constant missing from module gpuwire_types of gpuwire.f90 (C value {value!r})")
        elif f.constants[key] != value:
            problems.append(f"{name}: {value!r} in C, {f.constants[key]!r} in Fortran")
    for sname, fields in h.structs.items():
        ftype = f.types.get(sname)
        if ftype is None:
            problems.append(f"struct {sname}: no 'type, bind(C) :: {sname}' in module gpuwire_types")
        elif [(n.lower(), k) for n, k in fields] != ftype:
            problems.append(f"struct {sname}: fields differ\n    C:       {fields}\n    Fortran: {ftype}")
    summary = (
        f"{len(h.functions)} functions (name, argument count and kinds, result), "
        f"{len(h.constants)} constants, {len(h.structs)} struct(s)"
    )
    return problems, summary


def read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def read_fortran(path):
    """A Fortran source with its INCLUDE lines replaced by the files they name (gpuwire.f90
    includes the layers scripts/gen-fortran.py generates)."""

    def expand(m):
        return read_fortran(os.path.join(os.path.dirname(path), m.group(2)))

    return re.sub(r"^[ \t]*include[ \t]+(['\"])([^'\"]+)\1[ \t]*$", expand, read(path), flags=re.M | re.I)


def fortran_uses_text(root):
    files = sorted(glob.glob(os.path.join(root, "tests/fortran/*.f90")) + glob.glob(os.path.join(root, "examples-fortran/*.f90")))
    return "\n".join(read(p) for p in files)


def self_test(root):
    """Each mutation of the real files must produce a problem naming the thing changed."""
    h, f, x = read(root + "/include/gpuwire.h"), read_fortran(root + "/include/gpuwire.f90"), read(root + "/include/gpuwire.hpp")
    uses = fortran_uses_text(root)
    py = read(root + "/python/gpuwire/_capi.py")
    base, _ = check(h, f, x, uses, py)
    if base:
        print("self-test: the checked-in files must agree first:\n  " + "\n  ".join(base))
        return 1

    def drop_interface(text, name):
        return re.sub(r"\n\s*function " + name + r"\(.*?end function " + name + r"\n", "\n", text, flags=re.S)

    mutations = [
        ("a new function in the header", h.replace("gpuwire_status gpuwire_init(void);", "gpuwire_status gpuwire_init(void);\ngpuwire_status gpuwire_darray_swap(gpuwire_darray x, gpuwire_darray y);"), f, x, "gpuwire_darray_swap"),
        ("a bind(C) interface removed", h, drop_interface(f, "gpuwire_barrier"), x, "gpuwire_barrier"),
        ("an argument kind changed (int64 offset -> int32)", h, f.replace("integer(c_int64_t), value :: offset", "integer(c_int32_t), value :: offset"), x, "gpuwire_buffer_view"),
        ("a handle passed as int64", h, f.replace("integer(gpuwire_handle_kind), value :: buf\n      integer(c_int64_t), value :: offset", "integer(c_int64_t), value :: buf\n      integer(c_int64_t), value :: offset"), x, "gpuwire_buffer_view"),
        ("an argument removed", h, f.replace("function gpuwire_get_version(major, minor, patch)", "function gpuwire_get_version(major, minor)"), x, "gpuwire_get_version"),
        ("a value argument passed by reference", h, f.replace("integer(c_int32_t), value :: root", "integer(c_int32_t), intent(in) :: root", 1), x, "gpuwire_"),
        ("a generic wrapper removed", h, f.replace("  interface gpuwire_bcast\n", "  interface gpuwire_bcast_old\n"), x, "gpuwire_bcast"),
        ("a constant's value changed", h, f.replace("GPUWIRE_MAX = 2", "GPUWIRE_MAX = 3"), x, "GPUWIRE_MAX"),
        ("a constant missing", h.replace("GPUWIRE_BXOR = 7,", "GPUWIRE_BXOR = 7,\n  GPUWIRE_BNAND = 90,"), f, x, "GPUWIRE_BNAND"),
        ("config fields reordered", h, f.replace("    integer(c_int32_t) :: check\n", "    integer(c_int32_t) :: chk\n"), x, "gpuwire_config"),
        ("a C++ wrapper missing", h, f, x.replace("(gpuwire_comm_local_size)", "(gpuwire_comm_local_sz)"), "gpuwire_comm_local_size"),
    ]
    failures = 0
    mutations = [(w, mh, mf, mx, py, e) for w, mh, mf, mx, e in mutations]
    mutations.append(("a Python prototype changed", h, f, x, py.replace('"gpuwire_barrier": (_status, [_handle, c_void_p])', '"gpuwire_barrier": (_status, [_handle])'), "gpuwire_barrier"))
    # The coverage check: a gcov summary in which one specific never ran, or is missing.
    procs = fortran_procedures(f)
    names = [(m, n) for m, ns in procs.items() for n in ns]
    if len(names) < 100 or ("gpuwire", "wrap_r64_2") not in names:
        print(f"self-test FAIL: fortran_procedures found {len(names)} procedures, wrap_r64_2 among them: {('gpuwire', 'wrap_r64_2') in names}")
        failures += 1
    else:
        full = "".join(f"Function '__{m}_MOD_{n}'\nLines executed:100.00% of 3\n\n" for m, n in names)
        for what, text, expect in [
            ("every procedure run", full, None),
            ("a specific never run", full.replace("__gpuwire_MOD_wrap_r64_2'\nLines executed:100.00%", "__gpuwire_MOD_wrap_r64_2'\nLines executed:0.00%"), "wrap_r64_2: no Fortran test runs it"),
            ("a procedure missing from the coverage data", full.replace("Function '__gpuwire_MOD_copy_to_c32'", "Function '__other_MOD_copy_to_c32'"), "copy_to_c32: not in the coverage data"),
        ]:
            problems, _ = check_fortran_coverage(f, text)
            if (expect is None and not problems) or (expect and any(expect in p for p in problems)):
                print(f"self-test PASS: coverage, {what}: {'no problem' if expect is None else 'caught'}")
            else:
                print(f"self-test FAIL: coverage, {what}: {problems[:3]}")
                failures += 1
    for what, mh, mf, mx, mpy, expect in mutations:
        if (mh, mf, mx, mpy) == (h, f, x, py):
            print(f"self-test FAIL: the mutation '{what}' did not change anything (update the self-test)")
            failures += 1
            continue
        problems, _ = check(mh, mf, mx, uses, mpy)
        if any(expect in p for p in problems):
            print(f"self-test PASS: {what} is caught")
        else:
            print(f"self-test FAIL: {what} is not caught (problems: {problems})")
            failures += 1
    return 1 if failures else 0


FORTRAN_COVERED = ("gpuwire_types", "gpuwire", "gpuwire_f08")


def fortran_procedures(fortran_text):
    """{module: [procedure]} of the modules whose every procedure a Fortran test must run."""
    procs = {}
    module = None
    depth = 0  # inside an interface block
    for st in fortran_statements(fortran_text):
        m = re.match(r"^module\s+(\w+)$", st)
        if m:
            module = m.group(1)
            continue
        if re.match(r"^end\s*module\b", st):
            module = None
            continue
        if re.match(r"^(abstract\s+)?interface\b", st):
            depth += 1
        elif re.match(r"^end\s*interface\b", st):
            depth -= 1
        elif module in FORTRAN_COVERED and depth == 0:
            m = re.match(r"^(?:(?:elemental|pure|recursive|impure|logical|integer|real|complex|character|type\(\w+\))\s+)*(?:subroutine|function)\s+(\w+)\s*\(", st)
            if m:
                procs.setdefault(module, []).append(m.group(1))
    return procs


def check_fortran_coverage(fortran_text, gcov_text):
    """Problems: procedures of FORTRAN_COVERED that the gcov function summary (`gcov -f -n` of
    the modules' .gcda files after the Fortran tests ran) shows as never executed, or lacks."""
    executed = {}
    for name, pct in re.findall(r"^Function '(\w+)'\s*\nLines executed:\s*([\d.]+)%", gcov_text, re.M):
        executed[name] = executed.get(name, 0.0) + float(pct)
    problems, total = [], 0
    for module, names in fortran_procedures(fortran_text).items():
        for n in names:
            total += 1
            key = f"__{module}_MOD_{n}"
            if key not in executed:
                problems.append(f"{module}::{n}: not in the coverage data (was the module built with --coverage?)")
            elif executed[key] == 0:
                problems.append(f"{module}::{n}: no Fortran test runs it")
    return problems, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--fortran-coverage", metavar="GCOV_SUMMARY",
                    help="check that every procedure of modules gpuwire_types, gpuwire and gpuwire_f08 was run, "
                    "from the output of `gcov -f -n gpuwire.gcda gpuwire_f08.gcda` after the Fortran tests")
    args = ap.parse_args()
    root = args.root
    if args.self_test:
        return self_test(root)
    if args.fortran_coverage:
        text = read_fortran(root + "/include/gpuwire.f90") + read(root + "/include/gpuwire_f08.f90")
        problems, total = check_fortran_coverage(text, read(args.fortran_coverage))
        for p in problems:
            print("FAIL " + p)
        if problems or not total:
            print(f"check-bindings: {len(problems)} of {total} Fortran procedures not run by a test")
            return 1
        print(f"PASS the Fortran tests run all {total} procedures of gpuwire_types, gpuwire and gpuwire_f08")
        return 0
    problems, summary = check(
        read(root + "/include/gpuwire.h"),
        read_fortran(root + "/include/gpuwire.f90"),
        read(root + "/include/gpuwire.hpp"),
        fortran_uses_text(root),
        read(root + "/python/gpuwire/_capi.py"),
    )
    if problems:
        for p in problems:
            print("FAIL " + p)
        print(f"check-bindings: {len(problems)} problem(s): include/gpuwire.h and the bindings disagree")
        return 1
    print(f"PASS gpuwire.h, gpuwire.f90, gpuwire.hpp and python/gpuwire/_capi.py agree: {summary}; every function has a Fortran wrapper and is called from Fortran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
