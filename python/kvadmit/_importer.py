# SPDX-License-Identifier: Apache-2.0
"""The CPU importer (include/kvadmit/importer.h) for Python hosts."""
import dataclasses
import threading
from typing import Callable, Optional

from ._lib import ffi, lib
from ._types import CopyToken, error
from ._engine import _onerror, _report_callback_error


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


class CpuImporter:
    """kva_cpu_importer: worker threads that memcpy checkpoint pages into a
    host page pool. Put it in Config(importers=[imp]) (index = its rank); the
    engine then owns it and closes it first when it closes.

    dest        a writable buffer (bytearray, mmap, numpy array ...): page p
                at byte p * page_bytes; dest_pages = len(dest) // page_bytes.
    resolve(checkpoint_id, epoch, rank) -> buffer | None
                finds the checkpoint's bytes for one rank (page i at
                i * page_bytes, the last page may be partial). Runs on an
                importer worker thread (it takes the GIL); may block briefly.
                None, or an exception (logged), fails the job (the engine
                retries or falls back). The binding keeps the returned object
                alive (and unresizable) until every job that resolved it has
                been reported, so it may come from a dict the host evicts from.
    latency_ns, bandwidth_bytes_per_s, fail_rate, seed: injection (importer.h).
    """

    def __init__(self, dest, page_bytes: int, resolve: Callable, *, threads: int = 1,
                 rank: int = 0, latency_ns: int = 0, bandwidth_bytes_per_s: int = 0,
                 fail_rate: float = 0.0, seed: int = 0):
        self._dest = ffi.from_buffer(dest, require_writable=True)
        self._dest_obj = dest
        self.page_bytes = page_bytes
        self.rank = rank
        self._resolve = resolve
        self._pins = {}      # (id, epoch, rank) -> [cdata, resolved-and-unreported count]
        self._failed = {}    # (id, epoch, rank) -> resolves that failed, not yet reported
        self._lock = threading.Lock()
        self._owner = None
        self._engine_ref = None
        self._imp = None
        cfg = ffi.new("kva_cpu_importer_config *")
        lib.kva_cpu_importer_config_default(cfg)
        cfg.threads = threads
        cfg.rank = rank
        cfg.page_bytes = page_bytes
        cfg.dest_base = self._dest
        cfg.dest_pages = len(self._dest) // page_bytes if page_bytes else 0
        self._resolve_cb = ffi.callback("kva_resolve_fn", self._resolve_c,
                                        onerror=_onerror("resolve"))
        self._report_cb = ffi.callback("kva_report_fn", self._report_c,
                                       onerror=_onerror("report"))
        cfg.resolve = self._resolve_cb
        cfg.report = self._report_cb
        cfg.latency_ns = latency_ns
        cfg.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        cfg.fail_rate = fail_rate
        cfg.seed = seed
        err = ffi.new("int *")
        imp = lib.kva_cpu_importer_create(cfg, err)
        if imp == ffi.NULL:
            raise error(err[0], "kva_cpu_importer_create")
        self._imp = imp

    # -- callbacks (importer worker threads) ----------------------------------------
    def _resolve_c(self, ctx, cid, epoch, rank, src, nbytes):
        key = (cid, epoch, rank)
        try:
            obj = self._resolve(cid, epoch, rank)
            if obj is None:
                raise LookupError(f"no checkpoint {cid} epoch {epoch} rank {rank}")
            buf = ffi.from_buffer(obj)
        except BaseException as exc:
            if not isinstance(exc, LookupError):
                _report_callback_error("resolve", type(exc), exc, exc.__traceback__)
            with self._lock:
                self._failed[key] = self._failed.get(key, 0) + 1
            return -2  # -ENOENT: the job fails
        with self._lock:
            pin = self._pins.get(key)
            if pin is None:
                self._pins[key] = [buf, 1]
            else:
                pin[0] = buf  # the latest object; the older one's copies are done with it
                pin[1] += 1
                # keep earlier objects alive as well while jobs use them
                if len(pin) == 2:
                    pin.append([])
                pin[2].append(buf)
        src[0] = buf
        nbytes[0] = len(buf)
        return 0

    def _report_c(self, ctx, e, job, status):
        key = (job.checkpoint_id, job.checkpoint_epoch, job.rank)
        try:
            if e != ffi.NULL:
                rc = lib.kva_copy_done(e, job.token, job.rank, status)
                if rc and rc != -116:  # -ESTALE: a cancelled / superseded attempt
                    t = job.token
                    _report_callback_error(
                        "report", RuntimeError,
                        RuntimeError(f"kva_copy_done({CopyToken(t.id, t.gen, t.attempt, t.slot)},"
                                     f" rank {job.rank}) returned {rc}"), None)
        finally:
            self._unpin(key, status)

    def _unpin(self, key, status):
        # A failed report may belong to a job whose resolve failed (nothing
        # pinned): count those first. This can only keep an object pinned a
        # little longer, never release one a running job still reads.
        with self._lock:
            if status != 0 and self._failed.get(key, 0) > 0:
                self._failed[key] -= 1
                if not self._failed[key]:
                    del self._failed[key]
                return
            pin = self._pins.get(key)
            if pin is None:
                return  # a job cancelled by destroy before it resolved
            pin[1] -= 1
            if pin[1] <= 0:
                del self._pins[key]

    # -- engine attachment ----------------------------------------------------------------
    def _ref(self):
        if self._imp is None:
            raise error(-22, "importer is closed")
        return lib.kva_cpu_importer_ref(self._imp)

    def _claim(self, state):
        if self._owner is not None:
            raise error(-22, "this importer already belongs to an engine")
        self._owner = state

    def _attach(self, engine):
        pass

    def _detach(self):
        self._owner = None

    def _detach_and_close(self):
        self._owner = None
        self.close()

    # -- public -----------------------------------------------------------------------------
    def close(self):
        """kva_cpu_importer_destroy: jobs copying finish, jobs not started are
        reported failed; every accepted job is reported before it returns.
        An importer attached to an engine is closed by Engine.close()."""
        imp, self._imp = self._imp, None
        if imp is not None:
            lib.kva_cpu_importer_destroy(imp)
            with self._lock:
                self._pins.clear()
                self._failed.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._owner is None:
            self.close()
        return False

    @property
    def closed(self):
        return self._imp is None

    def wait_idle(self, timeout_ns: int = 0) -> bool:
        """kva_cpu_importer_wait_idle: True once every accepted job has been
        reported, False when timeout_ns (0 = forever) passed first. Do not
        call it from the thread that steps the engine while the importer
        needs that thread; it releases the GIL."""
        if self._imp is None:
            raise error(-22, "importer is closed")
        rc = lib.kva_cpu_importer_wait_idle(self._imp, timeout_ns)
        if rc == 0:
            return True
        if rc == -110:  # -ETIMEDOUT
            return False
        raise error(rc, "kva_cpu_importer_wait_idle")

    def stats(self) -> ImporterStats:
        if self._imp is None:
            raise error(-22, "importer is closed")
        s = ffi.new("kva_importer_stats *")
        lib.kva_cpu_importer_stats(self._imp, s)
        return ImporterStats(*(getattr(s, f.name) for f in dataclasses.fields(ImporterStats)))

    def set_failures(self, fail_rate: float, seed: int = 0) -> None:
        """kva_cpu_importer_set_failures: for jobs submitted from now on."""
        if self._imp is None:
            raise error(-22, "importer is closed")
        lib.kva_cpu_importer_set_failures(self._imp, fail_rate, seed)

    @staticmethod
    def fails(seed: int, fail_rate: float, token: CopyToken, rank: int) -> bool:
        """kva_cpu_importer_fails: the deterministic failure decision."""
        return bool(lib.kva_cpu_importer_fails(seed, fail_rate, token, rank))

    @property
    def pinned(self) -> int:
        """Resolved checkpoint shares still held for jobs not yet reported."""
        with self._lock:
            return len(self._pins)
