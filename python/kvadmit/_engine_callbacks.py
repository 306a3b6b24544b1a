# SPDX-License-Identifier: Apache-2.0
"""The engine's callbacks: the cffi trampolines the C engine calls (lookup,
log, log_record, wake, a Python importer's submit) and install_callbacks,
which puts them into a kva_config. Each reaches the host's callable through
a weak reference to the Engine, so a callback that refers to the engine
never keeps it alive."""
import logging
import weakref

from ._callback_context import _stack, onerror, report_callback_error
from ._checkpoints import EMPTY_MANIFEST
from ._errors import error
from ._lib import ffi, lib
from ._plan import copy_job_of
from ._types import _EVENT, _LEVEL, _REASON, LogRecord, LookupToken, handle_or_none

engine_log = logging.getLogger("kvadmit.engine")

_PY_LEVEL = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}


def install_callbacks(engine, c, config, st):
    """Sets the callbacks of kva_config `c` from `config`; the cffi callbacks
    go into st (the EngineState), the host's callables onto `engine`."""
    # The host's callables stay on the Engine (engine._on_*); the closures
    # the C engine calls hold only a weak reference to it and st, so the
    # finalizer's st never keeps the host's objects, nor through them the
    # Engine, alive.
    ref = weakref.ref(engine)

    def keep(ctype, fn, what, rescue=None, **err):
        """The cffi callback of fn, kept alive in st as long as the engine
        (err: error=, what C gets when an exception escapes fn)."""
        cb = ffi.callback(ctype, fn, onerror=onerror(what, st, rescue), **err)
        st.callbacks.append(cb)
        return cb

    engine._on_lookup = config.lookup
    engine._on_log = config.log
    engine._on_log_record = config.log_record
    engine._on_wake = config.wake
    engine._importer_fns = {}
    engine._importer_objs = list(config.importers)  # keeps each CpuImporter alive
    for name in ("lookup", "log", "log_record", "wake"):
        fn = getattr(config, name)
        if fn is not None and not callable(fn):
            raise TypeError(f"Config.{name}: a callable or None, not {type(fn).__name__}")
    # Each callback below pushes st on this thread's callback stack inside its
    # try (an interrupt landing anywhere leaves the stack as it was), keeps a
    # KeyboardInterrupt for step() (st.keep_interrupt), and what escapes even
    # that (an interrupt on its first line) reaches onerror(what, st), which
    # keeps it too.
    if config.lookup is not None:
        def lookup_cb(ctx, key, prompt, t):
            stack = _stack()
            n = len(stack)
            delivered = False  # the host has the token, or it was answered
            try:
                stack.append(st)
                self_ = ref()
                if self_ is None:
                    return
                token = LookupToken(t.id, t.gen, t.seq, t.slot)
                try:
                    self_._on_lookup(key, prompt, token)
                    delivered = True
                except BaseException as exc:
                    # answered as a miss, so the request does not wait for a timeout
                    e = self_._e
                    if e is not None:
                        lib.kva_lookup_answer(e, t, EMPTY_MANIFEST)
                    delivered = True
                    st.keep_interrupt(exc)
                    report_callback_error("lookup", type(exc), exc, exc.__traceback__)
            finally:
                del stack[n:]

        def lookup_rescue(frame):
            """An interrupt escaped lookup_cb before the host had its token:
            answered as a miss, never dropped (an answer that also came from
            the host is -ESTALE, harmless)."""
            loc = frame.f_locals
            t = loc.get("t")
            if t is not None and not loc.get("delivered") and st.e is not None:
                lib.kva_lookup_answer(st.e, t, EMPTY_MANIFEST)
        c.lookup = keep("kva_lookup_fn", lookup_cb, "lookup", lookup_rescue)
    text, record = config.log, config.log_record
    if text is None and record is None and config.log_to_logging:
        record = _to_logging
    if text is not None:
        def log_cb(ctx, level, msg):
            stack = _stack()
            n = len(stack)
            try:
                stack.append(st)
                self_ = ref()
                if self_ is None:
                    return
                try:
                    self_._on_log(_LEVEL.get(level, level),
                                  ffi.string(msg).decode("utf-8", "replace"))
                except BaseException as exc:
                    st.keep_interrupt(exc)
                    report_callback_error("log", type(exc), exc, exc.__traceback__)
            finally:
                del stack[n:]
        c.log = keep("kva_log_fn", log_cb, "log")
    if record is not None:
        default = record if record is _to_logging else None  # ours: may be held
        serial = engine.serial

        def record_cb(ctx, r):
            stack = _stack()
            n = len(stack)
            try:
                stack.append(st)
                self_ = ref()
                fn = default or (self_._on_log_record if self_ is not None else None)
                if fn is None:
                    return
                try:
                    fn(LogRecord(_LEVEL.get(r.level, r.level), _EVENT.get(r.event, r.event),
                                 handle_or_none(r.handle, serial, st.names),
                                 _REASON.get(r.reason, r.reason),
                                 r.value,
                                 ffi.string(r.message).decode("utf-8", "replace")
                                 if r.message != ffi.NULL else ""))
                except BaseException as exc:
                    st.keep_interrupt(exc)
                    report_callback_error("log_record", type(exc), exc, exc.__traceback__)
            finally:
                del stack[n:]
        c.log_record = keep("kva_log_record_fn", record_cb, "log_record")
    if config.wake is not None:
        def wake_cb(ctx):
            stack = _stack()
            n = len(stack)
            try:
                stack.append(st)
                self_ = ref()
                if self_ is not None:
                    self_._on_wake()
            except BaseException as exc:
                st.keep_interrupt(exc)  # raised by the call that ran it
                report_callback_error("wake", type(exc), exc, exc.__traceback__)
            finally:
                del stack[n:]
        c.wake = keep("kva_wake_fn", wake_cb, "wake")
    importers = engine._importer_objs
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
            engine._importer_fns[rank] = imp
            # error=-EIO: an interrupt that escaped it fails the rank, never accepts it
            c.importers[rank].submit = keep("kva_import_fn", _py_importer(rank, ref, st),
                                            "importer", error=-5)
        else:
            raise TypeError(f"importers[{rank}]: a CpuImporter or a callable, not {imp!r}")


def _to_logging(rec):
    """The default log_record: one line to logging.getLogger("kvadmit.engine")."""
    engine_log.log(_PY_LEVEL.get(int(rec.level), logging.INFO), "%s", rec.message,
                   extra={"kva_event": rec.event, "kva_handle": rec.handle,
                          "kva_reason": rec.reason, "kva_value": rec.value})


def _py_importer(rank, ref, st):
    """The kva_import_fn of a Python callable importer of `rank`."""
    def submit(ctx, e, job):
        stack = _stack()
        n = len(stack)
        try:
            stack.append(st)
            self_ = ref()
            if self_ is None:
                return -5
            try:
                rc = self_._importer_fns[rank](copy_job_of(job, st.serial, st.names))
                return int(rc or 0)
            except BaseException as exc:
                st.keep_interrupt(exc)
                report_callback_error("importer", type(exc), exc, exc.__traceback__)
                return -5  # -EIO: the engine treats the rank as failed
        finally:
            del stack[n:]
    return submit
