# SPDX-License-Identifier: Apache-2.0
"""Engine, Config, Plan and Stats: kvadmit.h for Python (see python/README.md).

GIL: every call into the library goes through cffi's ABI-mode call path,
which releases the GIL around the foreign call and takes it back after, and
every callback (lookup, log, wake, importer, resolve, report) takes the GIL
before it runs Python. So a kva_step that runs for a while, or an importer's
worker threads, never stall other Python threads, and a callback may run on
any thread at any time the C side calls it.
"""
import _thread
import array
import dataclasses
import logging
import operator
import os
import sys
import threading
import weakref
from typing import Any, Callable, Optional, Sequence

from ._lib import ffi, lib
from ._types import (_EVENT, _HOW, _LEVEL, _LOCATION, _REASON, _STATE, Admission, Checkpoint,
                     CopyJob, CopyToken, Ended, Fallback, Handle, Histogram, Location, LogLevel,
                     LogRecord, LookupToken, MetricsFormat, PlanSizes, Policy,
                     KvadmitError, RequestInfo, WaitingInfo, error, handle_of, handle_or_none,
                     user_of)

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
        s = _cb_enter(None)
        try:
            _report_callback_error(what, exc_type, exc, tb)
        finally:
            s.pop()
        return None  # the callback's default result (0 / nothing)
    return onerror


# ---- callback context -------------------------------------------------------------
# Per thread, the owners whose kvadmit callbacks are running Python on this
# thread now, innermost last: an engine's _State (lookup, log, wake, importer,
# waiting, on_unfinished) or an importer's _ImporterCore (resolve, report).
# Engine.close() and the GC finalizer read it: the library forbids destroying
# an engine inside its own callbacks, and an importer's destroy joins its
# worker threads, so it cannot run on one of them.
_cb_local = threading.local()
_get_ident = threading.get_ident


def _cb_enter(owner):
    try:
        s = _cb_local.stack
    except AttributeError:
        s = _cb_local.stack = []
    s.append(owner)
    return s


def _cb_stack():
    return getattr(_cb_local, "stack", None) or ()


def _foreign_thread():
    """A thread Python did not start (an importer's worker, a C++ host's own):
    Python code runs there only inside callbacks. The GC may run a finalizer
    there before a callback has entered _cb_enter. Read from threading's
    table without threading.current_thread(), which would register a dummy
    thread under threading's lock from inside the GC."""
    t = _THREADS.get(_get_ident())
    return t is None or isinstance(t, _DUMMY_THREAD)


_THREADS = getattr(threading, "_active", {})  # CPython: ident -> Thread, dummies included
_DUMMY_THREAD = getattr(threading, "_DummyThread", ())


# Errors cffi raises when an argument does not fit its C type (a negative
# count, a number too large for the field, a wrong type, a read-only buffer
# where a writable one is needed).
_CONVERSION = (OverflowError, TypeError, ValueError, BufferError)


def _arg_error(call, exc, err=-22):
    """The KvadmitError for an argument cffi could not convert: InvalidArgument
    (what the library answers for a malformed argument), or `err` where the
    library answers that argument's range check with another errno."""
    return error(err, f"{call}: {exc}")


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
            except _CONVERSION as exc:
                raise _arg_error(f"kva_config.{name}", exc) from exc
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
            try:
                setattr(c, name + "_cap", cap)
                arr = ffi.new(ctype, max(cap, 1))
            except _CONVERSION as exc:
                raise _arg_error(f"plan_sizes.{name}", exc) from exc
            self._keep.append(arr)
            setattr(c, name, arr)
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
    the finalizer, which must not hold the Engine itself): the cffi callbacks
    and the cores of its CpuImporters. Nothing here may refer to the host's
    own callables (they may refer to the Engine): the callbacks reach them
    through a weak reference to the Engine."""

    def __init__(self):
        self.e = None
        self.callbacks = []
        self.importers = []  # _ImporterCore of each CpuImporter it owns
        self.closed = False
        self.lock = threading.Lock()

    def destroy(self, on_unfinished=None):
        """Destroys now, on this thread: not inside a kvadmit callback, never
        on an importer's worker thread (see destroy_safely)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            e, self.e = self.e, None
        # kvadmit.h's shutdown order: importers first (each reports every job
        # it accepted), then the engine.
        for core in self.importers:
            core.detach_and_close()
        if e is not None:
            if on_unfinished is None:
                lib.kva_engine_destroy(e)
            else:
                def fn(ctx, r):
                    h = r.handle
                    on_unfinished(Ended(Handle(h.id, h.gen, h.slot), user_of(r.user),
                                        _STATE.get(r.state, r.state)))
                cb = ffi.callback("kva_unfinished_fn", fn, onerror=_onerror("on_unfinished"))
                s = _cb_enter(self)
                try:
                    lib.kva_engine_destroy_with(e, cb, ffi.NULL)
                finally:
                    s.pop()
        self.callbacks.clear()

    def destroy_on_helper(self, on_unfinished=None):
        """Destroys on a new thread, for a close reached inside a kvadmit
        callback or on an importer's worker: there the call that ran the
        callback still uses the engine, and an importer's destroy would join
        the thread it runs on. The helper's destroy waits for those workers
        like any other close.

        A bare _thread, not threading.Thread: this runs from the GC's
        finalizer, which may interrupt threading's own code while it holds
        its (non-reentrant) bookkeeping lock, which Thread.start() takes."""
        def run():
            try:
                self.destroy(on_unfinished)
            except BaseException as exc:  # pragma: no cover - destroy does not raise
                _report_callback_error("close", type(exc), exc, exc.__traceback__)
        try:
            _thread.start_new_thread(run, ())
        except RuntimeError as exc:  # the interpreter is shutting down: no new threads
            _report_callback_error("close", type(exc), exc, exc.__traceback__)

    def destroy_safely(self, on_unfinished=None):
        if _cb_stack():
            self.destroy_on_helper(on_unfinished)
        else:
            self.destroy(on_unfinished)


def _finalize(st):
    """weakref.finalize's call when an Engine is collected (or at exit). The
    Engine is unreachable, so no call of it is in progress; but its importers'
    workers may be running their jobs, and the collection may happen on one
    of them (inside resolve), or inside another engine's callback."""
    if _cb_stack() or _foreign_thread():
        st.destroy_on_helper()
    else:
        st.destroy()


def _closed():
    return error(-22, "engine is closed")


_EMPTY_MANIFEST = ffi.new("kva_manifest *")
_new_tuple = tuple.__new__


class Engine:
    """One kvadmit engine (kva_engine). A context manager: `with Engine(cfg)
    as e:` closes it at the end; close() is also called when it is collected
    (callbacks that refer to the engine do not keep it alive) or at
    interpreter exit.

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
        self._e = None
        self._stepping = 0         # ident of the thread inside step(), 0: none
        self._close_pending = None  # (on_unfinished,): close() ran inside step()
        self._pending = None
        self._inputs_set = False
        self._tls = threading.local()
        st = self._st = _State()
        c = config.to_c()
        self._total_pages = c.total_pages
        try:
            self._install_callbacks(c, config, st)
            sizes = config.plan_sizes
            if sizes is None:
                m = plan_min_sizes(config)
                sizes = PlanSizes(max(m.admitted, 256), m.pages,
                                  max(m.copies, 64 * config.world_size),
                                  max(m.fallbacks, 256), max(m.ended, 256))
            self._plan = Plan(sizes)
            err = ffi.new("int *")
            e = lib.kva_engine_create(c, err)
            if e == ffi.NULL:
                raise error(err[0], "kva_engine_create")
        except BaseException:
            # no engine: the importers it claimed are the host's again
            for core in st.importers:
                core.owner = None
            st.importers.clear()
            raise
        st.e = self._e = e
        self._finalizer = weakref.finalize(self, _finalize, st)

    # -- callbacks --------------------------------------------------------------------
    def _install_callbacks(self, c, config, st):
        # The host's callables stay on the Engine (self._on_*); the closures
        # the C engine calls hold only a weak reference to it and st, so the
        # finalizer's st never keeps the host's objects, nor through them the
        # Engine, alive.
        ref = weakref.ref(self)
        self._on_lookup = config.lookup
        self._on_log = config.log
        self._on_log_record = config.log_record
        self._on_wake = config.wake
        self._importer_fns = {}
        self._importer_objs = list(config.importers)  # keeps each CpuImporter alive
        if config.lookup is not None:
            def lookup_cb(ctx, key, prompt, t):
                s = _cb_enter(st)
                try:
                    self_ = ref()
                    if self_ is None:
                        return
                    token = LookupToken(t.id, t.gen, t.seq, t.slot)
                    try:
                        self_._on_lookup(key, prompt, token)
                    except BaseException as exc:
                        _report_callback_error("lookup", type(exc), exc, exc.__traceback__)
                        self_._keep_interrupt(exc)
                        # answered as a miss, so the request does not wait for a timeout
                        e = self_._e
                        if e is not None:
                            lib.kva_lookup_answer(e, t, _EMPTY_MANIFEST)
                finally:
                    s.pop()
            cb = ffi.callback("kva_lookup_fn", lookup_cb, onerror=_onerror("lookup"))
            st.callbacks.append(cb)
            c.lookup = cb
        text, record = config.log, config.log_record
        if text is None and record is None and config.log_to_logging:
            record = _to_logging
        if text is not None:
            def log_cb(ctx, level, msg):
                s = _cb_enter(st)
                try:
                    self_ = ref()
                    if self_ is None:
                        return
                    try:
                        self_._on_log(_LEVEL.get(level, level),
                                      ffi.string(msg).decode("utf-8", "replace"))
                    except BaseException as exc:
                        _report_callback_error("log", type(exc), exc, exc.__traceback__)
                        self_._keep_interrupt(exc)
                finally:
                    s.pop()
            cb = ffi.callback("kva_log_fn", log_cb, onerror=_onerror("log"))
            st.callbacks.append(cb)
            c.log = cb
        if record is not None:
            default = record if record is _to_logging else None  # ours: may be held

            def record_cb(ctx, r):
                s = _cb_enter(st)
                try:
                    self_ = ref()
                    fn = default or (self_._on_log_record if self_ is not None else None)
                    if fn is None:
                        return
                    try:
                        fn(LogRecord(_LEVEL.get(r.level, r.level), _EVENT.get(r.event, r.event),
                                     handle_or_none(r.handle), _REASON.get(r.reason, r.reason),
                                     r.value,
                                     ffi.string(r.message).decode("utf-8", "replace")
                                     if r.message != ffi.NULL else ""))
                    except BaseException as exc:
                        _report_callback_error("log_record", type(exc), exc, exc.__traceback__)
                        if self_ is not None:
                            self_._keep_interrupt(exc)
                finally:
                    s.pop()
            cb = ffi.callback("kva_log_record_fn", record_cb, onerror=_onerror("log_record"))
            st.callbacks.append(cb)
            c.log_record = cb
        if config.wake is not None:
            def wake_cb(ctx):
                s = _cb_enter(st)
                try:
                    self_ = ref()
                    if self_ is not None:
                        self_._on_wake()
                except BaseException as exc:
                    _report_callback_error("wake", type(exc), exc, exc.__traceback__)
                finally:
                    s.pop()
            cb = ffi.callback("kva_wake_fn", wake_cb, onerror=_onerror("wake"))
            st.callbacks.append(cb)
            c.wake = cb
        importers = self._importer_objs
        if len(importers) > len(c.importers):
            raise error(-22, "kva_config.importers")
        for rank, imp in enumerate(importers):
            if hasattr(imp, "_claim"):  # a CpuImporter
                core = imp._claim(st)
                st.importers.append(core)
                r = imp._ref()
                c.importers[rank].submit = r.submit
                c.importers[rank].ctx = r.ctx
            elif callable(imp):
                self._importer_fns[rank] = imp
                cb = ffi.callback("kva_import_fn", _py_importer(rank, ref, st),
                                  onerror=_onerror("importer"))
                st.callbacks.append(cb)
                c.importers[rank].submit = cb
            else:
                raise TypeError(f"importers[{rank}]: a CpuImporter or a callable, not {imp!r}")

    def _keep_interrupt(self, exc):
        """KeyboardInterrupt / SystemExit inside a callback is re-raised by step()."""
        if not isinstance(exc, Exception) and self._pending is None:
            self._pending = exc

    # -- lifetime --------------------------------------------------------------------
    def close(self, on_unfinished: Optional[Callable[[Ended], None]] = None):
        """Shuts down: attached importers first (each reports what it accepted),
        then kva_engine_destroy. With on_unfinished, kva_engine_destroy_with:
        it is called with an Ended for every request whose terminal report
        was not handed out. Stop every thread calling the engine first.
        Idempotent.

        Inside this engine's step() (a lookup, log or importer callback, or a
        signal handler running in one) it only marks the engine closed:
        step() destroys it once kva_step has returned, then raises
        InvalidArgument. Inside another kvadmit callback (a CpuImporter's
        resolve, another engine's callbacks) the destroy runs on a helper
        thread and close() returns at once. Busy: step() is running on
        another thread, or this is this engine's own wake / waiting callback
        (inside the call that ran it); nothing was closed."""
        st = self._st
        if self._stepping == _get_ident():
            self._e = None
            if self._close_pending is None:
                self._close_pending = (on_unfinished,)
            return
        if st.closed:
            self._e = None
            return
        if st in _cb_stack():
            raise error(-16, "Engine.close: inside this engine's own wake or waiting callback; "
                             "close once that call has returned")
        # _e before _stepping: step() writes them in the other order, so a step
        # that starts after this point finds the engine closed.
        e, self._e = self._e, None
        if self._stepping:
            self._e = e
            raise error(-16, "Engine.close: step() is running on another thread; stop it first")
        self._finalizer.detach()
        st.destroy_safely(on_unfinished)

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
        try:
            req.id = id
            req.prefix_key = prefix_key
            req.prompt_tokens = prompt_tokens
            if user or local is not None:
                # dirty first: if filling user or local fails half-way, the
                # next plain submit on this thread still clears them
                t.dirty = True
                req.user = ffi.cast("void *", user)
                if local is None:
                    req.local.position = 0
                else:
                    _fill_local(req.local, local)
            elif t.dirty:
                req.user = ffi.NULL
                req.local.position = 0
                t.dirty = False
            rc = lib.kva_submit(e, req, h)
        except KvadmitError:
            raise
        except _CONVERSION as exc:
            raise _arg_error("kva_submit", exc) from exc
        if rc:
            raise error(rc, "kva_submit")
        return _new_tuple(Handle, (id, h.gen, h.slot))

    def cancel(self, handle: Handle) -> None:
        """kva_cancel: takes effect at the next step."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            rc = lib.kva_cancel(e, handle)
        except _CONVERSION as exc:
            raise _arg_error("kva_cancel", exc) from exc
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
        try:
            for cp in checkpoints:
                if n >= len(m.entries):
                    raise error(-22, "kva_lookup_answer: more than KVA_MAX_CHECKPOINTS")
                _fill_checkpoint(m.entries[n], cp)
                n += 1
            m.count = n
            rc = lib.kva_lookup_answer(e, token, m)
        except KvadmitError:
            raise
        except _CONVERSION as exc:
            raise _arg_error("kva_lookup_answer", exc) from exc
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
        try:
            _fill_local(cp, checkpoint)
            rc = lib.kva_local_checkpoint(e, handle, cp)
        except KvadmitError:
            raise
        except _CONVERSION as exc:
            raise _arg_error("kva_local_checkpoint", exc) from exc
        if rc:
            raise error(rc, "kva_local_checkpoint")

    def copy_done(self, token: CopyToken, rank: int = 0, status: int = 0) -> None:
        """kva_copy_done: one rank of a copy attempt finished (status 0: ok)."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            rc = lib.kva_copy_done(e, token, rank, status)
        except _CONVERSION as exc:
            # a rank beyond uint32 is beyond world_size: the library's -ERANGE
            err = -34 if isinstance(rank, int) and not 0 <= rank <= 0xFFFFFFFF else -22
            raise _arg_error("kva_copy_done", exc, err) from exc
        if rc:
            raise error(rc, "kva_copy_done")

    def checkpoint_evicted(self, checkpoint_id: int, epoch: int) -> None:
        """kva_checkpoint_evicted (rule 15)."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            rc = lib.kva_checkpoint_evicted(e, checkpoint_id, epoch)
        except _CONVERSION as exc:
            raise _arg_error("kva_checkpoint_evicted", exc) from exc
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
        (returns None). NoSpace when no credits are free (nothing changed);
        OutOfRange for pages outside 0..total_pages, checked before the id
        array is allocated."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            pages = operator.index(pages)
        except TypeError as exc:
            raise _arg_error("kva_grow", exc) from exc
        if not 0 <= pages <= self._total_pages:
            raise error(-34, f"kva_grow: pages {pages} outside 0..total_pages")
        try:
            if out is False:
                buf = ffi.NULL
                ids = None
            else:
                ids = array.array("I", [0]) * pages if out is None else out
                buf = ffi.from_buffer("uint32_t[]", ids, require_writable=True)
                if len(buf) < pages:
                    raise error(-34, "kva_grow: out is smaller than pages")
            rc = lib.kva_grow(e, handle, pages, buf)
        except KvadmitError:
            raise
        except _CONVERSION as exc:
            raise _arg_error("kva_grow", exc) from exc
        if rc:
            raise error(rc, "kva_grow")
        return ids

    def preempt(self, handle: Handle) -> None:
        """kva_preempt: RUNNING -> front of the waiting queue; pages back at once."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            rc = lib.kva_preempt(e, handle)
        except _CONVERSION as exc:
            raise _arg_error("kva_preempt", exc) from exc
        if rc:
            raise error(rc, "kva_preempt")

    def finish(self, handle: Handle) -> None:
        """kva_finish: RUNNING -> FINISHED; pages back at once."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            rc = lib.kva_finish(e, handle)
        except _CONVERSION as exc:
            raise _arg_error("kva_finish", exc) from exc
        if rc:
            raise error(rc, "kva_finish")

    def query(self, handle: Handle) -> RequestInfo:
        """kva_query."""
        e = self._e
        if e is None:
            raise _closed()
        q = ffi.new("kva_request_info *")
        try:
            rc = lib.kva_query(e, handle, q)
        except _CONVERSION as exc:
            raise _arg_error("kva_query", exc) from exc
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
        try:
            fmt = int(format)
            s = ffi.new("kva_stats *")
            lib.kva_stats_get(e, s)
            size = 16384
            while True:
                buf = ffi.new("char[]", size)
                need = lib.kva_stats_format_as(s, fmt, buf, size)
                if need == 0:
                    raise error(-22, "kva_stats_format_as: unknown format")
                if need < size:
                    return ffi.string(buf, need).decode("utf-8")
                size = need + 1
        except KvadmitError:
            raise
        except _CONVERSION as exc:
            raise _arg_error("kva_stats_format_as", exc) from exc

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
        s = _cb_enter(self._st)  # fn runs on this thread, inside the walk
        try:
            rc = lib.kva_waiting_foreach(e, cb, ffi.NULL, max)
        except _CONVERSION as exc:
            raise _arg_error("kva_waiting_foreach", exc) from exc
        finally:
            s.pop()
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
        hold_admissions: the host preempted in this step, admit nothing new.

        A close() reached inside the step destroys the engine once kva_step
        has returned; the step then raises InvalidArgument."""
        prev = self._stepping
        # _stepping before _e: close() reads them in the other order
        self._stepping = _get_ident()
        try:
            e = self._e
            if e is None:
                raise _closed()
            c = self._plan._c
            if token_budget or hold_admissions or self._inputs_set:
                self._inputs_set = True  # reset by the next step if this fails half-way
                c.token_budget = token_budget
                c.hold_admissions = hold_admissions
                self._inputs_set = bool(token_budget or hold_admissions)
            rc = lib.kva_step(e, now_ns, c)
        except BaseException as exc:
            self._stepping = prev
            if not prev and self._close_pending is not None:
                self._close_after_step()
            if isinstance(exc, _CONVERSION) and not isinstance(exc, KvadmitError):
                raise _arg_error("kva_step", exc) from exc
            raise
        self._stepping = prev
        if self._close_pending is not None and not prev:
            self._close_after_step()
            if self._pending is None:
                raise error(-22, "kva_step: the engine was closed during this step")
        if self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc
        if rc < 0:
            raise error(rc, "kva_step")
        return self._plan

    def _close_after_step(self):
        """The close() a callback (or a signal handler) asked for inside this
        step, now that kva_step has returned."""
        closing, self._close_pending = self._close_pending, None
        self._finalizer.detach()
        self._st.destroy_safely(closing[0])

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
    pos = cp.position
    if isinstance(pos, int) and pos > 0xFFFFFFFF:
        # beyond any prompt (uint32): the library's -ERANGE for position > prompt_tokens
        raise error(-34, f"position {pos} is beyond any prompt")
    c.position = pos
    c.location = int(Location.LOCAL)
    c.compatible = 1
    c.id = cp.id
    c.epoch = cp.epoch


def _to_logging(rec):
    engine_log.log(_PY_LEVEL.get(int(rec.level), logging.INFO), "%s", rec.message,
                   extra={"kva_event": rec.event, "kva_handle": rec.handle,
                          "kva_reason": rec.reason, "kva_value": rec.value})


def _py_importer(rank, ref, st):
    def submit(ctx, e, job):
        s = _cb_enter(st)
        try:
            self_ = ref()
            if self_ is None:
                return -5
            try:
                rc = self_._importer_fns[rank](copy_job_of(job))
                return int(rc or 0)
            except BaseException as exc:
                _report_callback_error("importer", type(exc), exc, exc.__traceback__)
                self_._keep_interrupt(exc)
                return -5  # -EIO: the engine treats the rank as failed
        finally:
            s.pop()
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
