# SPDX-License-Identifier: Apache-2.0
"""The CPU importer (include/kvadmit/importer.h) for Python hosts."""
import dataclasses
import threading
import weakref
from typing import Callable

from ._callback_context import enter_callback, get_ident, onerror, report_callback_error
from ._errors import CONVERSION, arg_error, error
from ._lib import ffi, lib
from ._types import CopyToken


@dataclasses.dataclass(frozen=True)
class ImporterStats:
    """kva_importer_stats (fields in importer.h order)."""
    jobs_submitted: int
    jobs_refused: int
    jobs_ok: int
    jobs_failed: int
    jobs_injected: int
    jobs_cancelled: int
    pages_copied: int
    bytes_copied: int
    copy_calls: int
    busy_ns: int
    in_flight: int


class _ImporterCore:
    """What the C importer refers to: its callbacks, the destination buffer,
    the resolved sources it copies from, and its owner. An engine's finalizer
    state holds the cores of its importers, so a core reaches the host's
    resolve only through a weak reference to the CpuImporter: a resolve that
    refers to the engine (a bound method of the host's scheduler) must not
    keep the engine alive."""

    def __init__(self, importer, dest):
        self.importer = weakref.ref(importer)
        self.dest_obj = dest  # the C importer writes into it until destroyed
        self.dest = ffi.from_buffer(dest, require_writable=True)
        self.imp = None       # the C importer; None once its destroy has returned
        self.closing = False  # its destroy has begun: no more calls into it
        self.owner = None     # the EngineState of the engine that owns it
        # Worker thread -> the source its current job resolved. In
        # cpu_importer.c a job's resolve and its report run one after the
        # other on one worker thread, so this pins exactly one job's source
        # until that job is reported; a job cancelled by destroy before it
        # started is reported without a resolve and unpins nothing.
        self.pins = {}
        self.lock = threading.Lock()
        self.resolve_cb = ffi.callback("kva_resolve_fn", self._resolve_c,
                                       onerror=onerror("resolve"))
        self.report_cb = ffi.callback("kva_report_fn", self._report_c,
                                      onerror=onerror("report"))

    # -- callbacks (importer worker threads) ----------------------------------------
    def _resolve_c(self, ctx, cid, epoch, rank, src, nbytes):
        s = enter_callback(self)
        try:
            try:
                importer = self.importer()
                if importer is None:  # collected with its engine: the engine is closing
                    raise LookupError("the CpuImporter was collected")
                obj = importer._resolve(cid, epoch, rank)
                del importer
                if obj is None:
                    raise LookupError(f"no checkpoint {cid} epoch {epoch} rank {rank}")
                buf = ffi.from_buffer(obj)
            except BaseException as exc:
                if not isinstance(exc, LookupError):
                    report_callback_error("resolve", type(exc), exc, exc.__traceback__)
                return -2  # -ENOENT: the job fails
            self.pins[get_ident()] = buf
            src[0] = buf
            nbytes[0] = len(buf)
            return 0
        finally:
            s.pop()

    def _report_c(self, ctx, e, job, status):
        s = enter_callback(self)
        try:
            if e != ffi.NULL:
                rc = lib.kva_copy_done(e, job.token, job.rank, status)
                if rc and rc != -116:  # -ESTALE: a cancelled / superseded attempt
                    t = job.token
                    report_callback_error(
                        "report", RuntimeError,
                        RuntimeError(f"kva_copy_done({CopyToken(t.id, t.gen, t.attempt, t.slot)},"
                                     f" rank {job.rank}) returned {rc}"), None)
        finally:
            # this job is reported (its pages were copied before): its source
            # may go; nothing when it never resolved (failed or cancelled)
            self.pins.pop(get_ident(), None)
            s.pop()

    # -- lifetime ---------------------------------------------------------------------------
    def close(self, owner=None):
        """kva_cpu_importer_destroy, once, if `owner` (None: the host) owns
        it; never on one of its own workers (the engine's close and finalizer
        see to that). The lock makes the check, and a claim, atomic."""
        with self.lock:
            if self.owner is not owner:
                raise error(-22, "CpuImporter.close: this importer belongs to an engine; "
                                 "Engine.close() closes it")
            if self.closing:
                return
            self.closing = True
        if self.imp is not None:
            lib.kva_cpu_importer_destroy(self.imp)
            self.imp = None
            self.pins.clear()

    def live(self):
        """The C importer, for a call into it; InvalidArgument once closing."""
        if self.closing:
            raise error(-22, "importer is closed")
        return self.imp

    def detach_and_close(self):
        """The owning engine's shutdown: close, then it is no one's."""
        self.close(self.owner)
        self.owner = None


class CpuImporter:
    """kva_cpu_importer: worker threads that memcpy checkpoint pages into a
    host page pool. Put it in Config(importers=[imp]) (index = its rank); the
    engine then owns it and closes it first when it closes (close() on an
    owned importer raises InvalidArgument). If the Engine cannot be created,
    the importer is the host's again.

    dest        a writable buffer (bytearray, mmap, numpy array ...): page p
                at byte p * page_bytes; dest_pages = len(dest) // page_bytes.
    resolve(checkpoint_id, epoch, rank) -> buffer | None
                finds the checkpoint's bytes for one rank (page i at
                i * page_bytes, the last page may be partial). Runs on an
                importer worker thread (it takes the GIL); may block briefly.
                None, or an exception (logged), fails the job (the engine
                retries or falls back). The binding keeps the returned object
                alive (and unresizable) until the job that resolved it has
                been reported, so it may come from a dict the host evicts from.
    latency_ns, bandwidth_bytes_per_s, fail_rate, seed: injection (importer.h).
    """

    def __init__(self, dest, page_bytes: int, resolve: Callable, *, threads: int = 1,
                 rank: int = 0, latency_ns: int = 0, bandwidth_bytes_per_s: int = 0,
                 fail_rate: float = 0.0, seed: int = 0):
        self.page_bytes = page_bytes
        self.rank = rank
        self._resolve = resolve
        try:
            core = self._core = _ImporterCore(self, dest)
            cfg = ffi.new("kva_cpu_importer_config *")
            lib.kva_cpu_importer_config_default(cfg)
            cfg.threads = threads
            cfg.rank = rank
            cfg.page_bytes = page_bytes
            cfg.dest_base = core.dest
            cfg.dest_pages = len(core.dest) // page_bytes if page_bytes else 0
            cfg.resolve = core.resolve_cb
            cfg.report = core.report_cb
            cfg.latency_ns = latency_ns
            cfg.bandwidth_bytes_per_s = bandwidth_bytes_per_s
            cfg.fail_rate = fail_rate
            cfg.seed = seed
        except CONVERSION as exc:
            raise arg_error("kva_cpu_importer_config", exc) from exc
        err = ffi.new("int *")
        imp = lib.kva_cpu_importer_create(cfg, err)
        if imp == ffi.NULL:
            raise error(err[0], "kva_cpu_importer_create")
        core.imp = imp

    # -- engine attachment ----------------------------------------------------------------
    def _ref(self):
        return lib.kva_cpu_importer_ref(self._core.live())

    def _claim(self, state):
        """Engine construction: `state` owns it from now on. Returns the core
        (what the engine's state keeps)."""
        core = self._core
        with core.lock:
            if core.owner is not None:
                raise error(-22, "this importer already belongs to an engine")
            if core.closing:
                raise error(-22, "importer is closed")
            core.owner = state
        return core

    # -- public -----------------------------------------------------------------------------
    def close(self):
        """kva_cpu_importer_destroy: jobs copying finish, jobs not started are
        reported failed; every accepted job is reported before it returns.
        Idempotent. An importer attached to an engine is closed by
        Engine.close(): here InvalidArgument (the engine would go on
        submitting copy jobs into a destroyed importer)."""
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._core.owner is None:
            self.close()
        return False

    @property
    def closed(self):
        """True once its destroy has returned (every job reported)."""
        return self._core.imp is None

    def wait_idle(self, timeout_ns: int = 0) -> bool:
        """kva_cpu_importer_wait_idle: True once every accepted job has been
        reported, False when timeout_ns (0 = forever) passed first. Do not
        call it from the thread that steps the engine while the importer
        needs that thread; it releases the GIL."""
        imp = self._core.live()
        try:
            rc = lib.kva_cpu_importer_wait_idle(imp, timeout_ns)
        except CONVERSION as exc:
            raise arg_error("kva_cpu_importer_wait_idle", exc) from exc
        if rc == 0:
            return True
        if rc == -110:  # -ETIMEDOUT
            return False
        raise error(rc, "kva_cpu_importer_wait_idle")

    def stats(self) -> ImporterStats:
        imp = self._core.live()
        s = ffi.new("kva_importer_stats *")
        lib.kva_cpu_importer_stats(imp, s)
        return ImporterStats(*(getattr(s, f.name) for f in dataclasses.fields(ImporterStats)))

    def set_failures(self, fail_rate: float, seed: int = 0) -> None:
        """kva_cpu_importer_set_failures: for jobs submitted from now on."""
        imp = self._core.live()
        try:
            lib.kva_cpu_importer_set_failures(imp, fail_rate, seed)
        except CONVERSION as exc:
            raise arg_error("kva_cpu_importer_set_failures", exc) from exc

    @staticmethod
    def fails(seed: int, fail_rate: float, token: CopyToken, rank: int) -> bool:
        """kva_cpu_importer_fails: the deterministic failure decision."""
        try:
            return bool(lib.kva_cpu_importer_fails(seed, fail_rate, token, rank))
        except CONVERSION as exc:
            raise arg_error("kva_cpu_importer_fails", exc) from exc

    @property
    def pinned(self) -> int:
        """Resolved checkpoint shares still held: one per job resolved and
        not yet reported."""
        return len(self._core.pins)
