# SPDX-License-Identifier: Apache-2.0
"""Engine, Config, Plan and Stats: kvadmit.h for Python (see python/README.md).

GIL: every call into the library goes through cffi's ABI-mode call path,
which releases the GIL around the foreign call and takes it back after, and
every callback (lookup, log, wake, importer, resolve, report) takes the GIL
before it runs Python. So a kva_step that runs for a while, or an importer's
worker threads, never stall other Python threads, and a callback may run on
any thread at any time the C side calls it.
"""
import array
import dataclasses
import logging
import os
import sys
import threading
import weakref
from typing import Any, Callable, Optional, Sequence

from ._lib import ffi, lib
from ._types import (_EVENT, _HOW, _LEVEL, _LOCATION, _REASON, _STATE, Admission, Checkpoint,
                     CopyJob, CopyToken, Ended, Fallback, Handle, Histogram, Location, LogLevel,
                     LogRecord, LookupToken, MetricsFormat, PlanSizes, Policy, Reason,
                     RequestInfo, WaitingInfo, error, handle_of, handle_or_none, user_of)

log = logging.getLogger("kvadmit")
engine_log = logging.getLogger("kvadmit.engine")

_PY_LEVEL = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}


def _report_callback_error(what, exc_type, exc, tb):
    """A callback raised: log it (never lost, never crashes the process)."""
    try:
        log.error("kvadmit: the %s callback raised", what, exc_info=(exc_type, exc, tb))
    except BaseException:  # the logging machinery itself failed: last resort
        try:
            sys.__stderr__.write(f"kvadmit: the {what} callback raised {exc!r}\n")
        except BaseException:
            pass


def _onerror(what):
    def onerror(exc_type, exc, tb):
        _report_callback_error(what, exc_type, exc, tb)
        return None  # the callback's default result (0 / nothing)
    return onerror


# ---- configuration --------------------------------------------------------------
_DEFAULTS = ffi.new("kva_config *")
lib.kva_config_default(_DEFAULTS)


@dataclasses.dataclass
class Config:
    """kva_config. Numeric fields as in kvadmit.h (ranges there); defaults are
    kva_config_default()'s. Callbacks are Python callables:

    lookup(prefix_key, prompt_tokens, token)   the directory; scheduler thread,
        inside Engine.step(). Must not block: hand `token` to another thread
        and call Engine.answer(token, checkpoints) from there (or answer at
        once, re-entrantly). If it raises, the exception is logged and the
        lookup is answered as a miss.
    log(level, message)                        text log lines; scheduler thread
    log_record(record)                         structured lines (LogRecord);
        scheduler thread. With neither log nor log_record (and
        log_to_logging true) the lines go to logging.getLogger("kvadmit.engine").
    wake()                                     the inbox went from empty to
        non-empty; runs on the thread that called submit/cancel/answer/...,
        inside that call: must be cheap (threading.Event.set) and must not
        call kvadmit.
    importers: one per rank, each a CpuImporter or a callable
        submit(job: CopyJob) -> int (scheduler thread, must not block; report
        with Engine.copy_done); empty: the host runs plan.copies itself.
    plan_sizes: the step's array sizes (PlanSizes); None: kva_plan_min_sizes,
        with at least 256 admissions, fallbacks and ended, 64 copy jobs a rank.
    """
    total_pages: int = 0
    page_tokens: int = 0
    decode_reserve_pages: int = _DEFAULTS.decode_reserve_pages
    decode_headroom_pages: int = _DEFAULTS.decode_headroom_pages
    prefill_chunk_tokens: int = _DEFAULTS.prefill_chunk_tokens
    copy_slots: int = _DEFAULTS.copy_slots
    max_running: int = _DEFAULTS.max_running
    world_size: int = _DEFAULTS.world_size
    max_copy_retries: int = _DEFAULTS.max_copy_retries
    lookup_timeout_ns: int = _DEFAULTS.lookup_timeout_ns
    max_restore_wait_ns: int = _DEFAULTS.max_restore_wait_ns
    wait_log_interval_ns: int = _DEFAULTS.wait_log_interval_ns
    lookup_refresh_ns: int = _DEFAULTS.lookup_refresh_ns
    policy: Policy = Policy(_DEFAULTS.policy)
    start_ns: int = _DEFAULTS.start_ns
    log_level: LogLevel = LogLevel(_DEFAULTS.log_level)
    lookup: Optional[Callable[[int, int, LookupToken], None]] = None
    log: Optional[Callable[[LogLevel, str], None]] = None
    log_record: Optional[Callable[[LogRecord], None]] = None
    log_to_logging: bool = True
    wake: Optional[Callable[[], None]] = None
    importers: Sequence[Any] = ()
    plan_sizes: Optional[PlanSizes] = None

    # the kva_config fields set from the numeric attributes above
    NUMERIC = ("total_pages", "page_tokens", "decode_reserve_pages", "decode_headroom_pages",
               "prefill_chunk_tokens", "copy_slots", "max_running", "world_size",
               "max_copy_retries", "lookup_timeout_ns", "max_restore_wait_ns",
               "wait_log_interval_ns", "lookup_refresh_ns", "policy", "start_ns",
               "log_level")

    def to_c(self):
        """A kva_config with the numeric fields (callbacks NULL)."""
        c = ffi.new("kva_config *")
        lib.kva_config_default(c)
        for name in self.NUMERIC:
            v = getattr(self, name)
            try:
                setattr(c, name, int(v))
            except OverflowError as exc:
                raise error(-22, "kva_config") from exc
        return c


def plan_min_sizes(config):
    """kva_plan_min_sizes: array sizes with which every step makes progress."""
    out = ffi.new("kva_plan_sizes *")
    rc = lib.kva_plan_min_sizes(config.to_c(), out)
    if rc < 0:
        raise error(rc, "kva_plan_min_sizes")
    return PlanSizes(out.admitted, out.pages, out.copies, out.fallbacks, out.ended)


# ---- stats -------------------------------------------------------------------------
def _make_stats_class():
    fields = []
    for name, f in ffi.typeof("kva_stats").fields:
        if f.type.kind == "array" and f.type.item.cname == "uint64_t" and name == "fallbacks":
            fields.append((name, dict))
        elif f.type.kind == "struct":
            fields.append((name, Histogram))
        else:
            fields.append((name, int))
    cls = dataclasses.make_dataclass("Stats", fields, frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = ("kva_stats (fields in kvadmit.h order). fallbacks: {Reason: count}; "
                   "histograms: Histogram.")
    return cls


Stats = _make_stats_class()
_BOUNDS = None


def histogram_bounds():
    """kva_histogram_bounds(): the buckets' upper bounds in ns (+Inf last, as None)."""
    global _BOUNDS
    if _BOUNDS is None:
        p = lib.kva_histogram_bounds()
        n = ffi.typeof("kva_histogram").fields[2][1].type.length
        _BOUNDS = tuple(p[i] for i in range(n - 1)) + (None,)
    return _BOUNDS


def _stats_from_c(s):
    values = {}
    bounds = histogram_bounds()
    for name, f in ffi.typeof("kva_stats").fields:
        v = getattr(s, name)
        if name == "fallbacks":
            values[name] = {_REASON.get(i, i): v[i] for i in range(len(v))}
        elif f.type.kind == "struct":
            values[name] = Histogram(v.count, v.sum_ns, tuple(v.buckets), bounds)
        else:
            values[name] = v
    return Stats(**values)


# ---- the plan ------------------------------------------------------------------------
class Plan:
    """What one Engine.step() decided, read from the engine's preallocated
    buffers. Valid until the next step of the same engine (the next step
    overwrites the buffers; copy what you keep).

    Counts and flags are plain attributes of the C plan. The lists build one
    small NamedTuple per admission / copy job / fallback / ended request;
    page ids are never Python objects: `pages` is a memoryview ('I') of the
    page array, and pages_of(admission) a slice of it (numpy.frombuffer
    works on both)."""

    __slots__ = ("_c", "_keep", "_pages_mv", "_ffi")

    def __init__(self, sizes):
        self._c = c = ffi.new("kva_plan *")
        self._keep = []
        for name, ctype, cap in (("admitted", "kva_admission[]", sizes.admitted),
                                 ("pages", "uint32_t[]", sizes.pages),
                                 ("copies", "kva_copy_job[]", sizes.copies),
                                 ("fallbacks", "kva_fallback[]", sizes.fallbacks),
                                 ("ended", "kva_ended[]", sizes.ended)):
            arr = ffi.new(ctype, max(cap, 1))
            self._keep.append(arr)
            setattr(c, name, arr)
            setattr(c, name + "_cap", cap)
        self._pages_mv = memoryview(ffi.buffer(c.pages, 4 * max(sizes.pages, 1))).cast("I")

    # counts and flags
    n_admitted = property(lambda self: self._c.n_admitted)
    n_pages = property(lambda self: self._c.n_pages)
    n_copies = property(lambda self: self._c.n_copies)
    n_fallbacks = property(lambda self: self._c.n_fallbacks)
    n_ended = property(lambda self: self._c.n_ended)
    events = property(lambda self: self._c.events)
    timers_fired = property(lambda self: self._c.timers_fired)
    records_touched = property(lambda self: self._c.records_touched)
    head_blocked = property(lambda self: self._c.head_blocked)
    backlog = property(lambda self: self._c.backlog)
    too_small = property(lambda self: self._c.too_small)

    @property
    def raw(self):
        """The kva_plan cdata itself (cffi), for code that wants no tuples."""
        return self._c

    @property
    def pages(self):
        """Every page id handed over in this step: memoryview of uint32."""
        return self._pages_mv[:self._c.n_pages]

    def pages_of(self, admission):
        off = admission.pages_off
        return self._pages_mv[off:off + admission.npages]

    @property
    def admissions(self):
        c = self._c
        a = c.admitted
        out = []
        for i in range(c.n_admitted):
            x = a[i]
            h = x.handle
            out.append(Admission(Handle(h.id, h.gen, h.slot), user_of(x.user),
                                 _HOW.get(x.how, x.how), _REASON.get(x.reason, x.reason),
                                 x.local_tokens, x.restored_tokens, x.recompute_tokens,
                                 x.pages_off, x.npages, x.reserved_pages))
        return out

    @property
    def copies(self):
        c = self._c
        return [copy_job_of(c.copies[i]) for i in range(c.n_copies)]

    @property
    def fallbacks(self):
        c = self._c
        f = c.fallbacks
        return [Fallback(handle_of(f[i].handle), _REASON.get(f[i].reason, f[i].reason))
                for i in range(c.n_fallbacks)]

    @property
    def ended(self):
        c = self._c
        e = c.ended
        return [Ended(handle_of(e[i].handle), user_of(e[i].user), _STATE.get(e[i].state,
                                                                                e[i].state))
                for i in range(c.n_ended)]

    def __repr__(self):
        c = self._c
        return (f"Plan(admitted={c.n_admitted}, pages={c.n_pages}, copies={c.n_copies}, "
                f"fallbacks={c.n_fallbacks}, ended={c.n_ended}, events={c.events}, "
                f"head_blocked={bool(c.head_blocked)}, backlog={bool(c.backlog)}, "
                f"too_small={bool(c.too_small)})")


def copy_job_of(j):
    t, h = j.token, j.handle
    pages = memoryview(ffi.buffer(j.pages, 4 * j.npages)).cast("I") if j.npages else \
        memoryview(b"").cast("I")
    return CopyJob(CopyToken(t.id, t.gen, t.attempt, t.slot), Handle(h.id, h.gen, h.slot),
                   j.rank, j.world_size, j.checkpoint_id, j.checkpoint_epoch, j.position,
                   j.npages, pages)


# ---- the engine --------------------------------------------------------------------------
class _State:
    """What the C engine refers to, kept alive as long as it lives (also by
    the finalizer, which must not hold the Engine itself)."""

    def __init__(self):
        self.e = None
        self.callbacks = []
        self.importers = []
        self.closed = False
        self.lock = threading.Lock()

    def destroy(self, on_unfinished=None):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            e, self.e = self.e, None
        # kvadmit.h's shutdown order: importers first (each reports every job
        # it accepted), then the engine.
        for imp in self.importers:
            imp._detach_and_close()
        if e is not None:
            if on_unfinished is None:
                lib.kva_engine_destroy(e)
            else:
                def fn(ctx, r):
                    h = r.handle
                    on_unfinished(Ended(Handle(h.id, h.gen, h.slot), user_of(r.user),
                                        _STATE.get(r.state, r.state)))
                cb = ffi.callback("kva_unfinished_fn", fn, onerror=_onerror("on_unfinished"))
                lib.kva_engine_destroy_with(e, cb, ffi.NULL)
        self.callbacks.clear()


def _closed():
    return error(-22, "engine is closed")


_EMPTY_MANIFEST = ffi.new("kva_manifest *")
_new_tuple = tuple.__new__


class Engine:
    """One kvadmit engine (kva_engine). A context manager: `with Engine(cfg)
    as e:` closes it at the end; close() is also called when it is collected
    or at interpreter exit.

    Threads: step() from one scheduler thread; submit, cancel, answer,
    copy_done, local_checkpoint, checkpoint_evicted, reset_prefix_cache,
    stats, metrics, query and waiting from any thread; grow, preempt and
    finish from any thread, one handle at a time. Errors raise a
    KvadmitError subclass (errno, errno_name, strerror)."""

    def __init__(self, config: Optional[Config] = None, **fields):
        if config is None:
            config = Config(**fields)
        elif fields:
            config = dataclasses.replace(config, **fields)
        self.config = config
        st = self._st = _State()
        c = config.to_c()
        self._install_callbacks(c, config, st)
        sizes = config.plan_sizes
        if sizes is None:
            m = plan_min_sizes(config)
            sizes = PlanSizes(max(m.admitted, 256), m.pages, max(m.copies, 64 * config.world_size),
                              max(m.fallbacks, 256), max(m.ended, 256))
        self._plan = Plan(sizes)
        err = ffi.new("int *")
        e = lib.kva_engine_create(c, err)
        if e == ffi.NULL:
            for imp in st.importers:
                imp._detach()
            raise error(err[0], "kva_engine_create")
        st.e = self._e = e
        for imp in st.importers:
            imp._attach(self)
        self._tls = threading.local()
        self._pending = None
        self._inputs_set = False
        self._finalizer = weakref.finalize(self, st.destroy)

    # -- callbacks --------------------------------------------------------------------
    def _install_callbacks(self, c, config, st):
        ref = weakref.ref(self)
        if config.lookup is not None:
            fn = config.lookup

            def lookup_cb(ctx, key, prompt, t):
                token = LookupToken(t.id, t.gen, t.seq, t.slot)
                try:
                    fn(key, prompt, token)
                except BaseException as exc:
                    self_ = ref()
                    _report_callback_error("lookup", type(exc), exc, exc.__traceback__)
                    if self_ is not None:
                        self_._keep_interrupt(exc)
                        # answered as a miss, so the request does not wait for a timeout
                        if self_._e is not None:
                            lib.kva_lookup_answer(self_._e, t, _EMPTY_MANIFEST)
            cb = ffi.callback("kva_lookup_fn", lookup_cb, onerror=_onerror("lookup"))
            st.callbacks.append(cb)
            c.lookup = cb
        text, record = config.log, config.log_record
        if text is None and record is None and config.log_to_logging:
            record = _to_logging
        if text is not None:
            def log_cb(ctx, level, msg):
                try:
                    text(_LEVEL.get(level, level), ffi.string(msg).decode("utf-8", "replace"))
                except BaseException as exc:
                    _report_callback_error("log", type(exc), exc, exc.__traceback__)
                    Engine._keep_interrupt_ref(ref, exc)
            cb = ffi.callback("kva_log_fn", log_cb, onerror=_onerror("log"))
            st.callbacks.append(cb)
            c.log = cb
        if record is not None:
            def record_cb(ctx, r):
                try:
                    record(LogRecord(_LEVEL.get(r.level, r.level), _EVENT.get(r.event, r.event),
                                     handle_or_none(r.handle), _REASON.get(r.reason, r.reason),
                                     r.value,
                                     ffi.string(r.message).decode("utf-8", "replace")
                                     if r.message != ffi.NULL else ""))
                except BaseException as exc:
                    _report_callback_error("log_record", type(exc), exc, exc.__traceback__)
                    Engine._keep_interrupt_ref(ref, exc)
            cb = ffi.callback("kva_log_record_fn", record_cb, onerror=_onerror("log_record"))
            st.callbacks.append(cb)
            c.log_record = cb
        if config.wake is not None:
            wake = config.wake

            def wake_cb(ctx):
                try:
                    wake()
                except BaseException as exc:
                    _report_callback_error("wake", type(exc), exc, exc.__traceback__)
            cb = ffi.callback("kva_wake_fn", wake_cb, onerror=_onerror("wake"))
            st.callbacks.append(cb)
            c.wake = cb
        importers = list(config.importers)
        if len(importers) > len(c.importers):
            raise error(-22, "kva_config.importers")
        for rank, imp in enumerate(importers):
            if hasattr(imp, "_ref"):  # a CpuImporter
                imp._claim(st)
                st.importers.append(imp)
                r = imp._ref()
                c.importers[rank].submit = r.submit
                c.importers[rank].ctx = r.ctx
            elif callable(imp):
                cb = ffi.callback("kva_import_fn", _py_importer(imp, ref),
                                  onerror=_onerror("importer"))
                st.callbacks.append(cb)
                c.importers[rank].submit = cb
            else:
                raise TypeError(f"importers[{rank}]: a CpuImporter or a callable, not {imp!r}")

    @staticmethod
    def _keep_interrupt_ref(ref, exc):
        self_ = ref()
        if self_ is not None:
            self_._keep_interrupt(exc)

    def _keep_interrupt(self, exc):
        """KeyboardInterrupt / SystemExit inside a callback is re-raised by step()."""
        if not isinstance(exc, Exception) and self._pending is None:
            self._pending = exc

    # -- lifetime --------------------------------------------------------------------
    def close(self, on_unfinished: Optional[Callable[[Ended], None]] = None):
        """Shuts down: attached importers first (each reports what it accepted),
        then kva_engine_destroy. With on_unfinished, kva_engine_destroy_with:
        it is called (on this thread) with an Ended for every request whose
        terminal report was not handed out. Stop every thread calling the
        engine first. Idempotent."""
        self._e = None
        self._finalizer.detach()
        self._st.destroy(on_unfinished)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def closed(self):
        return self._e is None

    # -- any thread --------------------------------------------------------------------
    def submit(self, id: int, prompt_tokens: int, prefix_key: int = 0, user: int = 0,
               local: Optional[Checkpoint] = None) -> Handle:
        """kva_submit. prefix_key 0: no lookup. user: an integer handed back
        in plans and queries (an index into the host's own table). local: the
        longest checkpoint the host's own prefix cache holds (rule 22)."""
        e = self._e
        if e is None:
            raise _closed()
        t = self._tls
        try:
            req, h = t.req, t.h
        except AttributeError:
            # one request and handle buffer per thread: submit from any thread
            t.req, t.h, t.dirty = ffi.new("kva_request *"), ffi.new("kva_handle *"), False
            req, h = t.req, t.h
        req.id = id
        req.prefix_key = prefix_key
        req.prompt_tokens = prompt_tokens
        if user or local is not None:
            req.user = ffi.cast("void *", user)
            if local is None:
                req.local.position = 0
            else:
                _fill_local(req.local, local)
            t.dirty = True
        elif t.dirty:
            req.user = ffi.NULL
            req.local.position = 0
            t.dirty = False
        rc = lib.kva_submit(e, req, h)
        if rc:
            raise error(rc, "kva_submit")
        return _new_tuple(Handle, (id, h.gen, h.slot))

    def cancel(self, handle: Handle) -> None:
        """kva_cancel: takes effect at the next step."""
        e = self._e
        if e is None:
            raise _closed()
        rc = lib.kva_cancel(e, handle)
        if rc:
            raise error(rc, "kva_cancel")

    def answer(self, token: LookupToken, checkpoints=()) -> None:
        """kva_lookup_answer: the directory's answer, up to 8 Checkpoints (in
        ascending position); empty: a miss. Any thread."""
        e = self._e
        if e is None:
            raise _closed()
        m = ffi.new("kva_manifest *")
        n = 0
        for cp in checkpoints:
            if n >= len(m.entries):
                raise error(-22, "kva_lookup_answer: more than KVA_MAX_CHECKPOINTS")
            _fill_checkpoint(m.entries[n], cp)
            n += 1
        m.count = n
        rc = lib.kva_lookup_answer(e, token, m)
        if rc:
            raise error(rc, "kva_lookup_answer")

    lookup_answer = answer

    def local_checkpoint(self, handle: Handle, checkpoint) -> None:
        """kva_local_checkpoint (rule 22): the host's prefix cache now holds
        `checkpoint` (a Checkpoint, or (position, id[, epoch])) of h's prompt;
        its location is LOCAL and it is compatible."""
        e = self._e
        if e is None:
            raise _closed()
        cp = ffi.new("kva_checkpoint *")
        _fill_local(cp, checkpoint)
        rc = lib.kva_local_checkpoint(e, handle, cp)
        if rc:
            raise error(rc, "kva_local_checkpoint")

    def copy_done(self, token: CopyToken, rank: int = 0, status: int = 0) -> None:
        """kva_copy_done: one rank of a copy attempt finished (status 0: ok)."""
        e = self._e
        if e is None:
            raise _closed()
        rc = lib.kva_copy_done(e, token, rank, status)
        if rc:
            raise error(rc, "kva_copy_done")

    def checkpoint_evicted(self, checkpoint_id: int, epoch: int) -> None:
        """kva_checkpoint_evicted (rule 15)."""
        e = self._e
        if e is None:
            raise _closed()
        rc = lib.kva_checkpoint_evicted(e, checkpoint_id, epoch)
        if rc:
            raise error(rc, "kva_checkpoint_evicted")

    def reset_prefix_cache(self) -> None:
        """kva_reset_prefix_cache (rule 17)."""
        e = self._e
        if e is None:
            raise _closed()
        rc = lib.kva_reset_prefix_cache(e)
        if rc:
            raise error(rc, "kva_reset_prefix_cache")

    def grow(self, handle: Handle, pages: int, out=None):
        """kva_grow: `pages` more pages for a RUNNING request. Returns their
        ids as array('I'), or writes them into `out` (a writable buffer of
        at least `pages` uint32) and returns it; out=False: ids not wanted
        (returns None). NoSpace when no credits are free (nothing changed)."""
        e = self._e
        if e is None:
            raise _closed()
        if out is False:
            rc = lib.kva_grow(e, handle, pages, ffi.NULL)
            if rc:
                raise error(rc, "kva_grow")
            return None
        ids = array.array("I", bytes(4 * pages)) if out is None else out
        buf = ffi.from_buffer("uint32_t[]", ids, require_writable=True)
        if len(buf) < pages:
            raise error(-34, "kva_grow: out is smaller than pages")
        rc = lib.kva_grow(e, handle, pages, buf)
        if rc:
            raise error(rc, "kva_grow")
        return ids

    def preempt(self, handle: Handle) -> None:
        """kva_preempt: RUNNING -> front of the waiting queue; pages back at once."""
        e = self._e
        if e is None:
            raise _closed()
        rc = lib.kva_preempt(e, handle)
        if rc:
            raise error(rc, "kva_preempt")

    def finish(self, handle: Handle) -> None:
        """kva_finish: RUNNING -> FINISHED; pages back at once."""
        e = self._e
        if e is None:
            raise _closed()
        rc = lib.kva_finish(e, handle)
        if rc:
            raise error(rc, "kva_finish")

    def query(self, handle: Handle) -> RequestInfo:
        """kva_query."""
        e = self._e
        if e is None:
            raise _closed()
        q = ffi.new("kva_request_info *")
        rc = lib.kva_query(e, handle, q)
        if rc:
            raise error(rc, "kva_query")
        return RequestInfo(handle_of(q.handle), user_of(q.user), _STATE.get(q.state, q.state),
                           _REASON.get(q.reason, q.reason),
                           _LOCATION.get(q.selected_location, q.selected_location),
                           bool(q.has_selection), q.prompt_tokens, q.selected_position,
                           q.pages_held, q.pages_reserved, q.lookups, q.copy_attempts,
                           bool(q.cancel_requested))

    def stats(self):
        """kva_stats_get, as a Stats dataclass."""
        e = self._e
        if e is None:
            raise _closed()
        s = ffi.new("kva_stats *")
        lib.kva_stats_get(e, s)
        return _stats_from_c(s)

    def metrics(self, format: MetricsFormat = MetricsFormat.PROMETHEUS) -> str:
        """kva_stats_format_as: Prometheus (0.0.4) or OpenMetrics text."""
        e = self._e
        if e is None:
            raise _closed()
        s = ffi.new("kva_stats *")
        lib.kva_stats_get(e, s)
        size = 16384
        while True:
            buf = ffi.new("char[]", size)
            need = lib.kva_stats_format_as(s, int(format), buf, size)
            if need == 0:
                raise error(-22, "kva_stats_format_as: unknown format")
            if need < size:
                return ffi.string(buf, need).decode("utf-8")
            size = need + 1

    def waiting(self, max: int = 0):
        """kva_waiting_foreach: the waiting queue in admission order (at most
        `max`, 0 = all), a live view (kvadmit.h)."""
        e = self._e
        if e is None:
            raise _closed()
        out = []

        def fn(ctx, w):
            h = w.handle
            out.append(WaitingInfo(Handle(h.id, h.gen, h.slot), user_of(w.user), w.position,
                                   w.prompt_tokens))
            return 0
        cb = ffi.callback("kva_waiting_fn", fn, onerror=_onerror("waiting"))
        rc = lib.kva_waiting_foreach(e, cb, ffi.NULL, max)
        if rc < 0:
            raise error(rc, "kva_waiting_foreach")
        return out

    # -- scheduler thread ---------------------------------------------------------------
    def step(self, now_ns: int, token_budget: int = 0, hold_admissions: bool = False) -> Plan:
        """kva_step: events, timers, admissions. Returns the engine's Plan
        (the same object every time: valid until the next step). Runs the
        lookup, log and importer callbacks on this thread.

        token_budget: prefill tokens this step may start (vLLM's
        max_num_batched_tokens less what running requests use); 0 = no limit.
        hold_admissions: the host preempted in this step, admit nothing new."""
        e = self._e
        if e is None:
            raise _closed()
        c = self._plan._c
        if token_budget or hold_admissions or self._inputs_set:
            c.token_budget = token_budget
            c.hold_admissions = hold_admissions
            self._inputs_set = bool(token_budget or hold_admissions)
        rc = lib.kva_step(e, now_ns, c)
        if self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc
        if rc < 0:
            raise error(rc, "kva_step")
        return self._plan

    @property
    def plan(self) -> Plan:
        """The last step's plan."""
        return self._plan


def _fill_checkpoint(c, cp):
    if not isinstance(cp, Checkpoint):
        cp = Checkpoint(*cp)
    c.position = cp.position
    c.location = int(cp.location)
    c.compatible = 1 if cp.compatible else 0
    c.id = cp.id
    c.epoch = cp.epoch


def _fill_local(c, cp):
    if not isinstance(cp, Checkpoint):
        cp = Checkpoint(*cp)
    c.position = cp.position
    c.location = int(Location.LOCAL)
    c.compatible = 1
    c.id = cp.id
    c.epoch = cp.epoch


def _to_logging(rec):
    engine_log.log(_PY_LEVEL.get(int(rec.level), logging.INFO), "%s", rec.message,
                   extra={"kva_event": rec.event, "kva_handle": rec.handle,
                          "kva_reason": rec.reason, "kva_value": rec.value})


def _py_importer(fn, ref):
    def submit(ctx, e, job):
        try:
            rc = fn(copy_job_of(job))
            return int(rc or 0)
        except BaseException as exc:
            _report_callback_error("importer", type(exc), exc, exc.__traceback__)
            Engine._keep_interrupt_ref(ref, exc)
            return -5  # -EIO: the engine treats the rank as failed
    return submit


# ---- module-level calls ------------------------------------------------------------
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
