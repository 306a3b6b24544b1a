# SPDX-License-Identifier: Apache-2.0
"""Enums and the small value types of the binding.

Every enum is built from the C declarations in _cdef.py (which
tests/test_layout.py checks against the headers), so the Python values can
never drift from the C ones.
"""
import dataclasses
import enum
from typing import NamedTuple, Optional

from ._lib import ffi


def _int_enum(name, ctype, prefix, doc, skip=("COUNT",)):
    members = {}
    for cname, value in sorted(ffi.typeof(ctype).relements.items(), key=lambda kv: kv[1]):
        short = cname[len(prefix):]
        if short not in skip:
            members[short] = value
    cls = enum.IntEnum(name, members, module=__name__)
    cls.__doc__ = doc
    cls._ctype = ctype
    cls._prefix = prefix
    return cls


Feature = _int_enum("Feature", "enum kva_feature", "KVA_FEATURE_",
                    "enum kva_feature (rule capabilities)")
Policy = _int_enum("Policy", "enum kva_policy", "KVA_POLICY_", "enum kva_policy")
LogLevel = _int_enum("LogLevel", "enum kva_log_level", "KVA_LOG_", "enum kva_log_level")
Location = _int_enum("Location", "enum kva_location", "KVA_LOC_", "enum kva_location")
LogEvent = _int_enum("LogEvent", "enum kva_log_event", "KVA_LOGEV_",
                     "enum kva_log_event: what a structured log line is about")
State = _int_enum("State", "enum kva_state", "KVA_STATE_", "enum kva_state")
Reason = _int_enum("Reason", "enum kva_reason", "KVA_REASON_",
                   "enum kva_reason: why a request takes the ordinary (recompute) path")
How = _int_enum("How", "enum kva_how", "KVA_ADMIT_", "enum kva_how: how a request was admitted")
MetricsFormat = _int_enum("MetricsFormat", "enum kva_metrics_format", "KVA_METRICS_",
                          "enum kva_metrics_format")

ENUMS = (Feature, Policy, LogLevel, Location, LogEvent, State, Reason, How, MetricsFormat)


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
    engine: the Engine.serial of the engine that made it; another engine
    refuses it (InvalidArgument). 0 (a Handle made by hand): not checked."""
    id: int
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


@dataclasses.dataclass(frozen=True)
class Histogram:
    """kva_histogram: cumulative buckets; buckets[i] counts observations <=
    bounds_ns[i]; the last bucket is +Inf (== count)."""
    count: int
    sum_ns: int
    buckets: tuple
    bounds_ns: tuple


_new_tuple = tuple.__new__


def handle_of(c, engine=0):
    """The Handle of kva_handle c, made by the engine of serial `engine`."""
    return _new_tuple(Handle, (c.id, c.gen, c.slot, engine))


def handle_or_none(c, engine=0):
    return None if c.id == 0 and c.gen == 0 else handle_of(c, engine)


def user_of(p):
    return int(ffi.cast("uintptr_t", p))
