# SPDX-License-Identifier: Apache-2.0
"""Finds and loads libkvadmit with cffi in ABI mode (no compiler needed).

Where the library comes from, first match wins:
  1. $KVADMIT_LIBRARY: a path (or a name dlopen resolves);
  2. the installed library: ctypes.util.find_library("kvadmit") (ldconfig's
     cache, LD_LIBRARY_PATH), then libkvadmit.so.0.2 under lib*/ of the
     package's own prefix, the interpreter's prefixes, /usr/local and /usr
     (installed());
  3. an in-tree build: build/rel, then any other build/*/ of the source tree
     this package sits in (python/kvadmit -> ../../build), except sanitizer
     builds (asan, tsan, a fuzzer's): dlopen of an ASan library aborts an
     interpreter that was not started with the ASan runtime, so trying one
     would kill the process instead of raising ImportError.
The library must be the ABI this binding was written for: the same major and
minor version (kva_version(), as CMake's SameMinorVersion), else ImportError.
"""
import ctypes.util
import glob
import mmap
import os
import sys

from cffi import FFI

from ._cdef import CDEF, CUDA_CDEF

ABI_MAJOR, ABI_MINOR = 0, 2  # the header version _cdef.py describes
SONAME = f"libkvadmit.so.{ABI_MAJOR}.{ABI_MINOR}"
CUDA_SONAME = f"libkvadmit-cuda.so.{ABI_MAJOR}.{ABI_MINOR}"

ffi = FFI()
ffi.cdef(CDEF)

_HERE = os.path.dirname(os.path.abspath(__file__))


# Symbols an instrumented library refers to: its sanitizer runtime must be
# loaded first (ASan aborts the process otherwise; TSan fails for want of
# static TLS).
_SANITIZER_SYMBOLS = (b"__asan_init", b"__tsan_init", b"__msan_init", b"__hwasan_init")


def _sanitized(path):
    """Whether the library at path is built with a sanitizer (names its init)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return any(m.find(sym) >= 0 for sym in _SANITIZER_SYMBOLS)
    except (OSError, ValueError):
        return True  # unreadable (or empty): not one to try


def _prefixes():
    """Where an installed library may sit, in order: the prefix this package
    was installed into (PREFIX/lib/python3/dist-packages/kvadmit, as `cmake
    --install` puts it), the interpreter's prefixes (a virtual environment's
    base), /usr/local and /usr."""
    seen = []
    here = os.path.normpath(os.path.join(_HERE, "..", "..", "..", ".."))
    for p in (here, sys.prefix, sys.base_prefix, "/usr/local", "/usr"):
        p = os.path.normpath(p)
        if p not in seen:
            seen.append(p)
    return seen


def installed(name, soname):
    """The installed lib`name` (`soname`): ldconfig's cache
    (ctypes.util.find_library), then `soname` under lib*/ and lib*/*-linux-gnu/
    of each of _prefixes() -- so a `cmake --install --prefix /usr/local`
    without ldconfig, or a package pip-installed into a virtual environment,
    still finds it."""
    found = ctypes.util.find_library(name)
    if found:
        yield found
    for prefix in _prefixes():
        for d in sorted(glob.glob(os.path.join(prefix, "lib*"))) + sorted(
                glob.glob(os.path.join(prefix, "lib*", "*-linux-gnu"))):
            p = os.path.join(d, soname)
            if os.path.exists(p):
                yield p


def _candidates(skipped=None):
    """The paths (or names) to try, in order; sanitizer builds skipped are
    noted in `skipped` (a list) for the ImportError."""
    if skipped is None:
        skipped = []
    env = os.environ.get("KVADMIT_LIBRARY")
    if env:
        yield env
        return
    yield from installed("kvadmit", SONAME)
    tree = os.path.normpath(os.path.join(_HERE, "..", "..", "build"))
    rel = os.path.join(tree, "rel", SONAME)
    builds = [rel] if os.path.exists(rel) else []
    builds += [p for p in sorted(glob.glob(os.path.join(tree, "*", SONAME))) if p != rel]
    for p in builds:
        if _sanitized(p):
            skipped.append(f"{p}: a sanitizer build, not tried")
        else:
            yield p


def _load():
    errors = []
    for cand in _candidates(errors):
        try:
            lib = ffi.dlopen(cand)
        except OSError as exc:
            errors.append(f"{cand}: {exc}")
            continue
        return cand, lib
    where = "; ".join(errors) if errors else "no candidate found"
    raise ImportError("kvadmit: cannot load libkvadmit (set KVADMIT_LIBRARY to its path, or "
                      f"install it): {where}")


library_path, lib = _load()

_v = lib.kva_version()
if (_v >> 16, (_v >> 8) & 0xFF) != (ABI_MAJOR, ABI_MINOR):
    raise ImportError(
        f"kvadmit: {library_path} is version {ffi.string(lib.kva_version_string()).decode()}, "
        f"this binding needs {ABI_MAJOR}.{ABI_MINOR}.x")

# The CUDA importer's library, when the process can load it: only to answer
# cuda_importer_supported(). Loaded lazily, never required.
cuda_ffi = FFI()
cuda_ffi.cdef(CUDA_CDEF)
