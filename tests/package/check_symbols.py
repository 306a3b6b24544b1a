#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shared libraries export exactly the functions the public headers declare.

Usage: check_symbols.py NM HEADER_DIR LIBKVADMIT_SO LIBKVADMIT_CUDA_SO
                        [FLEET_HEADER_DIR LIBKVADMIT_FLEET_SO]

The headers' function declarations (kvadmit.h, importer.h: every one carries
KVA_API) are split by owner: kva_cuda_importer_* belong to libkvadmit-cuda,
everything else to libkvadmit. Each library's defined dynamic symbols
(nm -D --defined-only) must equal its share: a missing KVA_API, an internal
symbol (kva__*, lockfree/ helpers, an archive's) or a stale declaration all
fail, and so does a declaration without KVA_API. With the optional fleet
pair, libkvadmit-fleet must export exactly what fleet/include/kvadmit/*.h
declares (kvadmit/fleet.h), each with KVA_API too.
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


def exported(nm, lib):
    out = subprocess.run([nm, "-D", "--defined-only", lib], capture_output=True, text=True,
                         check=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            syms.add(parts[2].split("@")[0])
    return syms


def main():
    if len(sys.argv) not in (5, 7):
        print(__doc__)
        return 2
    nm, header_dir, core_lib, cuda_lib = sys.argv[1:5]
    funcs, unmarked = header_functions(header_dir)
    want = {
        core_lib: {f for f in funcs if not f.startswith("kva_cuda_importer_")},
        cuda_lib: {f for f in funcs if f.startswith("kva_cuda_importer_")},
    }
    if len(sys.argv) == 7:
        fleet_funcs, fleet_unmarked = header_functions(sys.argv[5])
        want[sys.argv[6]] = fleet_funcs
        unmarked |= fleet_unmarked
    ok = True
    if unmarked:
        ok = False
        print("declared without KVA_API:", " ".join(sorted(unmarked)))
    for lib, names in want.items():
        have = exported(nm, lib)
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
    print("symbols: OK" if ok else "symbols: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
