# SPDX-License-Identifier: Apache-2.0
"""What every kvadmit callback shares: the per-thread stack of owners whose
callbacks are running Python now, and the reporting of a callback that
raised (logged, never lost, never a crash).

GIL: every call into the library goes through cffi's ABI-mode call path,
which releases the GIL around the foreign call and takes it back after, and
every callback (lookup, log, wake, importer, resolve, report) takes the GIL
before it runs Python. So a kva_step that runs for a while, or an importer's
worker threads, never stall other Python threads, and a callback may run on
any thread at any time the C side calls it.
"""
import logging
import sys
import threading

log = logging.getLogger("kvadmit")


def report_callback_error(what, exc_type, exc, tb):
    """A callback raised: log it (never lost, never crashes the process)."""
    try:
        log.error("kvadmit: the %s callback raised", what, exc_info=(exc_type, exc, tb))
    except BaseException:  # the logging machinery itself failed: last resort
        try:
            sys.__stderr__.write(f"kvadmit: the {what} callback raised {exc!r}\n")
        except BaseException:
            pass


def onerror(what, st=None, rescue=None):
    """cffi's onerror for the callback `what`: an exception that escaped the
    callback's own handling (a KeyboardInterrupt landing on its first lines,
    before its try) is reported, and kept for the engine's step() to raise
    if it is an interrupt (st: the EngineState). rescue(frame), if given,
    repairs what the callback left undone, from its frame's arguments (a
    lookup answered as a miss)."""
    def onerror(exc_type, exc, tb):
        stack = _stack()
        n = len(stack)
        try:
            stack.append(None)
            if st is not None:
                st.keep_interrupt(exc)
            if rescue is not None and tb is not None:
                rescue(tb.tb_frame)
            report_callback_error(what, exc_type, exc, tb)
        finally:
            del stack[n:]
        return None  # the callback's default result (0 / nothing)
    return onerror


def _stack():
    """This thread's stack of owners (see enter_callback)."""
    try:
        return _cb_local.stack
    except AttributeError:
        s = _cb_local.stack = []
        return s


# Per thread, the owners whose kvadmit callbacks are running Python on this
# thread now, innermost last: an engine's EngineState (lookup, log, wake,
# importer, waiting, on_unfinished) or an importer's _ImporterCore (resolve,
# report). Engine.close() and the GC finalizer read it: the library forbids
# destroying an engine inside its own callbacks, and an importer's destroy
# joins its worker threads, so it cannot run on one of them.
_cb_local = threading.local()
get_ident = threading.get_ident


def enter_callback(owner):
    """Pushes `owner`; returns the stack, for the caller's s.pop()."""
    try:
        s = _cb_local.stack
    except AttributeError:
        s = _cb_local.stack = []
    s.append(owner)
    return s


def callbacks_running():
    """The owners whose callbacks run on this thread now, innermost last."""
    return getattr(_cb_local, "stack", None) or ()


def foreign_thread():
    """A thread Python did not start (an importer's worker, a C++ host's own):
    Python code runs there only inside callbacks. The GC may run a finalizer
    there before a callback has entered enter_callback. Read from threading's
    table without threading.current_thread(), which would register a dummy
    thread under threading's lock from inside the GC."""
    t = _THREADS.get(get_ident())
    return t is None or isinstance(t, _DUMMY_THREAD)


_THREADS = getattr(threading, "_active", {})  # CPython: ident -> Thread, dummies included
_DUMMY_THREAD = getattr(threading, "_DummyThread", ())
