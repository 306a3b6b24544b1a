# SPDX-License-Identifier: Apache-2.0
"""The binding's declarations (kvadmit/_cdef.py) against the real headers, so
they can never drift:

* a C file generated from _cdef.py is compiled against include/kvadmit/*.h:
  for every struct, its cdef body under another tag must have the same size
  and alignment, and every field the same offset and a compatible type; every
  enumerator and #define the same value; every function and callback type a
  compatible prototype (the cdef's own text, const included);
* cffi's computed layout (what the binding really uses) must equal the
  compiler's: sizeof and offsetof are printed by the compiled program;
* the headers must have no struct field, enumerator, struct or KVA_API
  function that _cdef.py lacks (except the CUDA importer, listed in NOT_BOUND);
* the Python enums must list every enumerator with the C value.

Needs a C compiler ($CC or cc) and the include directories: $KVA_INCLUDE_DIRS
(';'-separated; ctest passes the source include/ and the build's generated
include/), else ../../include and ../../build/rel/include.
"""
import os
import re
import shutil
import subprocess

import pytest

import kvadmit
from kvadmit import _cdef
from kvadmit._lib import ffi, lib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def include_dirs():
    env = os.environ.get("KVA_INCLUDE_DIRS")
    if env:
        return [d for d in env.split(";") if d]
    return [os.path.join(ROOT, "include"), os.path.join(ROOT, "build", "rel", "include")]


def header_text(name):
    for d in include_dirs():
        p = os.path.join(d, "kvadmit", name)
        if os.path.exists(p):
            with open(p) as f:
                return f.read()
    pytest.fail(f"kvadmit/{name} not found in {include_dirs()}")


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//[^\n]*", " ", s)


CDEF = strip_comments(_cdef.CDEF)
STRUCT_RE = re.compile(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*\1\s*;", re.S)
FNTYPE_RE = re.compile(r"typedef\s+([^;{}]*?)\(\s*\*\s*(\w+)\s*\)\s*\(([^;]*?)\)\s*;", re.S)
ENUM_RE = re.compile(r"enum\s+(\w+)\s*\{(.*?)\}\s*;", re.S)


def field_names(body):
    names = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        decl = re.sub(r"\[[^\]]*\]", "", decl)
        if "(" in decl:  # a function pointer field: (*name)(...)
            names.append(re.search(r"\(\s*\*\s*(\w+)\s*\)", decl).group(1))
            continue
        parts = decl.split(",")
        names.append(re.findall(r"\w+", parts[0])[-1])
        names += [re.findall(r"\w+", p)[-1] for p in parts[1:]]
    return names


def cdef_functions():
    """name -> prototype text of each function the cdef declares."""
    out = {}
    text = re.sub(r"typedef[^;]*;", " ", CDEF)
    text = re.sub(r"(enum|struct)\s+\w+\s*\{.*?\}\s*\w*\s*;", " ", text, flags=re.S)
    for m in re.finditer(r"([^;{}#]*?\b(kva_\w+)\s*\([^;{}]*\))\s*;", text):
        out[m.group(2)] = " ".join(m.group(1).split())
    return out


def generate_check():
    """The C source of the compile-time check, and the names it prints."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <kvadmit/kvadmit.h>",
             "#include <kvadmit/importer.h>",
             "#define SAME(a, b) __builtin_types_compatible_p(__typeof__(a), __typeof__(b))"]
    main = ["int main(void) {"]
    for m in re.finditer(r"#define\s+(KVA_\w+)\s+(\d+)", _cdef.CDEF):
        lines.append(f'_Static_assert({m.group(1)} == {m.group(2)}, "#define {m.group(1)}");')
    for name, body in STRUCT_RE.findall(CDEF):
        tag = f"kvacheck__{name}"
        lines.append(f"struct {tag} {{{body}}};")
        lines.append(f'_Static_assert(sizeof({name}) == sizeof(struct {tag}), '
                     f'"sizeof({name}) differs: a field was added, removed or resized");')
        lines.append(f'_Static_assert(_Alignof({name}) == _Alignof(struct {tag}), '
                     f'"alignment of {name}");')
        main.append(f'printf("sizeof {name} %zu\\n", sizeof({name}));')
        for f in field_names(body):
            lines.append(f'_Static_assert(offsetof({name}, {f}) == offsetof(struct {tag}, {f}), '
                         f'"offset of {name}.{f}");')
            lines.append(f'_Static_assert(SAME((({name} *)0)->{f}, ((struct {tag} *)0)->{f}), '
                         f'"type of {name}.{f}");')
            main.append(f'printf("offsetof {name}.{f} %zu\\n", offsetof({name}, {f}));')
    for ret, name, args in FNTYPE_RE.findall(CDEF):
        lines.append(f"typedef {ret}(*kvacheck__{name})({args});")
        lines.append(f'_Static_assert(SAME(*({name} *)0, *(kvacheck__{name} *)0), '
                     f'"callback type {name}");')
    for name, proto in cdef_functions().items():
        if name == "kva_cuda_importer_supported":
            continue
        renamed = re.sub(rf"\b{name}\s*\(", f"kvacheck__{name}(", proto, count=1)
        lines.append(renamed + ";")
        lines.append(f'_Static_assert(SAME({name}, kvacheck__{name}), "prototype of {name}");')
    for ename, body in ENUM_RE.findall(CDEF):
        for cname, value in ffi.typeof(f"enum {ename}").relements.items():
            lines.append(f'_Static_assert({cname} == {value}, "value of {cname}");')
    main.append("return 0; }")
    return "\n".join(lines + main) + "\n"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("layout")
    src = d / "check.c"
    src.write_text(generate_check())
    exe = d / "check"
    cmd = [cc, "-std=gnu11", "-Wall", "-Werror", "-o", str(exe), str(src)] + [
        f"-I{i}" for i in include_dirs()]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, ("kvadmit/_cdef.py does not match the headers:\n" +
                               "\n".join(l for l in r.stderr.splitlines() if "error" in l))
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def test_cdef_compiles_against_headers(compiled):
    assert compiled  # sizes, offsets, types, enumerators, prototypes: static asserts


def test_cffi_layout_equals_compiler(compiled):
    checked = 0
    for key, value in compiled.items():
        kind, what = key.split(" ", 1)
        if kind == "sizeof":
            assert ffi.sizeof(what) == int(value), what
        else:
            struct, field = what.split(".")
            assert ffi.offsetof(struct, field) == int(value), what
        checked += 1
    assert checked > 100


def test_headers_have_nothing_the_cdef_lacks():
    headers = strip_comments(header_text("kvadmit.h") + header_text("importer.h"))
    cdef_structs = dict(STRUCT_RE.findall(CDEF))
    missing = []
    for name, body in STRUCT_RE.findall(headers):
        if name.startswith("kva_cuda"):
            continue
        if name not in cdef_structs:
            missing.append(f"struct {name}")
            continue
        want = field_names(body)
        have = [n for n, _ in ffi.typeof(name).fields]
        if want != have:
            missing.append(f"{name}: header fields {want} != binding {have}")
    cdef_enums = {}
    for ename, _ in ENUM_RE.findall(CDEF):
        cdef_enums.update(ffi.typeof(f"enum {ename}").relements)
    for ename, body in ENUM_RE.findall(headers):
        if ename.startswith("kva_cuda"):
            continue
        for enumerator in re.findall(r"\b(KVA_\w+)\b\s*(?:=[^,]*)?,?", body):
            if enumerator not in cdef_enums:
                missing.append(f"enumerator {enumerator}")
    for m in re.finditer(r"#define\s+(KVA_\w+)\s+(\d+)", headers):
        if m.group(1) not in _cdef.CDEF:
            missing.append(f"#define {m.group(1)}")
    declared = set(re.findall(r"KVA_API\b[^;]*?\b(kva_\w+)\s*\(", headers))
    bound = set(cdef_functions()) | {"kva_cuda_importer_supported"}  # _cdef.CUDA_CDEF
    missing += sorted(f"function {f}" for f in declared - bound - _cdef.NOT_BOUND)
    missing += sorted(f"bound but not declared: {f}" for f in bound - declared)
    assert not missing, "kvadmit/_cdef.py lags the headers:\n" + "\n".join(missing)


def test_every_bound_function_is_exported():
    for name in cdef_functions():
        if name != "kva_cuda_importer_supported":
            assert getattr(lib, name) is not None


def test_python_enums_match_c():
    for cls in kvadmit._types.ENUMS:
        c = {k[len(cls._prefix):]: v for k, v in ffi.typeof(cls._ctype).relements.items()
             if not k.endswith("_COUNT")}
        assert {m.name: int(m) for m in cls} == c, cls.__name__


def test_config_covers_every_numeric_field():
    callbacks = {"lookup", "lookup_ctx", "importers", "log", "log_ctx", "wake", "wake_ctx",
                 "log_record", "log_record_ctx"}
    fields = {n for n, _ in ffi.typeof("kva_config").fields}
    assert set(kvadmit.Config.NUMERIC) == fields - callbacks - {"cost"}
    assert kvadmit.Config.COST == tuple(n for n, _ in ffi.typeof("kva_cost_config").fields)


def test_config_cost_writes_its_fields():
    tiers = (1, 2, 3, 4, 5)
    c = kvadmit.Config(total_pages=64, policy=kvadmit.Policy.COST,
                       cost={"page_bytes": 7, "prefill_tokens_per_s": 9, "half_life": 3,
                             "margin_pct": 20, "tier_bytes_per_s": tiers,
                             "tier_setup_ns": tiers, "prefill_attn_ps": 11}).to_c()
    assert (c.cost.page_bytes, c.cost.prefill_tokens_per_s, c.cost.half_life,
            c.cost.margin_pct, c.cost.prefill_attn_ps) == (7, 9, 3, 20, 11)
    assert tuple(c.cost.tier_bytes_per_s) == tiers == tuple(c.cost.tier_setup_ns)
    with pytest.raises(kvadmit.InvalidArgument, match="cost.page_bytes"):
        kvadmit.Config(total_pages=64, policy=kvadmit.Policy.COST,
                       cost={"page_bytes": 0}).to_c()
    with pytest.raises(kvadmit.InvalidArgument, match="cost.nope"):
        kvadmit.Config(total_pages=64, cost={"nope": 1}).to_c()
    e = kvadmit.Engine(total_pages=64, policy=kvadmit.Policy.COST,
                       cost={"prefill_attn_ps": 2000})
    assert e.stats().tier_bytes_per_s[kvadmit.Tier.DISK] == 1500000000
    assert e.stats().prefill_attn_ps == 2000
    # folded in at the next head decision (test_cost_policy.c checks the fit)
    e.prefill_observed(100, 100 + 2 * 100 ** 2, 100 ** 2)
    with pytest.raises(kvadmit.InvalidArgument):
        e.prefill_observed(1, 0)
    e.close()


def test_config_defaults_are_kva_config_default():
    """Every numeric default is kva_config_default()'s own value (page_tokens
    once defaulted to 0 here against C's 16, and Engine(total_pages=1024)
    raised)."""
    c = ffi.new("kva_config *")
    lib.kva_config_default(c)
    py = kvadmit.Config()
    for name in kvadmit.Config.NUMERIC:
        assert int(getattr(py, name)) == int(getattr(c, name)), name
    kvadmit.Engine(total_pages=1024).close()


def test_stats_dataclass_has_every_field():
    import dataclasses
    assert [f.name for f in dataclasses.fields(kvadmit.Stats)] == [
        n for n, _ in ffi.typeof("kva_stats").fields]


def test_fleet_cdef_matches_fleet_header(tmp_path):
    """The router query's declarations (kvadmit/_fleet.py) against
    fleet/include/kvadmit/fleet.h: every struct's size and every field's
    offset, so a field added in C cannot make cffi write past a struct."""
    from kvadmit._fleet import FLEET_CDEF, fleet_ffi
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <kvadmit/fleet.h>",
             "int main(void) {"]
    expected = {}
    for name, body in STRUCT_RE.findall(strip_comments(FLEET_CDEF)):
        lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
        expected[name] = fleet_ffi.sizeof(name)
        for f in field_names(body):
            lines.append(f'printf("{name}.{f} %zu\\n", offsetof({name}, {f}));')
            expected[f"{name}.{f}"] = fleet_ffi.offsetof(name, f)
    lines.append("return 0; }")
    src, exe = tmp_path / "fleet_check.c", tmp_path / "fleet_check"
    src.write_text("\n".join(lines) + "\n")
    incs = include_dirs() + [os.path.join(ROOT, "fleet", "include")]
    r = subprocess.run([cc, "-std=gnu11", "-o", str(exe), str(src)] + [f"-I{i}" for i in incs],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    got = {k: int(v) for k, v in (line.rsplit(" ", 1) for line in out.splitlines())}
    assert len(got) > 20
    assert got == expected
