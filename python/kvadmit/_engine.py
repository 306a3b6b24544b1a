# SPDX-License-Identifier: Apache-2.0
"""Engine: kvadmit.h's kva_engine for Python (see python/README.md).

Every call into the engine goes through Engine._call, the one guard: the
engine not closed, the arguments converted (cffi's conversion errors raised
as the KvadmitError the library would answer), the C function called, and
a negative errno raised as its KvadmitError subclass. The functions below
the class convert one call's Python arguments into C.
"""
import array
import dataclasses
import itertools
import operator
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ._callback_context import callbacks_running, enter_callback, get_ident, onerror
from ._checkpoints import fill_local, local_checkpoint_of, manifest_of
from ._config import Config, plan_min_sizes
from ._engine_callbacks import install_callbacks
from ._errors import CONVERSION, KvadmitError, arg_error, error
from ._lib import ffi, lib
from ._lifetime import EngineState, finalize
from ._plan import Plan
from ._stats import Stats, metrics_text, stats_from_c
from ._types import (_LOCATION, _REASON, _STATE, Checkpoint, CopyToken, Ended, Handle,
                     LookupToken, MetricsFormat, PlanSizes, RequestIds, RequestInfo, WaitingInfo,
                     handle_of,
                     user_of)


def _closed():
    return error(-22, "engine is closed")


_SERIALS = itertools.count(1)  # Engine.serial: what its handles carry
_UINT64 = 1 << 64
_STR_IDS = RequestIds.FIRST
_CLOSE_WAIT_S = 5.0  # close(): how long other threads' calls may take to drain
_BUDGET_UNLIMITED = 0xFFFFFFFF  # KVA_TOKEN_BUDGET_UNLIMITED
_TOUCHED_UNSET = 0xFFFFFFFF  # plan.records_touched before kva_step (it clears it)


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

    def __init__(self, config: Optional[Config] = None, **fields: Any) -> None:
        if config is None:
            config = Config(**fields)
        elif fields:
            config = dataclasses.replace(config, **fields)
        self.config = config
        self.serial = next(_SERIALS)
        self._e = None
        self._stepping = 0         # ident of the thread inside step(), 0: none
        # The calls in flight (thread ident -> depth), under _gate: close()
        # refuses while another thread is inside one, a call after close()
        # finds the engine closed; a second thread's step() is refused.
        self._gate = threading.Lock()
        self._inflight: Dict[int, int] = {}
        self._claim: Dict[int, int] = {}  # {0: ident of the thread in the outermost step()}
        self._inputs: Optional[Tuple[int, bool]] = None  # the plan's budget and hold, as written
        self._closing: Optional[tuple] = None  # close() ran inside a step that destroyed it
        # (on_unfinished,): close() ran inside step()
        self._close_pending: Optional[Tuple[Optional[Callable[[Ended], None]]]] = None
        self._tls = threading.local()
        st = self._st = EngineState()
        st.serial = self.serial
        self._ids = RequestIds()
        st.names = self._ids.to_host
        self._big_int_ids = False  # an int id >= 2**63 was submitted: no string ids then
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
            self._plan = Plan(sizes, self.serial, self._ids.to_host, config.credits_only)
            if config.credits_only and config.importers:
                raise error(-22, "kva_config.flags: credits_only with importers (they copy "
                                 "into kvadmit's page ids; the host runs plan.copies)")
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
        self._st.keep_interrupt(exc)

    # -- lifetime --------------------------------------------------------------------
    def close(self, on_unfinished: Optional[Callable[[Ended], None]] = None) -> None:
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
        thread and close() returns at once. Calls other threads are inside
        are waited for (up to 5 s; a call starting meanwhile raises
        InvalidArgument). Busy, nothing closed: step() is running on another
        thread, those calls did not drain, this is this engine's own wake /
        waiting callback, or this thread is inside a call of the engine (a
        signal handler)."""
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
        me = get_ident()
        inflight = self._inflight
        with self._gate:  # one close() at a time; a call that found _e cleared waits here
            if self._stepping or self._claim.get(0, me) != me:
                raise error(-16, "Engine.close: step() is running on another thread; stop it "
                                 "first")
            if inflight.get(me):
                raise error(-16, "Engine.close: inside a call of this engine (a signal "
                                 "handler?); close once it has returned")
            # _e cleared first, then the counts read (the other order of
            # _call's): a call counted after this finds _e cleared and raises.
            e, self._e = self._e, None
        if e is None:
            return
        # Wait for the calls other threads are inside (short: no call but
        # step() waits for anything); refuse if they do not drain.
        deadline = time.monotonic() + _CLOSE_WAIT_S
        while any(n for t, n in list(inflight.items()) if t != me) or \
                self._claim.get(0, me) != me:
            if time.monotonic() > deadline:
                self._e = e
                raise error(-16, "Engine.close: other threads stayed inside calls of this "
                                 f"engine for {_CLOSE_WAIT_S} s; stop them first")
            time.sleep(0.0002)
        self._finalizer.detach()
        st.destroy_safely(on_unfinished)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def closed(self) -> bool:
        return self._e is None

    # -- the guard ---------------------------------------------------------------------
    def _call(self, call, fn, args=(), convert=None, errno_of=None, check=True):
        """The guard of every engine call: InvalidArgument once the engine is
        closed; convert(args), if given, turns the Python arguments into the
        C ones; fn(e, *args) calls the C function `call`. An argument that
        cffi (or convert) cannot convert raises InvalidArgument
        (errno_of(args), if given, names another errno); a negative result
        raises its KvadmitError (check=False: fn returns nothing, or the
        caller checks it later, as step() does). Returns fn's result."""
        me = get_ident()
        inflight = self._inflight
        # Counted first, then the engine read: a close() that looks at the
        # counts after this waits for the call; one that looked before has
        # cleared _e, which this read then sees. Only this thread writes its
        # key: no lock on the way in or out. No call lies between the store
        # and the try, so no signal handler can run between them (CPython
        # checks for them at calls and backward jumps).
        inflight[me] = inflight.get(me, 0) + 1
        try:
            e = self._e
            if e is None:
                with self._gate:  # a close() deciding now: wait for its answer
                    e = self._e
                if e is None:
                    raise _closed()
            try:
                rc = fn(e, *(args if convert is None else convert(args)))
            except KvadmitError:
                raise
            except CONVERSION as exc:
                raise arg_error(call, exc, -22 if errno_of is None else errno_of(args)) from exc
        finally:
            # no call between here and the store either (close() reads a copy)
            n = inflight[me] - 1
            if n:
                inflight[me] = n
            else:
                del inflight[me]
        if self._st.interrupted and self._stepping != me:
            kept = self._st.take_interrupt()  # a wake callback inside this call
            if kept is not None:
                raise kept
        if check and rc < 0:
            raise error(rc, call)
        return rc

    # -- any thread --------------------------------------------------------------------
    def submit(self, id: Union[int, str], prompt_tokens: int, prefix_key: int = 0,
               user: int = 0, local: Optional[Checkpoint] = None, priority: int = 0,
               arrival_ns: int = 0) -> Handle:
        """kva_submit. id: an int (0..2**64-1), or a str (vLLM's request_id:
        the binding maps it to an engine id of its own, RequestIds; handles
        then carry the str). An engine takes int ids >= 2**63 or str ids,
        not both (InvalidArgument). prefix_key 0: no lookup. user: an
        integer handed back in plans and queries (an index into the host's
        own table). local: the longest checkpoint the host's own prefix
        cache holds (rule host-local-checkpoints). priority, arrival_ns: the
        order under Order.PRIORITY (smaller first; arrival 0: the ingesting
        step's clock)."""
        t = self._tls
        if type(id) is str:
            if self._big_int_ids:
                raise error(-22, "kva_submit: str ids on an engine that took int ids >= 2**63")
            eid = self._ids.engine_id(id)
        else:
            eid = id
            if type(id) is int and id >= _STR_IDS and not self._big_int_ids:
                if self._ids.to_engine or self._ids.next != _STR_IDS:
                    raise error(-22, "kva_submit: int ids >= 2**63 are the str ids' on this "
                                     "engine")
                self._big_int_ids = True
        self._call("kva_submit", lib.kva_submit,
                   (t, eid, prompt_tokens, prefix_key, user, local, priority, arrival_ns),
                   _request_of)
        h = t.h
        return _new_tuple(Handle, (id, h.gen, h.slot, self.serial))

    def cancel(self, handle: Handle) -> None:
        """kva_cancel: takes effect at the next step."""
        self._call("kva_cancel", lib.kva_cancel, (handle,), self._handle1)

    def answer(self, token: LookupToken, checkpoints: Any = ()) -> None:
        """kva_lookup_answer: the directory's answer, up to 8 Checkpoints (in
        ascending position); empty: a miss. Any thread."""
        self._call("kva_lookup_answer", lib.kva_lookup_answer, (token, checkpoints),
                   _answer_of)

    lookup_answer = answer

    def local_checkpoint(self, handle: Handle, checkpoint: Any) -> None:
        """kva_local_checkpoint (rule host-local-checkpoints): the host's prefix cache now holds
        `checkpoint` (a Checkpoint, or (position, id[, epoch])) of h's prompt;
        its location is LOCAL and it is compatible."""
        self._call("kva_local_checkpoint", lib.kva_local_checkpoint, (handle, checkpoint),
                   self._local_checkpoint_of)

    def copy_done(self, token: CopyToken, rank: int = 0, status: int = 0) -> None:
        """kva_copy_done: one rank of a copy attempt finished (status 0: ok)."""
        self._call("kva_copy_done", lib.kva_copy_done, (token, rank, status), None, _rank_errno)

    def checkpoint_evicted(self, checkpoint_id: int, epoch: int) -> None:
        """kva_checkpoint_evicted (rule eviction-revalidates)."""
        self._call("kva_checkpoint_evicted", lib.kva_checkpoint_evicted,
                   (checkpoint_id, epoch))

    def prefill_observed(self, tokens: int, ns: int, square_span: int = 0) -> None:
        """kva_prefill_observed_span: the host prefilled `tokens` in `ns`
        (one step's prefill); `square_span`, the sum of end^2 - start^2 over
        its prefill chunks, lets the cost policy tell a long prompt's prefill
        from a short one's (0: not known)."""
        self._call("kva_prefill_observed_span", lib.kva_prefill_observed_span,
                   (tokens, square_span, ns))

    def reset_prefix_cache(self) -> None:
        """kva_reset_prefix_cache (rule reset-returns-ready)."""
        self._call("kva_reset_prefix_cache", lib.kva_reset_prefix_cache)

    def grow(self, handle: Handle, pages: int, out: Any = None) -> Any:
        """kva_grow: `pages` more pages for a RUNNING request. Returns their
        ids as array('I'), or writes them into `out` (a writable buffer of
        at least `pages` uint32) and returns it; out=False: ids not wanted
        (returns None). Credits-only mode: None (the host takes `pages`
        pages from its own pool). NoSpace when no credits are free (nothing changed);
        OutOfRange for pages outside 0..total_pages, checked before the id
        array is allocated."""
        ids = [out]  # _grow_of puts the id array it allocates here
        self._call("kva_grow", lib.kva_grow, (handle, pages, ids, self._total_pages),
                   self._grow_of)
        return None if ids[0] is False else ids[0]

    def preempt(self, handle: Handle) -> None:
        """kva_preempt: RUNNING -> front of the waiting queue; pages back at once."""
        self._call("kva_preempt", lib.kva_preempt, (handle,), self._handle1)

    def set_priority(self, handle: Handle, priority: int) -> None:
        """kva_set_priority (Order.PRIORITY): a waiting request moves at the next step; a
        running one's priority counts when it is preempted."""
        self._call("kva_set_priority", lib.kva_set_priority, (handle, priority),
                   self._handle_args)

    def preempt_candidate(self) -> Handle:
        """kva_preempt_candidate (Order.PRIORITY): the running request with the largest
        (priority, arrival) as of the last step. Scheduler thread."""
        h = ffi.new("kva_handle *")
        self._call("kva_preempt_candidate", lib.kva_preempt_candidate, (h,))
        return handle_of(h[0], self.serial, self._ids.to_host)

    def finish(self, handle: Handle) -> None:
        """kva_finish: RUNNING -> FINISHED; pages back at once."""
        self._call("kva_finish", lib.kva_finish, (handle,), self._handle1)

    def query(self, handle: Handle) -> RequestInfo:
        """kva_query."""
        q = ffi.new("kva_request_info *")
        self._call("kva_query", lib.kva_query, (handle, q), self._handle_args)
        return _request_info_of(q, self.serial, self._ids.to_host)

    def stats(self) -> Stats:
        """kva_stats_get, as a Stats dataclass."""
        s = ffi.new("kva_stats *")
        self._call("kva_stats_get", lib.kva_stats_get, (s,), check=False)
        return stats_from_c(s)

    def stats_raw(self, out: Any = None) -> Any:
        """kva_stats_get into a kva_stats cdata (`out`, one from an earlier
        call, is reused): no Python object a field, read the fields as
        attributes (s.waiting, s.fallbacks[Reason.MISS]). The cheap way to
        read counters every step; stats() builds a Stats dataclass."""
        s = ffi.new("kva_stats *") if out is None else out
        self._call("kva_stats_get", lib.kva_stats_get, (s,), check=False)
        return s

    def metrics(self, format: MetricsFormat = MetricsFormat.PROMETHEUS) -> str:
        """kva_stats_format_as: Prometheus (0.0.4) or OpenMetrics text."""
        s = ffi.new("kva_stats *")
        self._call("kva_stats_get", lib.kva_stats_get, (s,), check=False)
        return metrics_text(s, format)

    def waiting(self, max: int = 0) -> List[WaitingInfo]:
        """kva_waiting_foreach: the waiting queue in admission order (at most
        `max`, 0 = all), a live view (kvadmit.h)."""
        out = []
        serial, names = self.serial, self._ids.to_host

        def fn(ctx, w):
            h = w.handle
            out.append(WaitingInfo(handle_of(h, serial, names), user_of(w.user), w.position,
                                   w.prompt_tokens))
            return 0
        cb = ffi.callback("kva_waiting_fn", fn, onerror=onerror("waiting"))
        s = enter_callback(self._st)  # fn runs on this thread, inside the walk
        try:
            self._call("kva_waiting_foreach", lib.kva_waiting_foreach, (cb, ffi.NULL, max))
        finally:
            s.pop()
        return out

    # -- scheduler thread ---------------------------------------------------------------
    def step(self, now_ns: int, token_budget: Optional[int] = None,
             hold_admissions: bool = False) -> Plan:
        """kva_step: events, timers, admissions. Returns the engine's Plan
        (the same object every time: valid until the next step). Runs the
        lookup, log and importer callbacks on this thread.

        token_budget: prefill tokens this step may start (vLLM's
        max_num_batched_tokens less what running requests use), exactly: 0
        admits nothing that prefills. None: no budget.
        hold_admissions: the host preempted in this step, admit nothing new.

        One step at a time: a step() while another thread's runs raises
        Busy (and changes nothing). A KeyboardInterrupt (any BaseException
        that is not an Exception) raised while kvadmit ran a callback, or
        once kva_step returned, is raised by step() after the step
        completed; its `plan` attribute is this step's Plan (None if the
        step never ran; absent if it landed on this method's first line,
        before any of its code ran: read it with getattr(exc, "plan",
        None)). A close() reached inside the step destroys the engine once
        kva_step has returned; the step then raises InvalidArgument."""
        me = get_ident()
        c = self._plan._c
        prev = None  # not claimed yet
        unset = False  # records_touched holds the mark: whether kva_step ran tells
        try:
            s = self._stepping
            if s != me:  # not a step inside this thread's own step: take the scheduler's role
                # dict.setdefault is one atomic operation: the first thread's
                # ident stays until its _step_over (an interrupt right after
                # it is undone below: the ident says whose it is)
                if self._claim.setdefault(0, me) != me:
                    raise error(-16, "Engine.step: step() is running on another thread")
                s = 0
            prev = s  # first: an interrupt after it is undone by _step_over(prev)
            # _stepping before _e (read by _call): close() reads them in the other order
            self._stepping = me
            if not prev:
                if self._ids.to_host and c.n_ended:
                    self._forget_ended(c)
                c.records_touched = _TOUCHED_UNSET  # kva_step clears it: tells it ran
                unset = True
            # kva_step's own error waits for the close and interrupt below
            rc = self._call("kva_step", lib.kva_step, (now_ns, token_budget, hold_admissions),
                            self._step_inputs, check=False)
            if prev == 0 and self._close_pending is None:
                self._stepping = 0  # _step_over's common case, inline (no call: no interrupt)
                del self._claim[0]
            else:
                self._step_over(prev)
            pending = None if prev or not self._st.interrupted else self._st.take_interrupt()
            if self._closing is not None and pending is None:
                raise error(-22, "kva_step: the engine was closed during this step")
            if pending is not None:
                raise pending  # its plan is set by the except below
            if rc < 0:
                raise error(rc, "kva_step")
            return self._plan
        except BaseException as exc:
            # Also an interrupt that landed in this method's own lines: it
            # gets the plan whenever kva_step ran.
            if prev is not None:
                self._step_over(prev)  # idempotent
            elif self._stepping != me and self._claim.get(0) == me:
                del self._claim[0]  # claimed, then interrupted before it was recorded
            if not isinstance(exc, Exception):
                ran = unset and c.records_touched != _TOUCHED_UNSET
                if prev == 0:  # the outermost step: one interrupt stands for all of it
                    self._st.take_interrupt()
                setattr(exc, "plan", self._plan if ran else None)
            raise

    def _step_inputs(self, args):
        """kva_step's arguments after the engine: the plan, with the step's
        token budget and hold flag written into it."""
        now_ns, token_budget, hold_admissions = args
        c = self._plan._c
        if token_budget is None:
            token_budget = _BUDGET_UNLIMITED
        else:
            if type(token_budget) is not int:
                token_budget = operator.index(token_budget)  # TypeError: not an int
            if not 0 <= token_budget < _BUDGET_UNLIMITED:
                raise OverflowError(f"token_budget {token_budget} outside "
                                    f"0..{_BUDGET_UNLIMITED - 1}")
        if type(hold_admissions) is not bool:
            raise TypeError(f"hold_admissions: a bool, not {type(hold_admissions).__name__}")
        if (token_budget, hold_admissions) != self._inputs:  # written only when they change
            self._inputs = None  # if a write fails half-way, the next step writes both
            c.token_budget = token_budget
            c.hold_admissions = hold_admissions
            self._inputs = (token_budget, hold_admissions)
        return now_ns, c

    def _handle(self, h):
        """A handle argument as kva_handle's (id, gen, slot): a Handle of this
        engine (or made by hand), or a plain 3-tuple."""
        if type(h) is Handle:
            eng = h[3]
            if eng and eng != self.serial:
                raise error(-22, f"a handle of another engine (serial {eng}, this one "
                                 f"{self.serial})")
            if type(h[0]) is str:
                eid = self._ids.to_engine.get(h[0])
                if eid is None:
                    raise error(-2, f"request id {h[0]!r}: not live on this engine")
                return eid, h[1], h[2]
            return h[:3]
        if isinstance(h, tuple) and len(h) == 3:
            return h
        raise TypeError(f"a Handle, not {type(h).__name__}"
                        + (f" of {len(h)}" if isinstance(h, tuple) else ""))

    def _forget_ended(self, c):
        """The string ids of the requests the last plan listed as ended are
        free now (the host has read that plan)."""
        ended, ids = c.ended, self._ids
        for i in range(c.n_ended):
            ids.ended(ended[i].handle.id, ended[i].state)

    def _handle_args(self, args):
        return (self._handle(args[0]),) + args[1:]

    def _handle1(self, args):
        """The one-handle calls' conversion (cancel, preempt, finish): a
        Handle of this engine with an int id goes through as is."""
        h = args[0]
        if type(h) is Handle and type(h[0]) is int:
            eng = h[3]
            if eng == self.serial or not eng:
                return (h[:3],)
        return (self._handle(h),)

    def _local_checkpoint_of(self, args):
        handle, checkpoint = args
        return self._handle(handle), local_checkpoint_of(checkpoint)

    def _grow_of(self, args):
        handle, pages, ids, total_pages = args
        if self.config.credits_only:
            ids[0] = False  # no ids to write: the host's own pool
        return _grow_of((self._handle(handle), pages, ids, total_pages))

    def _step_over(self, prev):
        """This thread's step has ended (prev: the step it ran inside, 0:
        none): the scheduler's role is free again, and if close() ran inside
        the outermost step the engine is destroyed (self._closing says so).
        Idempotent."""
        if self._stepping == prev:
            return
        self._stepping = prev
        if prev:
            return
        self._claim.pop(0, None)
        if self._close_pending is None:
            return
        closing, self._close_pending = self._close_pending, None
        self._closing = closing
        self._finalizer.detach()
        self._st.destroy_safely(closing[0])

    @property
    def plan(self) -> Plan:
        """The last step's plan."""
        return self._plan


# ---- one call's conversions: Python arguments into C (run inside Engine._call) ---------
def _request_of(args):
    """kva_submit's request and handle, t's own (one pair per thread: submit
    from any thread), filled in."""
    t, id, prompt_tokens, prefix_key, user, local, priority, arrival_ns = args
    try:
        req, h = t.req, t.h
    except AttributeError:
        t.req, t.h, t.dirty = ffi.new("kva_request *"), ffi.new("kva_handle *"), False
        req, h = t.req, t.h
    req.id = id
    req.prefix_key = prefix_key
    req.prompt_tokens = prompt_tokens
    if type(user) is not int:
        user = operator.index(user)  # TypeError: not an integer
    if not 0 <= user < _UINT64:
        raise OverflowError(f"user {user} outside 0..2**64-1")
    req.priority = priority
    req.arrival_ns = arrival_ns
    if user or local is not None:
        # dirty first: if filling user or local fails half-way, the next
        # plain submit on this thread still clears them
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
    return req, h


def _answer_of(args):
    token, checkpoints = args
    return token, manifest_of(checkpoints)


def _rank_errno(args):
    """A rank beyond uint32 is beyond world_size: the library's -ERANGE."""
    rank = args[1]
    return -34 if isinstance(rank, int) and not 0 <= rank <= 0xFFFFFFFF else -22


def _grow_of(args):
    """kva_grow's arguments, pages range-checked before the id array is
    allocated; the array goes into ids[0] (ids: [out])."""
    handle, pages, ids, total_pages = args
    pages = operator.index(pages)
    if not 0 <= pages <= total_pages:
        raise error(-34, f"kva_grow: pages {pages} outside 0..total_pages")
    out = ids[0]
    if out is False:
        return handle, pages, ffi.NULL
    if out is None:
        out = ids[0] = array.array("I", [0]) * pages
    buf = ffi.from_buffer("uint32_t[]", out, require_writable=True)
    if len(buf) < pages:
        raise error(-34, "kva_grow: out is smaller than pages")
    return handle, pages, buf


def _request_info_of(q, serial, names):
    """The RequestInfo of a kva_request_info."""
    return RequestInfo(handle_of(q.handle, serial, names), user_of(q.user), _STATE.get(q.state, q.state),
                       _REASON.get(q.reason, q.reason),
                       _LOCATION.get(q.selected_location, q.selected_location),
                       bool(q.has_selection), q.prompt_tokens, q.selected_position,
                       q.pages_held, q.pages_reserved, q.lookups, q.copy_attempts,
                       bool(q.cancel_requested), q.predicted_restore_ns,
                       q.predicted_recompute_ns)
