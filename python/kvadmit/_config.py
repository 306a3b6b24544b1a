# SPDX-License-Identifier: Apache-2.0
"""Config (kva_config, with Python callables for its callbacks) and
plan_min_sizes."""
import dataclasses
import operator
from typing import Any, Callable, Mapping, Optional, Sequence

from ._errors import CONVERSION, arg_error, error
from ._lib import ffi, lib
from ._types import LogLevel, LogRecord, LookupToken, Order, PlanSizes, Policy

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
    credits_only: KVA_CONFIG_CREDITS_ONLY: kvadmit reserves, counts and
        orders pages but hands out no page ids; admissions, grow() and copy
        jobs say how many pages the host takes from its own pool (vLLM's
        BlockPool ...), and the host runs plan.copies into its own pages (no
        importers). flags: the raw kva_config.flags (credits_only ORs in).
    cost: kva_cost_config fields (Config.COST) that differ from
        kva_config_default's, for Policy.COST: {"page_bytes": 2**17,
        "tier_bytes_per_s": (3e9, ...)} (a tier field takes a sequence
        indexed by Tier).
    plan_sizes: the step's array sizes (PlanSizes); None: kva_plan_min_sizes,
        with at least 256 admissions, fallbacks and ended, 64 copy jobs a rank.
    """
    total_pages: int = _DEFAULTS.total_pages
    page_tokens: int = _DEFAULTS.page_tokens
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
    order: Order = Order(_DEFAULTS.order)
    preempt_threshold: int = _DEFAULTS.preempt_threshold
    aging_interval_ns: int = _DEFAULTS.aging_interval_ns
    lookup: Optional[Callable[[int, int, LookupToken], None]] = None
    log: Optional[Callable[[LogLevel, str], None]] = None
    log_record: Optional[Callable[[LogRecord], None]] = None
    log_to_logging: bool = True
    wake: Optional[Callable[[], None]] = None
    importers: Sequence[Any] = ()
    plan_sizes: Optional[PlanSizes] = None
    flags: int = _DEFAULTS.flags
    credits_only: bool = False
    cost: Optional[Mapping[str, Any]] = None

    # the kva_config fields set from the numeric attributes above
    NUMERIC = ("total_pages", "page_tokens", "decode_reserve_pages", "decode_headroom_pages",
               "prefill_chunk_tokens", "copy_slots", "max_running", "world_size",
               "max_copy_retries", "lookup_timeout_ns", "max_restore_wait_ns",
               "wait_log_interval_ns", "lookup_refresh_ns", "policy", "start_ns",
               "log_level", "flags", "order", "preempt_threshold",
               "aging_interval_ns")
    # kva_config.cost's fields (Config.cost's keys)
    COST = ("page_bytes", "prefill_tokens_per_s", "tier_bytes_per_s", "tier_setup_ns",
            "half_life", "margin_pct", "prefill_attn_ps")

    def to_c(self):
        """A kva_config with the numeric fields (callbacks NULL). A field of
        the wrong type raises InvalidType, one outside its range (kvadmit.h)
        InvalidRange or InvalidArgument, naming the field."""
        c = ffi.new("kva_config *")
        lib.kva_config_default(c)
        for name in self.NUMERIC:
            v = getattr(self, name)
            try:
                setattr(c, name, operator.index(v))  # not int(): "5" and 2.5 are no ints
            except CONVERSION as exc:
                raise arg_error(f"kva_config.{name}", exc) from exc
        if self.credits_only:
            c.flags |= lib.KVA_CONFIG_CREDITS_ONLY
        for name, v in (self.cost or {}).items():
            if name not in self.COST:
                raise error(-22, f"kva_config.cost.{name}: no such field")
            try:
                if name.startswith("tier_"):
                    row = getattr(c.cost, name)
                    if len(v) != len(row):
                        raise error(-22, f"kva_config.cost.{name}: {len(row)} values, one a Tier")
                    for t, x in enumerate(v):
                        row[t] = operator.index(x) if not isinstance(x, float) else int(x)
                else:
                    setattr(c.cost, name, operator.index(v))
            except CONVERSION as exc:
                raise arg_error(f"kva_config.cost.{name}", exc) from exc
        problem = _config_problem(c)
        if problem:
            raise error(-22, f"kva_config.{problem}")
        return c


def _config_problem(c):
    """kva_engine_create's checks (engine.c config_check), naming the field:
    the first one c fails, or None."""
    for name in ("total_pages", "page_tokens", "prefill_chunk_tokens", "copy_slots",
                 "max_running", "world_size"):
        if getattr(c, name) == 0:
            return f"{name}: 0, must be at least 1"
    if c.world_size > len(c.importers):
        return f"world_size: {c.world_size} > {len(c.importers)} (KVA_MAX_WORLD)"
    if c.decode_reserve_pages >= c.total_pages:
        return (f"decode_reserve_pages: {c.decode_reserve_pages}, must be below total_pages "
                f"({c.total_pages})")
    if c.decode_headroom_pages > c.total_pages:
        return (f"decode_headroom_pages: {c.decode_headroom_pages} > total_pages "
                f"({c.total_pages})")
    if c.policy not in (int(Policy.WAIT), int(Policy.LEGACY), int(Policy.COST)):
        return f"policy: {c.policy}, not a Policy"
    if c.policy == int(Policy.COST):
        k = c.cost
        for name in ("page_bytes", "prefill_tokens_per_s", "half_life"):
            if getattr(k, name) == 0:
                return f"cost.{name}: 0, must be at least 1 with Policy.COST"
        if k.half_life > 65535:
            return f"cost.half_life: {k.half_life} > 65535"
        if k.margin_pct > 1000:
            return f"cost.margin_pct: {k.margin_pct} > 1000"
        if 0 in list(k.tier_bytes_per_s):
            return "cost.tier_bytes_per_s: a 0, each must be at least 1 with Policy.COST"
    if not int(LogLevel.DEBUG) <= c.log_level <= int(LogLevel.ERROR):
        return f"log_level: {c.log_level}, not a LogLevel"
    if c.flags & ~lib.KVA_CONFIG_CREDITS_ONLY:
        return f"flags: {c.flags:#x} has unknown bits"
    return None


def plan_min_sizes(config):
    """kva_plan_min_sizes: array sizes with which every step makes progress."""
    out = ffi.new("kva_plan_sizes *")
    rc = lib.kva_plan_min_sizes(config.to_c(), out)
    if rc < 0:
        raise error(rc, "kva_plan_min_sizes")
    return PlanSizes(out.admitted, out.pages, out.copies, out.fallbacks, out.ended)

