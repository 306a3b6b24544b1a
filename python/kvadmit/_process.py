# SPDX-License-Identifier: Apache-2.0
"""Calls about the loaded library and the process, not an engine: versions,
features, reason names, the fork handlers and the CUDA importer's support."""
import os

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


def cuda_importer_supported() -> bool:
    """kva_cuda_importer_supported() of libkvadmit-cuda, if the process can
    load it ($KVADMIT_CUDA_LIBRARY or the installed one); False otherwise."""
    import ctypes.util
    from ._lib import cuda_ffi
    path = os.environ.get("KVADMIT_CUDA_LIBRARY") or ctypes.util.find_library("kvadmit-cuda")
    if not path:
        return False
    try:
        return bool(cuda_ffi.dlopen(path).kva_cuda_importer_supported())
    except OSError:
        return False
