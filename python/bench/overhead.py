#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Call overhead of the three ways Python can reach libkvadmit (python/README.md).

Measures, on one engine with a blocked-free empty queue:
  * a kva_submit + kva_cancel round trip (then a step, untimed, every 1000);
  * kva_step with nothing to do (empty plan);
through ctypes, cffi in ABI mode, and a minimal C extension (probe_ext.c,
compiled here with python3-dev's headers); and, when the package imports,
through kvadmit.Engine itself.

Usage: overhead.py [--lib PATH] [--include DIR ...] [--rounds N]
"""
import argparse
import ctypes
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

BATCH = 1000


def best_ns(fn, rounds):
    """Best of `rounds` timings of fn(), per operation (fn returns its op count)."""
    best = None
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        n = fn()
        dt = (time.perf_counter_ns() - t0) / n
        best = dt if best is None else min(best, dt)
    return best


# ---- ctypes ----------------------------------------------------------------
class Handle(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("gen", ctypes.c_uint32), ("slot", ctypes.c_uint32)]


class Checkpoint(ctypes.Structure):
    _fields_ = [("position", ctypes.c_uint32), ("location", ctypes.c_uint8),
                ("compatible", ctypes.c_uint8), ("reserved_", ctypes.c_uint16),
                ("id", ctypes.c_uint64), ("epoch", ctypes.c_uint64)]


class Request(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("prefix_key", ctypes.c_uint64),
                ("prompt_tokens", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("user", ctypes.c_void_p), ("local", Checkpoint)]


def bench_ctypes(path, engine_factory, rounds):
    lib = ctypes.CDLL(path)
    lib.kva_submit.argtypes = [ctypes.c_void_p, ctypes.POINTER(Request), ctypes.POINTER(Handle)]
    lib.kva_submit.restype = ctypes.c_int
    lib.kva_cancel.argtypes = [ctypes.c_void_p, Handle]
    lib.kva_cancel.restype = ctypes.c_int
    lib.kva_step.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p]
    lib.kva_step.restype = ctypes.c_int
    e, plan, destroy = engine_factory()
    req = Request()
    state = {"id": 0, "now": 0}

    def pairs():
        submit, cancel = lib.kva_submit, lib.kva_cancel
        rid = state["id"]
        for _ in range(BATCH):
            rid += 1
            req.id = rid
            req.prefix_key = rid
            req.prompt_tokens = 100
            h = Handle()
            if submit(e, req, h) != 0:
                raise RuntimeError("submit")
            cancel(e, h)
        state["id"] = rid
        state["now"] += 1000
        return BATCH

    def timed_pairs():
        n = pairs()
        return n

    def steps():
        step, now = lib.kva_step, state["now"]
        for _ in range(BATCH):
            now += 1000
            step(e, now, plan)
        state["now"] = now
        return BATCH

    r = {}
    r["submit+cancel"] = best_with_step(timed_pairs, lambda: lib.kva_step(e, next_now(state), plan),
                                        rounds)
    r["step (empty)"] = best_ns(steps, rounds)
    destroy(e)
    return r


def next_now(state):
    state["now"] += 1000
    return state["now"]


def best_with_step(pairs, step, rounds):
    best = None
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        n = pairs()
        dt = (time.perf_counter_ns() - t0) / n
        step()  # ingest and retire what the batch left, untimed
        best = dt if best is None else min(best, dt)
    return best


# ---- cffi ABI mode ----------------------------------------------------------
def bench_cffi(ffi, lib, rounds):
    cfg = ffi.new("kva_config *")
    lib.kva_config_default(cfg)
    cfg.total_pages, cfg.page_tokens, cfg.copy_slots, cfg.max_running = 4096, 16, 4, 256
    err = ffi.new("int *")
    e = lib.kva_engine_create(cfg, err)
    plan = make_cffi_plan(ffi)
    req = ffi.new("kva_request *")
    state = {"id": 0, "now": 0}

    def pairs():
        submit, cancel, new = lib.kva_submit, lib.kva_cancel, ffi.new
        rid = state["id"]
        for _ in range(BATCH):
            rid += 1
            req.id = rid
            req.prefix_key = rid
            req.prompt_tokens = 100
            h = new("kva_handle *")
            if submit(e, req, h) != 0:
                raise RuntimeError("submit")
            cancel(e, h[0])
        state["id"] = rid
        return BATCH

    def steps():
        step, now = lib.kva_step, state["now"]
        for _ in range(BATCH):
            now += 1000
            step(e, now, plan)
        state["now"] = now
        return BATCH

    r = {"submit+cancel": best_with_step(pairs, lambda: lib.kva_step(e, next_now(state), plan),
                                         rounds),
         "step (empty)": best_ns(steps, rounds)}
    lib.kva_engine_destroy(e)
    return r


def make_cffi_plan(ffi):
    keep = []
    plan = ffi.new("kva_plan *")
    for name, ctype, cap in (("admitted", "kva_admission[]", 64), ("pages", "uint32_t[]", 65536),
                             ("copies", "kva_copy_job[]", 64),
                             ("fallbacks", "kva_fallback[]", 64), ("ended", "kva_ended[]", 64)):
        arr = ffi.new(ctype, cap)
        keep.append(arr)
        setattr(plan, name, arr)
        setattr(plan, name + "_cap", cap)
    make_cffi_plan.keep = getattr(make_cffi_plan, "keep", []) + keep
    return plan


# ---- C extension ------------------------------------------------------------
def build_ext(path, includes, tmp):
    so = os.path.join(tmp, "kva_probe_ext" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC",
           "-I" + sysconfig.get_paths()["include"]] + ["-I" + d for d in includes] + [
        os.path.join(HERE, "probe_ext.c"), "-o", so, path, "-Wl,-rpath," + os.path.dirname(path)]
    subprocess.run(cmd, check=True)
    spec = importlib.util.spec_from_file_location("kva_probe_ext", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench_ext(mod, ffi, lib, rounds):
    cfg = ffi.new("kva_config *")
    lib.kva_config_default(cfg)
    cfg.total_pages, cfg.page_tokens, cfg.copy_slots, cfg.max_running = 4096, 16, 4, 256
    err = ffi.new("int *")
    e = lib.kva_engine_create(cfg, err)
    ep = int(ffi.cast("uintptr_t", e))
    state = {"id": 0, "now": 0}

    def pairs():
        submit, cancel = mod.submit, mod.cancel
        rid = state["id"]
        for _ in range(BATCH):
            rid += 1
            h = submit(ep, rid, rid, 100)
            cancel(ep, h)
        state["id"] = rid
        return BATCH

    def steps():
        step, now = mod.step, state["now"]
        for _ in range(BATCH):
            now += 1000
            step(ep, now)
        state["now"] = now
        return BATCH

    r = {"submit+cancel": best_with_step(pairs, lambda: mod.step(ep, next_now(state)), rounds),
         "step (empty)": best_ns(steps, rounds)}
    lib.kva_engine_destroy(e)
    return r


# ---- the package --------------------------------------------------------------
def bench_package(rounds):
    import kvadmit
    eng = kvadmit.Engine(kvadmit.Config(total_pages=4096, page_tokens=16, copy_slots=4,
                                        max_running=256))
    state = {"id": 0, "now": 0}

    def pairs():
        submit, cancel = eng.submit, eng.cancel
        rid = state["id"]
        for _ in range(BATCH):
            rid += 1
            cancel(submit(rid, 100, prefix_key=rid))
        state["id"] = rid
        return BATCH

    def steps():
        step, now = eng.step, state["now"]
        for _ in range(BATCH):
            now += 1000
            step(now)
        state["now"] = now
        return BATCH

    r = {"submit+cancel": best_with_step(pairs, lambda: eng.step(next_now(state)), rounds),
         "step (empty)": best_ns(steps, rounds)}
    eng.close()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("KVADMIT_LIBRARY"))
    ap.add_argument("--include", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    from kvadmit import _lib
    ffi, lib = _lib.ffi, _lib.lib
    path = args.lib or _lib.library_path

    def ctypes_engine():
        lib_c = ctypes.CDLL(path)
        buf = ffi.new("kva_config *")
        lib.kva_config_default(buf)
        buf.total_pages, buf.page_tokens, buf.copy_slots, buf.max_running = 4096, 16, 4, 256
        lib_c.kva_engine_create.restype = ctypes.c_void_p
        lib_c.kva_engine_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        err = ctypes.c_int()
        e = lib_c.kva_engine_create(int(ffi.cast("uintptr_t", buf)), ctypes.byref(err))
        plan = make_cffi_plan(ffi)  # plain memory: ctypes passes its address
        ctypes_engine.keep = plan
        lib_c.kva_engine_destroy.argtypes = [ctypes.c_void_p]
        return e, ctypes.c_void_p(int(ffi.cast("uintptr_t", plan))), lib_c.kva_engine_destroy

    results = {"ctypes": bench_ctypes(path, ctypes_engine, args.rounds),
               "cffi ABI": bench_cffi(ffi, lib, args.rounds)}
    if args.include:
        with tempfile.TemporaryDirectory() as tmp:
            results["C extension"] = bench_ext(build_ext(path, args.include, tmp), ffi, lib,
                                               args.rounds)
    try:
        results["kvadmit package (cffi)"] = bench_package(args.rounds)
    except (ImportError, AttributeError) as exc:
        print("package not measured:", exc)
    print(f"{'binding':<26} {'submit+cancel ns':>17} {'empty step ns':>14}")
    for name, r in results.items():
        print(f"{name:<26} {r['submit+cancel']:>17.0f} {r['step (empty)']:>14.0f}")


if __name__ == "__main__":
    main()
