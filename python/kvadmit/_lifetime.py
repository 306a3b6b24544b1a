# SPDX-License-Identifier: Apache-2.0
"""An engine's lifetime: EngineState (what the C engine refers to, kept
alive as long as it lives) and its destroy, on this thread or a helper
thread, from Engine.close() or from the garbage collector (finalize)."""
import _thread
import threading

from ._callback_context import (callbacks_running, enter_callback, foreign_thread, onerror,
                                report_callback_error)
from ._lib import ffi, lib
from ._types import _STATE, Ended, handle_of, user_of


class EngineState:
    """What the C engine refers to, kept alive as long as it lives (also by
    the finalizer, which must not hold the Engine itself): the cffi callbacks
    and the cores of its CpuImporters. Nothing here may refer to the host's
    own callables (they may refer to the Engine): the callbacks reach them
    through a weak reference to the Engine."""

    def __init__(self):
        self.e = None
        self.serial = 0  # the Engine's, for the handles on_unfinished gets
        self.names = None  # the Engine's RequestIds.to_host
        self.callbacks = []
        self.importers = []  # _ImporterCore of each CpuImporter it owns
        self.closed = False
        self.lock = threading.Lock()
        # BaseExceptions (KeyboardInterrupt ...) raised in a callback, per
        # thread, for the call that ran the callback to raise (step(), or
        # the submit whose wake ran it); `interrupted` is a hint, set first.
        self.interrupts = threading.local()
        self.interrupted = False

    def keep_interrupt(self, exc):
        """Keeps a BaseException that is not an Exception for this thread's
        call to raise (the first; later ones of the same call are the same
        interrupt, coalesced as signals are)."""
        if isinstance(exc, Exception):
            return
        t = self.interrupts
        self.interrupted = True
        if getattr(t, "pending", None) is None:
            t.pending = exc

    def take_interrupt(self):
        """This thread's kept interrupt, or None; clears it."""
        if not self.interrupted:
            return None
        t = self.interrupts
        exc = getattr(t, "pending", None)
        if exc is not None:
            t.pending = None
        return exc

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
                    on_unfinished(Ended(handle_of(r.handle, self.serial, self.names),
                                        user_of(r.user),
                                        _STATE.get(r.state, r.state)))
                cb = ffi.callback("kva_unfinished_fn", fn, onerror=onerror("on_unfinished"))
                s = enter_callback(self)
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
                report_callback_error("close", type(exc), exc, exc.__traceback__)
        try:
            _thread.start_new_thread(run, ())
        except RuntimeError as exc:  # the interpreter is shutting down: no new threads
            report_callback_error("close", type(exc), exc, exc.__traceback__)

    def destroy_safely(self, on_unfinished=None):
        """Destroys on this thread, or on a helper inside a kvadmit callback."""
        if callbacks_running():
            self.destroy_on_helper(on_unfinished)
        else:
            self.destroy(on_unfinished)


def finalize(st):
    """weakref.finalize's call when an Engine is collected (or at exit). The
    Engine is unreachable, so no call of it is in progress; but its importers'
    workers may be running their jobs, and the collection may happen on one
    of them (inside resolve), or inside another engine's callback."""
    if callbacks_running() or foreign_thread():
        st.destroy_on_helper()
    else:
        st.destroy()
