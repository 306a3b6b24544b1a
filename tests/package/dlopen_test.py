#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Loads kvadmit from Python with ctypes, as a Python serving engine would.

Usage: dlopen_test.py core LIBKVADMIT_SO VERSION
       dlopen_test.py cuda LIBKVADMIT_CUDA_SO VERSION

ctypes.CDLL is dlopen(RTLD_LOCAL) in an interpreter that has no jemalloc:
the library must load, report VERSION, and run an engine. With the CUDA
library (which brings the core), KVA_FEATURE_CUDA_IMPORTER must equal
kva_cuda_importer_supported(); with the core alone it is false.
"""
import ctypes
import sys

KVA_FEATURE_RESTORE_RESERVATION = 1
KVA_FEATURE_CUDA_IMPORTER = 6


class ConfigHead(ctypes.Structure):
    """The first fields of kva_config (kvadmit.h); the rest keep their defaults."""
    _fields_ = [("total_pages", ctypes.c_uint32), ("page_tokens", ctypes.c_uint32),
                ("decode_reserve_pages", ctypes.c_uint32),
                ("decode_headroom_pages", ctypes.c_uint32),
                ("prefill_chunk_tokens", ctypes.c_uint32), ("copy_slots", ctypes.c_uint16),
                ("max_running", ctypes.c_uint16)]


def main():
    mode, path, want_version = sys.argv[1:4]
    lib = ctypes.CDLL(path)
    if mode == "cuda":
        cuda = lib
        cuda.kva_cuda_importer_supported.restype = ctypes.c_bool
        supported = cuda.kva_cuda_importer_supported()
        core = lib  # the core's symbols are reachable through its dependency
    else:
        core = lib
    core.kva_version.restype = ctypes.c_uint32
    core.kva_version_string.restype = ctypes.c_char_p
    core.kva_has_feature.restype = ctypes.c_bool
    core.kva_has_feature.argtypes = [ctypes.c_int]
    version = core.kva_version_string().decode()
    number = core.kva_version()
    print(f"ctypes.CDLL({path}): kva_version() = {number:#08x} ({version})")
    major, minor, patch = (int(x) for x in want_version.split("."))
    if version != want_version or number != (major << 16 | minor << 8 | patch):
        return 1
    if not core.kva_has_feature(KVA_FEATURE_RESTORE_RESERVATION):
        return 1
    feature = core.kva_has_feature(KVA_FEATURE_CUDA_IMPORTER)
    if mode == "cuda":
        print(f"KVA_FEATURE_CUDA_IMPORTER = {feature}, kva_cuda_importer_supported() = {supported}")
        if feature != supported:
            return 1
    else:
        print(f"core alone: KVA_FEATURE_CUDA_IMPORTER = {feature}")
        if feature:
            return 1

    buf = ctypes.create_string_buffer(4096)  # larger than any kva_config
    core.kva_config_default(buf)
    head = ConfigHead.from_buffer(buf)
    head.total_pages, head.page_tokens, head.copy_slots, head.max_running = 64, 16, 2, 8
    err = ctypes.c_int(0)
    core.kva_engine_create.restype = ctypes.c_void_p
    engine = core.kva_engine_create(buf, ctypes.byref(err))
    if not engine:
        print("kva_engine_create:", err.value)
        return 1
    core.kva_engine_destroy.argtypes = [ctypes.c_void_p]
    core.kva_engine_destroy(engine)
    print("engine created and destroyed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
