# SPDX-License-Identifier: Apache-2.0
"""kvadmit for Python: the admission engine of include/kvadmit/kvadmit.h over
libkvadmit (cffi, ABI mode). See python/README.md.

    import kvadmit
    with kvadmit.Engine(total_pages=1024, page_tokens=16, max_running=64) as eng:
        h = eng.submit(id=1, prompt_tokens=300, prefix_key=42)
        plan = eng.step(now_ns)
"""
from ._lib import ABI_MAJOR, ABI_MINOR, library_path
from ._errors import (AlreadyDone, Busy, InvalidArgument, InvalidRange, InvalidType, KvadmitError,
                      NoDevice, NoSpace, NotFound, NotSupported, OutOfMemory, OutOfRange, Stale,
                      TimedOut, TryAgain, strerror)
from ._types import (Admission, Checkpoint, CopyJob, CopyToken, Ended, Fallback, Feature, Handle,
                     Histogram, How, Location, LogEvent, LogLevel, LogRecord, LookupToken,
                     MetricsFormat, Order, PlanSizes, Policy, Reason, RequestInfo, State, Tier,
                     WaitingInfo)
from ._config import Config, plan_min_sizes
from ._stats import Stats, histogram_bounds
from ._plan import Plan
from ._engine import Engine
from ._process import (cuda_importer_supported, has_feature, reason_name, register_at_fork,
                       version, version_string)
from ._importer import CpuImporter, ImporterStats
from ._fleet import Fleet, FleetMatch, hash_bytes, vllm_block_hashes

__version__ = version_string()

__all__ = [
    "ABI_MAJOR", "ABI_MINOR", "library_path", "Admission", "AlreadyDone", "Busy", "Checkpoint",
    "CopyJob", "CopyToken", "Ended", "Fallback", "Feature", "Handle", "Histogram", "How",
    "InvalidArgument", "InvalidRange", "InvalidType", "KvadmitError", "Location", "LogEvent",
    "LogLevel", "LogRecord",
    "LookupToken", "MetricsFormat", "NoDevice", "NoSpace", "NotFound", "NotSupported",
    "OutOfMemory", "OutOfRange", "Order", "PlanSizes", "Policy", "Reason", "RequestInfo", "Stale",
    "State", "Tier", "TimedOut", "TryAgain", "WaitingInfo", "strerror", "Config", "Engine", "Plan",
    "Stats",
    "cuda_importer_supported", "has_feature", "histogram_bounds", "plan_min_sizes",
    "reason_name", "register_at_fork", "version", "version_string", "CpuImporter",
    "ImporterStats", "Fleet", "FleetMatch", "hash_bytes", "vllm_block_hashes",
]
