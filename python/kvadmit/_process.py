# SPDX-License-Identifier: Apache-2.0
"""Calls about the loaded library and the process, not an engine: versions,
features, reason names, the fork handlers and the CUDA importer's support."""
import os
from typing import Any, Optional, Tuple

from ._lib import ffi, lib

def version() -> int:
    """kva_version(): KVA_VERSION_NUMBER of the loaded library."""
    return lib.kva_version()


def version_string() -> str:
    return ffi.string(lib.kva_version_string()).decode()


def has_feature(feature) -> bool:
    return bool(lib.kva_has_feature(int(feature)))


def reason_name(reason) -> str:
    return ffi.string(lib.kva_reason_name(int(reason))).decode()


_fork_registered = False


def register_at_fork():
    """Registers kva_atfork_prepare/parent/child with os.register_at_fork, so
    that a child made by os.fork() (multiprocessing's fork start method) may
    use kvadmit (kvadmit.h: "Fork"). Once per process; returns False if it
    already was."""
    global _fork_registered
    if _fork_registered:
        return False
    os.register_at_fork(before=lib.kva_atfork_prepare, after_in_parent=lib.kva_atfork_parent,
                        after_in_child=lib.kva_atfork_child)
    _fork_registered = True
    return True


def cuda_library() -> Optional[str]:
    """Where libkvadmit-cuda is loaded from: $KVADMIT_CUDA_LIBRARY, the one
    beside the loaded libkvadmit (a prefix install or a build tree puts both
    in one folder), or an installed one (libkvadmit's search, _lib.installed);
    None if the process cannot load any."""
    global _cuda
    if _cuda is None:
        from ._lib import CUDA_SONAME, cuda_ffi, installed, library_path
        env = os.environ.get("KVADMIT_CUDA_LIBRARY")
        if env:
            paths = [env]
        else:
            beside = os.path.join(os.path.dirname(os.path.realpath(library_path)), CUDA_SONAME)
            paths = ([beside] if os.path.exists(beside) else []) + list(
                installed("kvadmit-cuda", CUDA_SONAME))
        _cuda = (None, None)
        for path in paths:
            try:
                lib = cuda_ffi.dlopen(path)
                lib.kva_cuda_importer_supported  # the symbol, or AttributeError
            except (OSError, AttributeError):
                continue
            _cuda = (path, lib)
            break
    return _cuda[0]


_cuda: Optional[Tuple[Optional[str], Any]] = None


def cuda_importer_supported() -> bool:
    """kva_cuda_importer_supported() of libkvadmit-cuda (cuda_library()):
    whether it was built with CUDA; False if the process cannot load it."""
    if cuda_library() is None:
        return False
    assert _cuda is not None
    return bool(_cuda[1].kva_cuda_importer_supported())
