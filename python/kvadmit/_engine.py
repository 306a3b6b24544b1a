# SPDX-License-Identifier: Apache-2.0
"""Engine: kvadmit.h's kva_engine for Python (see python/README.md)."""
import array
import dataclasses
import operator
import threading
import weakref
from typing import Callable, Optional

from ._callback_context import callbacks_running, enter_callback, get_ident, onerror
from ._checkpoints import fill_checkpoint, fill_local
from ._config import Config, plan_min_sizes
from ._engine_callbacks import install_callbacks
from ._errors import CONVERSION, KvadmitError, arg_error, error
from ._lib import ffi, lib
from ._lifetime import EngineState, finalize
from ._plan import Plan
from ._stats import stats_from_c
from ._types import (_LOCATION, _REASON, _STATE, Checkpoint, CopyToken, Ended, Handle,
                     LookupToken, MetricsFormat, PlanSizes, RequestInfo, WaitingInfo, handle_of,
                     user_of)


def _closed():
    return error(-22, "engine is closed")


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
        st = self._st = EngineState()
        c = config.to_c()
        self._total_pages = c.total_pages
        try:
            install_callbacks(self, c, config, st)
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
        self._finalizer = weakref.finalize(self, finalize, st)

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
        if self._stepping == get_ident():
            self._e = None
            if self._close_pending is None:
                self._close_pending = (on_unfinished,)
            return
        if st.closed:
            self._e = None
            return
        if st in callbacks_running():
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
                    fill_local(req.local, local)
            elif t.dirty:
                req.user = ffi.NULL
                req.local.position = 0
                t.dirty = False
            rc = lib.kva_submit(e, req, h)
        except KvadmitError:
            raise
        except CONVERSION as exc:
            raise arg_error("kva_submit", exc) from exc
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
        except CONVERSION as exc:
            raise arg_error("kva_cancel", exc) from exc
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
                fill_checkpoint(m.entries[n], cp)
                n += 1
            m.count = n
            rc = lib.kva_lookup_answer(e, token, m)
        except KvadmitError:
            raise
        except CONVERSION as exc:
            raise arg_error("kva_lookup_answer", exc) from exc
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
            fill_local(cp, checkpoint)
            rc = lib.kva_local_checkpoint(e, handle, cp)
        except KvadmitError:
            raise
        except CONVERSION as exc:
            raise arg_error("kva_local_checkpoint", exc) from exc
        if rc:
            raise error(rc, "kva_local_checkpoint")

    def copy_done(self, token: CopyToken, rank: int = 0, status: int = 0) -> None:
        """kva_copy_done: one rank of a copy attempt finished (status 0: ok)."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            rc = lib.kva_copy_done(e, token, rank, status)
        except CONVERSION as exc:
            # a rank beyond uint32 is beyond world_size: the library's -ERANGE
            err = -34 if isinstance(rank, int) and not 0 <= rank <= 0xFFFFFFFF else -22
            raise arg_error("kva_copy_done", exc, err) from exc
        if rc:
            raise error(rc, "kva_copy_done")

    def checkpoint_evicted(self, checkpoint_id: int, epoch: int) -> None:
        """kva_checkpoint_evicted (rule 15)."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            rc = lib.kva_checkpoint_evicted(e, checkpoint_id, epoch)
        except CONVERSION as exc:
            raise arg_error("kva_checkpoint_evicted", exc) from exc
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
            raise arg_error("kva_grow", exc) from exc
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
        except CONVERSION as exc:
            raise arg_error("kva_grow", exc) from exc
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
        except CONVERSION as exc:
            raise arg_error("kva_preempt", exc) from exc
        if rc:
            raise error(rc, "kva_preempt")

    def finish(self, handle: Handle) -> None:
        """kva_finish: RUNNING -> FINISHED; pages back at once."""
        e = self._e
        if e is None:
            raise _closed()
        try:
            rc = lib.kva_finish(e, handle)
        except CONVERSION as exc:
            raise arg_error("kva_finish", exc) from exc
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
        except CONVERSION as exc:
            raise arg_error("kva_query", exc) from exc
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
        return stats_from_c(s)

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
        except CONVERSION as exc:
            raise arg_error("kva_stats_format_as", exc) from exc

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
        cb = ffi.callback("kva_waiting_fn", fn, onerror=onerror("waiting"))
        s = enter_callback(self._st)  # fn runs on this thread, inside the walk
        try:
            rc = lib.kva_waiting_foreach(e, cb, ffi.NULL, max)
        except CONVERSION as exc:
            raise arg_error("kva_waiting_foreach", exc) from exc
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
        self._stepping = get_ident()
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
            if isinstance(exc, CONVERSION) and not isinstance(exc, KvadmitError):
                raise arg_error("kva_step", exc) from exc
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
