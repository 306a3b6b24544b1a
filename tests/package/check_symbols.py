#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shared libraries export exactly the functions the public headers declare.

Usage: check_symbols.py [--node=VERSION_NODE] [--readelf=READELF --archive=LIB.a ...]
                        NM HEADER_DIR LIBKVADMIT_SO LIBKVADMIT_CUDA_SO
                        [FLEET_HEADER_DIR LIBKVADMIT_FLEET_SO]

The headers' function declarations (kvadmit.h, importer.h: every one carries
KVA_API) are split by owner: kva_cuda_importer_* belong to libkvadmit-cuda,
everything else to libkvadmit. Each library's defined dynamic symbols
(nm -D --defined-only) must equal its share: a missing KVA_API, an internal
symbol (kva__*, lockfree/ helpers, an archive's) or a stale declaration all
fail, and so does a declaration without KVA_API. With the optional fleet
pair, libkvadmit-fleet must export exactly what fleet/include/kvadmit/*.h
declares (kvadmit/fleet.h), each with KVA_API too.

--node: every export must carry that symbol version as its default
(kva_submit@@KVADMIT_0.2: the version script of cmake/libraries.cmake).

--archive (with --readelf): the static archive defines no default-visibility
symbol (KVA_API is empty in the archives, so a shared object that links one
does not re-export kvadmit's API), and its global names are kva_*/kva__*
only, plus kvf_* in libkvadmit-fleet.a (docs/embedding.md, "Exported
symbols").
"""
import pathlib
import re
import subprocess
import sys


def header_functions(header_dir):
    funcs, unmarked = set(), set()
    for h in sorted(pathlib.Path(header_dir).glob("*.h")):
        text = h.read_text()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        text = re.sub(r"(?m)^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text)  # directives, continued lines too
        text = text.replace('extern "C"', " ")
        for stmt in re.split(r"[;{}]", text):
            stmt = " ".join(stmt.split())
            if not stmt or stmt.startswith("typedef"):
                continue
            m = re.match(r"^([\w\s\*]*?)\b(kva_\w+)\s*\(", stmt)
            if m:
                funcs.add(m.group(2))
                if not re.match(r"^KVA_API\b", stmt):
                    unmarked.add(m.group(2))
    return funcs, unmarked


def exported(nm, lib, node=None):
    """Defined dynamic symbols, without versions; the unversioned ones too."""
    out = subprocess.run([nm, "-D", "--defined-only", lib], capture_output=True, text=True,
                         check=True).stdout
    syms, unversioned = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        if parts[1] == "A" and parts[2].split("@")[0] == node:
            continue  # the version definition itself
        name = parts[2].split("@")[0]
        syms.add(name)
        if node and not parts[2].endswith("@@" + node):
            unversioned.add(parts[2])
    return syms, unversioned


# GCC names one hidden weak symbol after each link-time optimized source file
# (engine.c.e3f24ffb, cmake/optimization.cmake).
GCC_LTO_MARK = re.compile(r"[A-Za-z0-9_]+\.c\.[0-9a-f]{8}")


def archive_problems(readelf, archive):
    """Default-visibility definitions, and global names outside kvadmit's prefixes."""
    out = subprocess.run([readelf, "-s", "-W", archive], capture_output=True, text=True,
                         check=True).stdout
    allowed = ("kva_", "kvf_") if "fleet" in pathlib.Path(archive).name else ("kva_",)
    visible, foreign = set(), set()
    for line in out.splitlines():
        parts = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(parts) < 8 or not parts[0].endswith(":") or parts[6] == "UND":
            continue
        bind, vis, name = parts[4], parts[5], parts[7]
        if bind not in ("GLOBAL", "WEAK") or name.startswith("__"):
            continue  # locals; compiler and sanitizer run-time names
        if GCC_LTO_MARK.fullmatch(name) and parts[3] == "NOTYPE" and bind == "WEAK" \
                and vis == "HIDDEN":
            continue  # GCC's per-file mark in a link-time optimized object: no code, no data
        if vis == "DEFAULT":
            visible.add(name)
        if not name.startswith(allowed):
            foreign.add(name)
    return sorted(visible), sorted(foreign)


def main():
    args = sys.argv[1:]
    node = readelf = None
    archives = []
    while args and args[0].startswith("--"):
        opt, _, val = args.pop(0).partition("=")
        if opt == "--node":
            node = val
        elif opt == "--readelf":
            readelf = val
        elif opt == "--archive":
            archives.append(val)
        else:
            print(__doc__)
            return 2
    if len(args) not in (4, 6) or (archives and not readelf):
        print(__doc__)
        return 2
    nm, header_dir, core_lib, cuda_lib = args[:4]
    funcs, unmarked = header_functions(header_dir)
    want = {
        core_lib: {f for f in funcs if not f.startswith("kva_cuda_importer_")},
        cuda_lib: {f for f in funcs if f.startswith("kva_cuda_importer_")},
    }
    if len(args) == 6:
        fleet_funcs, fleet_unmarked = header_functions(args[4])
        want[args[5]] = fleet_funcs
        unmarked |= fleet_unmarked
    ok = True
    if unmarked:
        ok = False
        print("declared without KVA_API:", " ".join(sorted(unmarked)))
    for lib, names in want.items():
        have, unversioned = exported(nm, lib, node)
        print(f"{pathlib.Path(lib).name}: {len(have)} exported, {len(names)} declared")
        for s in sorted(have):
            print("  ", s)
        extra, missing = sorted(have - names), sorted(names - have)
        if extra:
            ok = False
            print(f"{lib}: exported but not declared in the public headers:", " ".join(extra))
        if missing:
            ok = False
            print(f"{lib}: declared but not exported:", " ".join(missing))
        if unversioned:
            ok = False
            print(f"{lib}: exported without the default version @@{node}:",
                  " ".join(sorted(unversioned)))
    for archive in archives:
        visible, foreign = archive_problems(readelf, archive)
        print(f"{pathlib.Path(archive).name}: {len(visible)} default-visibility definitions, "
              f"{len(foreign)} global names outside kvadmit's prefixes")
        if visible:
            ok = False
            print(f"{archive}: default visibility (a shared object linking it re-exports them):",
                  " ".join(visible))
        if foreign:
            ok = False
            print(f"{archive}: global names outside kvadmit's prefixes:", " ".join(foreign))
    print("symbols: OK" if ok else "symbols: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
