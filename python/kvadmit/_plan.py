# SPDX-License-Identifier: Apache-2.0
"""Plan (one step's decisions, read from the engine's preallocated kva_plan)
and copy_job_of (a kva_copy_job as a CopyJob)."""
from ._errors import CONVERSION, arg_error
from ._lib import ffi
from ._types import (_HOW, _REASON, _STATE, Admission, CopyJob, CopyToken, Ended, Fallback,
                     Handle, handle_of, user_of)

_new_tuple = tuple.__new__

class Plan:
    """What one Engine.step() decided, read from the engine's preallocated
    buffers. Valid until the next step of the same engine (the next step
    overwrites the buffers; copy what you keep).

    Counts and flags are plain attributes of the C plan. The lists build one
    small NamedTuple per admission / copy job / fallback / ended request;
    page ids are never Python objects: `pages` is a memoryview ('I') of the
    page array, and pages_of(admission) a slice of it (numpy.frombuffer
    works on both)."""

    __slots__ = ("_c", "_keep", "_pages_mv", "_ffi", "_serial", "_names", "_credits_only")

    def __init__(self, sizes, serial=0, names=None, credits_only=False):
        self._serial = serial  # the Engine.serial its handles carry
        self._names = names    # RequestIds.to_host: engine id -> the host's string id
        self._credits_only = credits_only  # no page ids: pages_of is empty
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
            except CONVERSION as exc:
                raise arg_error(f"plan_sizes.{name}", exc) from exc
            self._keep.append(arr)
            setattr(c, name, arr)
        self._pages_mv = memoryview(ffi.buffer(c.pages, 4 * max(sizes.pages, 1))).cast("I")
        c.token_budget_exact = True  # Engine.step: None is the unlimited sentinel

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
    preempt_hint = property(lambda self: self._c.preempt_hint)

    @property
    def raw(self):
        """The kva_plan cdata itself (cffi), for code that wants no tuples."""
        return self._c

    # zero-copy views: cffi slices of the plan's own arrays, no tuple built
    @property
    def admitted_view(self):
        """The admissions as a cffi slice of kva_admission (zero-copy: each
        field is read from the C array when accessed, a.npages,
        a.handle.id). Handles there carry engine ids: host_id(a.handle.id)
        gives a string id back. Valid until the next step."""
        c = self._c
        return c.admitted[0:c.n_admitted]

    @property
    def copies_view(self):
        """plan.copies as a cffi slice of kva_copy_job (zero-copy)."""
        c = self._c
        return c.copies[0:c.n_copies]

    @property
    def ended_view(self):
        """plan.ended as a cffi slice of kva_ended (zero-copy)."""
        c = self._c
        return c.ended[0:c.n_ended]

    def host_id(self, engine_id):
        """The host's id for an engine id read from a view: its string id
        (Engine.submit with a str), else the int itself."""
        names = self._names
        return names.get(engine_id, engine_id) if names else engine_id

    @property
    def pages(self):
        """Every page id handed over in this step: memoryview of uint32."""
        return self._pages_mv[:self._c.n_pages]

    def pages_of(self, admission):
        """The admission's page ids (empty in credits-only mode: npages says
        how many to take from the host's own pool)."""
        if self._credits_only:
            return self._pages_mv[:0]
        off = admission.pages_off
        return self._pages_mv[off:off + admission.npages]

    @property
    def admissions(self):
        c = self._c
        a = c.admitted
        out = []
        serial, names = self._serial, self._names
        for i in range(c.n_admitted):
            x = a[i]
            h = x.handle
            hid = h.id
            if names:
                hid = names.get(hid, hid)
            out.append(Admission(_new_tuple(Handle, (hid, h.gen, h.slot, serial)),
                                 user_of(x.user),
                                 _HOW.get(x.how, x.how), _REASON.get(x.reason, x.reason),
                                 x.local_tokens, x.restored_tokens, x.recompute_tokens,
                                 x.pages_off, x.npages, x.reserved_pages))
        return out

    @property
    def copies(self):
        c = self._c
        return [copy_job_of(c.copies[i], self._serial, self._names)
                for i in range(c.n_copies)]

    @property
    def fallbacks(self):
        c = self._c
        f = c.fallbacks
        return [Fallback(handle_of(f[i].handle, self._serial, self._names), _REASON.get(f[i].reason, f[i].reason))
                for i in range(c.n_fallbacks)]

    @property
    def ended(self):
        c = self._c
        e = c.ended
        return [Ended(handle_of(e[i].handle, self._serial, self._names), user_of(e[i].user), _STATE.get(e[i].state,
                                                                                e[i].state))
                for i in range(c.n_ended)]

    def __repr__(self):
        c = self._c
        return (f"Plan(admitted={c.n_admitted}, pages={c.n_pages}, copies={c.n_copies}, "
                f"fallbacks={c.n_fallbacks}, ended={c.n_ended}, events={c.events}, "
                f"head_blocked={bool(c.head_blocked)}, backlog={bool(c.backlog)}, "
                f"too_small={bool(c.too_small)})")


def copy_job_of(j, serial=0, names=None):
    """A CopyJob; its pages are empty in credits-only mode (j.pages NULL:
    the host names its own npages pages)."""
    t, h = j.token, j.handle
    pages = memoryview(ffi.buffer(j.pages, 4 * j.npages)).cast("I") \
        if j.npages and j.pages != ffi.NULL else memoryview(b"").cast("I")
    return CopyJob(CopyToken(t.id, t.gen, t.attempt, t.slot), handle_of(h, serial, names),
                   j.rank, j.world_size, j.checkpoint_id, j.checkpoint_epoch, j.position,
                   j.npages, pages)

