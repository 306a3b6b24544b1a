# SPDX-License-Identifier: Apache-2.0
"""Enums and the small value types of the binding.

Every enum is built from the C declarations in _cdef.py (which
tests/test_layout.py checks against the headers), so the Python values can
never drift from the C ones.
"""
import dataclasses
import enum
from typing import Dict, NamedTuple, Optional, Union

from ._lib import ffi


# Written out so that type checkers see the members (mypy: How.RESTORE);
# _check_enum holds each to its C declaration in _cdef.py at import.
class Feature(enum.IntEnum):
    """enum kva_feature (rule capabilities)"""
    RESTORE_RESERVATION = 1
    BOUNDED_WAIT = 2
    COLLECTIVE_COPY = 3
    LOCAL_REVALIDATION = 4
    RESET_RELEASES_READY = 5
    CUDA_IMPORTER = 6
    HOST_LOCAL = 7
    EXACT_BUDGET = 8
    CREDITS_ONLY = 9
    COST_POLICY = 10


class Policy(enum.IntEnum):
    """enum kva_policy"""
    WAIT = 0
    LEGACY = 1
    COST = 2


class Tier(enum.IntEnum):
    """enum kva_tier: where a checkpoint lives (kva_checkpoint.tier)"""
    UNKNOWN = 0
    GPU = 1
    HOST = 2
    DISK = 3
    REMOTE = 4


class Order(enum.IntEnum):
    """enum kva_order: the waiting order"""
    FCFS = 0
    PRIORITY = 1


class LogLevel(enum.IntEnum):
    """enum kva_log_level"""
    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3


class Location(enum.IntEnum):
    """enum kva_location"""
    EXTERNAL = 0
    LOCAL = 1


class LogEvent(enum.IntEnum):
    """enum kva_log_event: what a structured log line is about"""
    WAIT_STARTED = 1
    WAIT_ONGOING = 2
    WAIT_EXPIRED = 3
    FALLBACK = 4
    LOOKUP_TIMEOUT = 5
    COPY_FAILED = 6
    COPY_RETRY = 7
    SHORTER = 8
    DUPLICATE_ID = 9
    PLAN_TOO_SMALL = 10
    NO_MEMORY = 11
    INVARIANT = 12
    IMPORTER_REFUSED = 13
    COST = 14


class State(enum.IntEnum):
    """enum kva_state"""
    WAITING = 1
    IMPORTING = 2
    READY = 3
    RUNNING = 4
    FINISHED = 5
    CANCELLED = 6
    REJECTED = 7


class Reason(enum.IntEnum):
    """enum kva_reason: why a request takes the ordinary (recompute) path"""
    NONE = 0
    NO_KEY = 1
    MISS = 2
    INCOMPATIBLE = 3
    LOOKUP_TIMEOUT = 4
    RETRIES_EXHAUSTED = 5
    WAIT_EXPIRED = 6
    TOO_LARGE = 7
    LEGACY = 8
    COST = 9


class How(enum.IntEnum):
    """enum kva_how: how a request was admitted"""
    RESTORE = 1
    LOCAL = 2
    RECOMPUTE = 3


class MetricsFormat(enum.IntEnum):
    """enum kva_metrics_format"""
    PROMETHEUS = 0
    OPENMETRICS = 1


def _check_enum(cls, ctype, prefix, skip=("COUNT",)):
    """cls must be exactly the C enum `ctype` (names less `prefix`, values),
    else ImportError: the binding would pass wrong numbers."""
    c = {cname[len(prefix):]: value for cname, value in ffi.typeof(ctype).relements.items()
         if cname[len(prefix):] not in skip}
    py = {m.name: int(m) for m in cls}
    if c != py:
        raise ImportError(f"kvadmit: {cls.__name__} does not match {ctype}: {py} != {c}")
    cls._ctype = ctype
    cls._prefix = prefix


for _cls, _ctype, _prefix in (
        (Feature, "enum kva_feature", "KVA_FEATURE_"), (Policy, "enum kva_policy", "KVA_POLICY_"),
        (Order, "enum kva_order", "KVA_ORDER_"),
        (LogLevel, "enum kva_log_level", "KVA_LOG_"), (Location, "enum kva_location", "KVA_LOC_"),
        (Tier, "enum kva_tier", "KVA_TIER_"),
        (LogEvent, "enum kva_log_event", "KVA_LOGEV_"), (State, "enum kva_state", "KVA_STATE_"),
        (Reason, "enum kva_reason", "KVA_REASON_"), (How, "enum kva_how", "KVA_ADMIT_"),
        (MetricsFormat, "enum kva_metrics_format", "KVA_METRICS_")):
    _check_enum(_cls, _ctype, _prefix)

ENUMS = (Feature, Policy, Order, LogLevel, Location, LogEvent, State, Reason, How, MetricsFormat)


def _lookup_table(cls):
    """value -> member, with plain ints for values the enum does not know."""
    table = {int(m): m for m in cls}
    return table


_REASON = _lookup_table(Reason)
_STATE = _lookup_table(State)
_HOW = _lookup_table(How)
_LEVEL = _lookup_table(LogLevel)
_EVENT = _lookup_table(LogEvent)
_LOCATION = _lookup_table(Location)


# ---- value types ------------------------------------------------------------
class Handle(NamedTuple):
    """kva_handle: one incarnation of a request. Hashable; pass it back as is.
    id: the host's id, an int or a str (RequestIds). engine: the
    Engine.serial of the engine that made it; another engine refuses it
    (InvalidArgument). 0 (a Handle made by hand): not checked."""
    id: Union[int, str]
    gen: int
    slot: int
    engine: int = 0


class LookupToken(NamedTuple):
    """kva_lookup_token: names one directory lookup; give it to Engine.answer()."""
    id: int
    gen: int
    seq: int
    slot: int


class CopyToken(NamedTuple):
    """kva_copy_token: names one copy attempt; give it to Engine.copy_done()."""
    id: int
    gen: int
    attempt: int
    slot: int


class Checkpoint(NamedTuple):
    """kva_checkpoint: a stored prefix of `position` tokens."""
    position: int
    id: int
    epoch: int = 0
    location: int = 0  # Location.EXTERNAL
    compatible: bool = True
    tier: int = 0  # Tier.UNKNOWN


class Admission(NamedTuple):
    """kva_admission. Its page ids: plan.pages[pages_off:pages_off + npages]."""
    handle: Handle
    user: int
    how: How
    reason: Reason
    local_tokens: int
    restored_tokens: int
    recompute_tokens: int
    pages_off: int
    npages: int
    reserved_pages: int


class CopyJob(NamedTuple):
    """kva_copy_job. `pages` is a memoryview ('I') of the engine's own array:
    valid until every rank of the attempt has reported (copy_done)."""
    token: CopyToken
    handle: Handle
    rank: int
    world_size: int
    checkpoint_id: int
    checkpoint_epoch: int
    position: int
    npages: int
    pages: memoryview


class Fallback(NamedTuple):
    handle: Handle
    reason: Reason


class Ended(NamedTuple):
    handle: Handle
    user: int
    state: State


class LogRecord(NamedTuple):
    """kva_log_record, as the structured log callback receives it."""
    level: LogLevel
    event: LogEvent
    handle: Optional[Handle]  # None when the line is about no request
    reason: Reason
    value: int
    message: str


class WaitingInfo(NamedTuple):
    handle: Handle
    user: int
    position: int
    prompt_tokens: int


class PlanSizes(NamedTuple):
    admitted: int
    pages: int
    copies: int
    fallbacks: int
    ended: int


@dataclasses.dataclass(frozen=True)
class RequestInfo:
    """kva_query's answer."""
    handle: Handle
    user: int
    state: State
    reason: Reason
    selected_location: Location
    has_selection: bool
    prompt_tokens: int
    selected_position: int
    pages_held: int
    pages_reserved: int
    lookups: int
    copy_attempts: int
    cancel_requested: bool
    predicted_restore_ns: int = 0
    predicted_recompute_ns: int = 0


@dataclasses.dataclass(frozen=True)
class Histogram:
    """kva_histogram: cumulative buckets; buckets[i] counts observations <=
    bounds_ns[i]; the last bucket is +Inf (== count)."""
    count: int
    sum_ns: int
    buckets: tuple
    bounds_ns: tuple


_new_tuple = tuple.__new__


def handle_of(c, engine=0, names=None):
    """The Handle of kva_handle c, made by the engine of serial `engine`;
    names: the engine's {engine id: the host's string id} (RequestIds)."""
    i = c.id
    if names:
        i = names.get(i, i)
    return _new_tuple(Handle, (i, c.gen, c.slot, engine))


def handle_or_none(c, engine=0, names=None):
    return None if c.id == 0 and c.gen == 0 else handle_of(c, engine, names)


class RequestIds:
    """String request ids (vLLM's request_id) for one engine: each live
    string is mapped to an engine id of its own from 2**63 up, never reused
    (so no two strings, and no string and an integer id below 2**63, can
    collide); a string submitted again while live maps to the same engine
    id, so the engine rejects the duplicate (rule id-reuse) as it would an
    integer. The mapping of a request goes once its end has been listed in
    a plan (Engine.step drops it one step later)."""
    FIRST = 1 << 63

    def __init__(self):
        self.to_engine = {}  # the host's string -> engine id
        self.to_host = {}    # engine id -> the host's string (handle_of's names)
        self.next = self.FIRST

    def engine_id(self, rid):
        eid = self.to_engine.get(rid)
        if eid is None:
            eid = self.next
            self.next += 1
            self.to_engine[rid] = eid
            self.to_host[eid] = rid
        return eid

    def ended(self, eid, state):
        """A request's end was listed: its string is free (not for a
        REJECTED duplicate: the string's live request keeps it)."""
        if state == 7:  # KVA_STATE_REJECTED
            return
        rid = self.to_host.pop(eid, None)
        if rid is not None and self.to_engine.get(rid) == eid:
            del self.to_engine[rid]


def user_of(p):
    return int(ffi.cast("uintptr_t", p))
