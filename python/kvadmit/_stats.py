# SPDX-License-Identifier: Apache-2.0
"""Stats (kva_stats as a frozen dataclass built from the C declaration),
histogram_bounds, and the metrics text (kva_stats_format_as)."""
import dataclasses
from typing import Dict, Tuple, Union

from ._errors import CONVERSION, KvadmitError, arg_error, error
from ._lib import ffi, lib
from ._types import _REASON, Histogram, Reason


@dataclasses.dataclass(frozen=True)
class Stats:
    """kva_stats (fields in kvadmit.h order). fallbacks: {Reason: count};
    histograms: Histogram. Written out for type checkers; _check_stats holds
    it to the C declaration at import."""
    total_pages: int
    free_pages: int
    reserved_pages: int
    in_use_pages: int
    draining_pages: int
    free_copy_slots: int
    free_run_slots: int
    submitted: int
    ingested: int
    rejected: int
    finished: int
    cancelled: int
    preempted: int
    waiting: int
    importing: int
    ready: int
    running: int
    admitted_restore: int
    admitted_local: int
    admitted_recompute: int
    prompt_tokens_admitted: int
    tokens_local: int
    tokens_restored: int
    tokens_recomputed: int
    lookups_issued: int
    lookups_answered: int
    lookups_timed_out: int
    late_answers: int
    refreshes: int
    revalidations: int
    copy_jobs: int
    copy_attempts_failed: int
    copy_retries: int
    shorter_fallbacks: int
    stale_copy_reports: int
    fallbacks: Dict[Union[Reason, int], int]
    restore_blocked_steps: int
    wait_logs: int
    wait_expired: int
    steps: int
    events: int
    restores_waiting: int
    capacity_wait_ns: int
    local_stated: int
    local_upgrades: int
    plan_too_small: int
    alloc_failures: int
    logs_suppressed: int
    capacity_wait: Histogram
    lookup_latency: Histogram
    copy_duration: Histogram
    time_to_admission: Histogram
    priority_levels: int
    urgent_level: int
    lax_level: int
    urgent_waiting: int
    lax_waiting: int
    urgent_wait_ns: int
    lax_wait_ns: int
    admitted_by_priority: Tuple[int, ...]
    cost_restores: int
    cost_other_checkpoint: int
    cost_recomputes: int
    prefill_tokens_per_s: int
    tier_bytes_per_s: Tuple[int, ...]  # index: Tier
    tier_setup_ns: Tuple[int, ...]
    copy_slot_interval_ns: int
    prefill_attn_ps: int


def _check_stats():
    names = [name for name, _ in ffi.typeof("kva_stats").fields]
    have = [f.name for f in dataclasses.fields(Stats)]
    if names != have:
        raise ImportError(f"kvadmit: Stats does not match kva_stats: {have} != {names}")


_check_stats()
_BOUNDS = None


def histogram_bounds():
    """kva_histogram_bounds(): the buckets' upper bounds in ns (+Inf last, as None)."""
    global _BOUNDS
    if _BOUNDS is None:
        p = lib.kva_histogram_bounds()
        n = ffi.typeof("kva_histogram").fields[2][1].type.length
        _BOUNDS = tuple(p[i] for i in range(n - 1)) + (None,)
    return _BOUNDS


_FIELDS = ffi.typeof("kva_stats").fields
_PLAIN = tuple(name for name, f in _FIELDS if f.type.kind == "primitive")
_HISTS = tuple(name for name, f in _FIELDS if f.type.kind == "struct")
# arrays, as tuples (copies, not the C arrays)
_ARRAYS = ("admitted_by_priority", "tier_bytes_per_s", "tier_setup_ns")
_REASONS = tuple(_REASON.get(i, i) for i in range(ffi.typeof("kva_stats").fields[
    [n for n, _ in _FIELDS].index("fallbacks")][1].type.length))
_new_stats = object.__new__


def stats_from_c(s):
    """The Stats of a kva_stats. Built without the frozen dataclass's
    __init__ (one object.__setattr__ a field): the fields go into the
    instance dict at once, about twice as fast (python/README.md)."""
    values = {name: getattr(s, name) for name in _PLAIN}
    values["fallbacks"] = dict(zip(_REASONS, s.fallbacks))
    for name in _ARRAYS:
        values[name] = tuple(getattr(s, name))
    bounds = histogram_bounds()
    for name in _HISTS:
        v = getattr(s, name)
        values[name] = Histogram(v.count, v.sum_ns, tuple(v.buckets), bounds)
    st = _new_stats(Stats)
    st.__dict__.update(values)
    return st





def metrics_text(s, format):
    """kva_stats_format_as of the kva_stats `s` in `format`, as str."""
    try:
        fmt = int(format)
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
