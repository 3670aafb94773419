"""The ctypes binding (kiln/_lib.py) agrees with the public headers
(include/kiln/*.h): every function it declares exists there with the same
number of arguments and the same types, and every ctypes Structure named
after a C typedef has that struct's fields, in order, at the offsets and with
the sizes the C compiler gives them.

The headers are parsed from their text (comments, preprocessor lines and
``__attribute__`` removed); the layouts are measured by compiling a small C
program with ``cc -I include``. The checker is proven to fail on a copy of
the binding with one wrong argument type, one missing argument, one unknown
function and one wrong struct field.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int8,
    c_int16,
    c_int32,
    c_int64,
    c_longlong,
    c_size_t,
    c_ubyte,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_ulonglong,
    c_void_p,
)
from dataclasses import dataclass, field

import pytest

from kiln import _lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(ROOT, "include")

# C scalar type -> the one ctypes type that binds it. On LP64 several of these
# are the same class (c_size_t is c_uint64 is c_ulong), so "exactly" means
# "the same class", which is all ctypes can tell apart anyway.
SCALARS = {
    "int": c_int,
    "signed": c_int,
    "unsigned": c_uint,
    "long long": c_longlong,
    "unsigned long long": c_ulonglong,
    "size_t": c_size_t,
    "int8_t": c_int8,
    "int16_t": c_int16,
    "int32_t": c_int32,
    "int64_t": c_int64,
    "uint8_t": c_uint8,
    "uint16_t": c_uint16,
    "uint32_t": c_uint32,
    "uint64_t": c_uint64,
    "float": c_float,
    "double": c_double,
    "char": c_char,
    "unsigned char": c_ubyte,
}
_NORMAL = {"unsigned int": "unsigned", "signed int": "int", "long long int": "long long"}
_TYPE_WORDS = {"int", "long", "unsigned", "signed", "char", "short", "float", "double", "void"}


# ---- the header parser ---------------------------------------------------------


@dataclass
class CType:
    """A C type as far as the binding cares: base name, pointer depth, array
    length (struct fields), or a function pointer's signature."""

    base: str
    ptr: int = 0
    array: int | None = None
    fn: "Proto | None" = None
    text: str = ""


@dataclass
class Proto:
    name: str
    ret: CType
    params: list[CType] = field(default_factory=list)
    variadic: bool = False


@dataclass
class Headers:
    functions: dict[str, Proto] = field(default_factory=dict)
    structs: dict[str, list[tuple[str, CType]]] = field(default_factory=dict)
    enums: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)
    fn_types: dict[str, Proto] = field(default_factory=dict)


def _strip_attributes(text: str) -> str:
    out, i = [], 0
    while True:
        j = text.find("__attribute__", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.index("(", j)
        depth = 0
        while True:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
            if depth == 0:
                break
        i = k


def clean(text: str) -> str:
    """Header text without comments, preprocessor lines or attributes, on one line."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\\\n", " ", text)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    text = _strip_attributes(text)
    return re.sub(r"\s+", " ", text)


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(ch, 0)
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_FN_DECL = re.compile(r"^(?P<ret>.*?)\(\s*\*\s*(?P<name>\w*)\s*\)\s*\((?P<params>.*)\)$")


def parse_decl(decl: str, is_param: bool) -> tuple[str, CType]:
    """"const kiln_cache_options *opts" -> ("opts", CType("kiln_cache_options", 1));
    arrays are pointers in a parameter and an array length in a field."""
    decl = decl.strip()
    m = _FN_DECL.match(decl)
    if m:
        proto = parse_proto_parts(m.group("name"), m.group("ret"), m.group("params"))
        return m.group("name"), CType("fn", fn=proto, text=decl)
    array = None
    am = re.search(r"\[\s*(\w*)\s*\]\s*$", decl)
    if am:
        decl = decl[: am.start()]
        array = int(am.group(1)) if am.group(1).isdigit() else 0
    ptr = decl.count("*")
    words = [w for w in decl.replace("*", " ").split() if w not in ("const", "volatile", "restrict")]
    name = ""
    if len(words) > 1 and words[-1] not in _TYPE_WORDS:
        name = words.pop()
    words = [w for w in words if w not in ("struct", "enum")]
    base = " ".join(words)
    base = _NORMAL.get(base, base)
    if array is not None and is_param:
        ptr, array = ptr + 1, None
    return name, CType(base, ptr, array, text=decl.strip())


def parse_proto_parts(name: str, ret: str, params: str) -> Proto:
    _, rtype = parse_decl(ret + " __ret", is_param=True)
    proto = Proto(name, rtype)
    plist = _split_top(params)
    if plist == ["void"]:
        plist = []
    for p in plist:
        if p == "...":
            proto.variadic = True
        else:
            proto.params.append(parse_decl(p, is_param=True)[1])
    return proto


def parse_headers(paths: list[str]) -> Headers:
    h = Headers()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = clean(f.read())
        for m in re.finditer(r"\bKILN_API\s+([^;{}]*);", text):
            pm = re.match(r"^(?P<ret>.*?)\b(?P<name>kiln_\w+)\s*\((?P<params>.*)\)\s*$", m.group(1).strip())
            assert pm, f"{path}: cannot parse the prototype {m.group(1)!r}"
            p = parse_proto_parts(pm.group("name"), pm.group("ret"), pm.group("params"))
            h.functions[p.name] = p
        for m in re.finditer(r"\btypedef\s+struct\s+(\w+)\s*\{([^{}]*)\}\s*(\w+)\s*;", text):
            fields: list[tuple[str, CType]] = []
            for decl in _split_top(m.group(2), ";"):
                # "int rank, size": every declarator gets the first one's base type
                parts = _split_top(decl)
                first_name, first = parse_decl(parts[0], is_param=False)
                fields.append((first_name, first))
                lead = parts[0][: parts[0].rfind(first_name)].replace("*", "")
                for extra in parts[1:]:
                    fields.append(parse_decl(lead + " " + extra, is_param=False))
            h.structs[m.group(3)] = fields
        for m in re.finditer(r"\btypedef\s+enum\s*\w*\s*\{[^{}]*\}\s*(\w+)\s*;", text):
            h.enums.add(m.group(1))
        for m in re.finditer(r"\btypedef\s+struct\s+(\w+)\s+(\w+)\s*;", text):
            h.opaque.add(m.group(2))
        for m in re.finditer(r"\btypedef\s+([^;{}()]*?)\(\s*\*\s*(\w+)\s*\)\s*\(([^;{}]*)\)\s*;", text):
            h.fn_types[m.group(2)] = parse_proto_parts(m.group(2), m.group(1), m.group(3))
    h.opaque -= set(h.structs)  # a forward typedef of a struct defined elsewhere
    return h


# ---- the checker -----------------------------------------------------------------


def _name(ct: object) -> str:
    return "None (void)" if ct is None else getattr(ct, "__name__", repr(ct))


def _fn_matches(ct: object, proto: Proto, h: Headers) -> bool:
    if ct is c_void_p:
        return True
    if not (isinstance(ct, type) and issubclass(ct, ctypes._CFuncPtr)):
        return False
    args = list(ct._argtypes_ or ())
    return (
        len(args) == len(proto.params)
        and matches(ct._restype_, proto.ret, h)
        and all(matches(a, c, h) for a, c in zip(args, proto.params))
    )


def matches(ct: object, c: CType, h: Headers) -> bool:
    """Whether the ctypes type ct binds the C type c (rules: module docstring of
    _lib.py; pointers: c_void_p, or POINTER(...) of the matching pointee)."""
    if c.fn is not None:
        return _fn_matches(ct, c.fn, h)
    if c.array is not None:
        return (
            isinstance(ct, type)
            and issubclass(ct, ctypes.Array)
            and ct._length_ == c.array
            and matches(ct._type_, CType(c.base, c.ptr), h)
        )
    if c.ptr == 0:
        if c.base == "void":
            return ct is None
        if c.base in SCALARS:
            return ct is SCALARS[c.base]
        if c.base in h.enums or c.base == "kiln_status":
            return ct is c_int
        if c.base in h.fn_types:
            return _fn_matches(ct, h.fn_types[c.base], h)
        if c.base in h.structs:
            return isinstance(ct, type) and issubclass(ct, Structure) and ct.__name__ == c.base
        return False  # an opaque struct has no by-value ctypes form
    if ct is c_void_p:
        return True
    if ct is c_char_p:
        return c.base == "char" and c.ptr == 1
    if isinstance(ct, type) and issubclass(ct, ctypes._Pointer):
        return matches(ct._type_, CType(c.base, c.ptr - 1), h)
    return False


def check_functions(functions: dict[str, tuple[object, list[object]]], h: Headers) -> list[str]:
    problems = []
    for name, (restype, argtypes) in sorted(functions.items()):
        proto = h.functions.get(name)
        if proto is None:
            problems.append(f"{name}: not declared (KILN_API) in include/kiln")
            continue
        if len(argtypes) != len(proto.params):
            problems.append(
                f"{name}: {len(argtypes)} argtypes, the header has {len(proto.params)} parameters"
                + (" before ..." if proto.variadic else "")
            )
            continue
        if not matches(restype, proto.ret, h):
            problems.append(f"{name}: restype {_name(restype)}, the header returns {proto.ret.text}")
        for i, (ct, c) in enumerate(zip(argtypes, proto.params), 1):
            if not matches(ct, c, h):
                problems.append(f"{name}: argument {i} is {_name(ct)}, the header has {c.text}")
    return problems


def c_layouts(h: Headers, names: list[str], workdir: str) -> dict[str, dict[str, tuple[int, int]]]:
    """{struct: {"": (0, sizeof), field: (offsetof, sizeof field)}} from the C compiler."""
    headers = sorted(os.path.basename(p) for p in glob.glob(os.path.join(INCLUDE, "kiln", "*.h")))
    lines = ["#include <stddef.h>", "#include <stdio.h>"]
    lines += [f'#include "kiln/{x}"' for x in headers]
    lines.append("#define F(T, f) printf(\"%s %s %zu %zu\\n\", #T, #f, offsetof(T, f), sizeof(((T *)0)->f))")
    lines.append("int main(void) {")
    for s in names:
        lines.append(f'  printf("%s - 0 %zu\\n", "{s}", sizeof({s}));')
        lines += [f"  F({s}, {f});" for f, _ in h.structs[s] if f]
    lines += ["  return 0;", "}"]
    src, exe = os.path.join(workdir, "layout.c"), os.path.join(workdir, "layout")
    with open(src, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    cc = os.environ.get("CC", "cc")
    p = subprocess.run([cc, "-std=c11", "-I", INCLUDE, "-o", exe, src], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{cc} could not compile the layout program:\n{p.stderr}"
    out = subprocess.run([exe], capture_output=True, text=True, timeout=60, check=True).stdout
    layouts: dict[str, dict[str, tuple[int, int]]] = {}
    for line in out.splitlines():
        s, f, off, size = line.split()
        layouts.setdefault(s, {})["" if f == "-" else f] = (int(off), int(size))
    return layouts


def check_structs(structs: list[type], h: Headers, layouts: dict[str, dict[str, tuple[int, int]]]) -> list[str]:
    problems = []
    for cls in structs:
        s = cls.__name__
        c_fields = h.structs[s]
        py_names = [f[0] for f in cls._fields_]
        c_names = [f for f, _ in c_fields]
        if py_names != c_names:
            problems.append(f"{s}: fields {py_names}, the header has {c_names}")
        lay = layouts[s]
        if ctypes.sizeof(cls) != lay[""][1]:
            problems.append(f"{s}: ctypes.sizeof {ctypes.sizeof(cls)}, C sizeof {lay[''][1]}")
        py_types = {f[0]: f[1] for f in cls._fields_}
        for fname, ctype in c_fields:
            if fname not in py_types:
                continue
            desc = getattr(cls, fname)
            off, size = lay[fname]
            if (desc.offset, desc.size) != (off, size):
                problems.append(
                    f"{s}.{fname}: ctypes offset {desc.offset} size {desc.size}, C offset {off} size {size}"
                )
            if not matches(py_types[fname], ctype, h):
                problems.append(f"{s}.{fname}: ctypes {_name(py_types[fname])}, the header has {ctype.text}")
    return problems


# ---- fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def headers() -> Headers:
    paths = sorted(glob.glob(os.path.join(INCLUDE, "kiln", "*.h")))
    assert paths, f"no headers under {INCLUDE}/kiln"
    return parse_headers(paths)


def _bound_structs(h: Headers) -> list[type]:
    return [
        v
        for v in vars(_lib).values()
        if isinstance(v, type) and issubclass(v, Structure) and v is not Structure and v.__name__ in h.structs
    ]


@pytest.fixture(scope="module")
def layouts(headers: Headers, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, tuple[int, int]]]:
    if not shutil.which(os.environ.get("CC", "cc")):
        pytest.skip("no C compiler (cc) to measure the structs' layout")
    names = sorted({c.__name__ for c in _bound_structs(headers)})
    return c_layouts(headers, names, str(tmp_path_factory.mktemp("layout")))


# ---- tests ---------------------------------------------------------------------------


def test_parser_reads_every_kind_of_declaration(headers: Headers) -> None:
    assert len(headers.functions) > 50
    err = headers.functions["kiln_comm_error"]  # varargs + __attribute__((format))
    assert err.variadic and [c.base for c in err.params] == ["kiln_status", "char"]
    tn = headers.functions["kiln_target_name"]  # const T *, char out[16], const char * return
    assert [(c.base, c.ptr) for c in tn.params] == [("kiln_target", 1), ("char", 1)]
    assert (tn.ret.base, tn.ret.ptr) == ("char", 1)
    assert headers.functions["kiln_version"].params == []  # (void)
    assert [(c.base, c.ptr) for c in headers.functions["kiln_layer_norm_bwd_workspace_size"].params] == [
        ("long long", 0),
        ("int", 0),
    ]
    comm = dict(headers.structs["kiln_comm"])
    assert "size" in comm and comm["size"].base == "int"  # "int rank, size;"
    assert comm["broadcast"].fn is not None and len(comm["broadcast"].fn.params) == 5
    assert (comm["name"].base, comm["name"].array) == ("char", 16)
    assert "kiln_cache" in headers.opaque and "kiln_status" in headers.enums
    assert "kiln_build_progress_fn" in headers.fn_types


def test_every_bound_function_matches_its_prototype(headers: Headers) -> None:
    assert _lib.FUNCTIONS, "the binding declares no function"
    problems = check_functions(_lib.FUNCTIONS, headers)
    assert not problems, "\n".join(problems)


def test_every_bound_struct_has_the_c_layout(headers: Headers, layouts: dict) -> None:
    structs = _bound_structs(headers)
    names = {c.__name__ for c in structs}
    assert {"kiln_record", "kiln_build_options", "kiln_comm", "kiln_build_summary"} <= names
    problems = check_structs(structs, headers, layouts)
    assert not problems, "\n".join(problems)


def test_every_bound_struct_is_a_c_typedef(headers: Headers) -> None:
    strays = [
        v.__name__
        for v in vars(_lib).values()
        if isinstance(v, type) and issubclass(v, Structure) and v is not Structure and v.__name__ not in headers.structs
    ]
    assert not strays, f"ctypes Structures named after no C struct typedef: {strays}"


def test_checker_reports_a_wrong_or_missing_argument_and_an_unknown_function(headers: Headers) -> None:
    functions = {k: (r, list(a)) for k, (r, a) in _lib.FUNCTIONS.items()}
    functions["kiln_cache_gc"][1][2] = c_int  # uint64_t max_bytes
    functions["kiln_cache_open"][1][1] = POINTER(_lib.kiln_build_options)  # wrong pointee
    functions["kiln_unit_count"] = (c_int, [])  # returns size_t
    functions["kiln_loader_resolve"][1].pop()
    functions["kiln_no_such_function"] = (c_int, [])
    problems = check_functions(functions, headers)
    want = [
        "kiln_cache_gc: argument 3 is c_int",
        "kiln_cache_open: argument 2 is LP_kiln_build_options",
        "kiln_unit_count: restype c_int",
        "kiln_loader_resolve: 1 argtypes, the header has 2",
        "kiln_no_such_function: not declared",
    ]
    for w in want:
        assert any(p.startswith(w) for p in problems), f"{w!r} not in {problems}"
    assert len(problems) == len(want), problems


def test_checker_reports_a_wrong_struct_field(headers: Headers, layouts: dict) -> None:
    fields = [(n, c_float if n == "build_ms" else t) for n, t in _lib.kiln_record._fields_]
    bad_record = type("kiln_record", (Structure,), {"_fields_": fields})
    renamed = [("ver", t) if n == "version" else (n, t) for n, t in _lib.kiln_cache_options._fields_]
    bad_options = type("kiln_cache_options", (Structure,), {"_fields_": renamed})
    problems = check_structs([bad_record, bad_options], headers, layouts)
    assert any(p.startswith("kiln_record.build_ms: ctypes c_float") for p in problems), problems
    assert any(p.startswith("kiln_record.registers: ctypes offset") for p in problems), problems
    assert any(p.startswith("kiln_cache_options: fields ['ver'") for p in problems), problems
    # the real ones pass (the mutation, not the checker, is what fails)
    assert not check_structs([_lib.kiln_record, _lib.kiln_cache_options], headers, layouts)


# ---- the argument checks every value goes through before it reaches C ------------


def test_int_arg_takes_exactly_the_c_range_and_refuses_bool_float_str() -> None:
    assert _lib.int_arg("n", 0, 0, _lib.UINT64_MAX) == 0
    assert _lib.int_arg("n", 2**64 - 1, 0, _lib.UINT64_MAX) == 2**64 - 1
    assert _lib.int_arg("n", 2**31 - 1) == 2**31 - 1
    for bad, why in ((2**64, "outside"), (-1, "outside"), (2**31, "outside"), (True, "bool"), (1.0, "float"), ("1", "str")):
        hi = _lib.UINT64_MAX if bad == 2**64 else _lib.INT_MAX
        with pytest.raises(_lib.KilnInvalidArgument, match=f"^the n .*{why}") as e:
            _lib.int_arg("the n", bad, 0, hi)
        assert e.value.status == "KILN_EINVAL" and e.value.code == -1


def test_positive_arg_refuses_zero_bool_inf_nan_and_huge_ints() -> None:
    assert _lib.positive_arg("t", 2) == 2.0 and _lib.positive_arg("t", 0.5) == 0.5
    for bad in (0, -1.0, True, float("inf"), float("nan"), 10**400, "5", None):
        with pytest.raises(_lib.KilnInvalidArgument, match="^t "):
            _lib.positive_arg("t", bad)


def test_path_arg_takes_str_bytes_pathlike_and_refuses_nul_empty_and_others(tmp_path) -> None:
    assert _lib.path_arg("p", "/a/b") == b"/a/b"
    assert _lib.path_arg("p", b"/a/\xe9") == b"/a/\xe9"
    assert _lib.path_arg("p", tmp_path) == os.fsencode(tmp_path)
    assert _lib.path_arg("p", os.fsdecode(b"/a/\xe9")) == b"/a/\xe9"  # surrogateescape, as os.fsencode
    for bad, why in (("/a\0b", "NUL"), (b"/a\0b", "NUL"), ("", "empty"), (123, "int"), (bytearray(b"/a"), "bytearray")):
        with pytest.raises(_lib.KilnInvalidArgument, match=f"^p .*{why}"):
            _lib.path_arg("p", bad)


def test_text_arg_refuses_nul_and_non_str() -> None:
    assert _lib.text_arg("s", "bias_*") == b"bias_*"
    for bad, why in (("a\0b", "NUL"), (b"ab", "bytes"), (1, "int"), ("\udcff", "not valid text")):
        with pytest.raises(_lib.KilnInvalidArgument, match=f"^s .*{why}"):
            _lib.text_arg("s", bad)
