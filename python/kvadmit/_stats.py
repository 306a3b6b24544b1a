# SPDX-License-Identifier: Apache-2.0
"""Stats (kva_stats as a frozen dataclass built from the C declaration),
histogram_bounds, and the metrics text (kva_stats_format_as)."""
import dataclasses

from ._errors import CONVERSION, KvadmitError, arg_error, error
from ._lib import ffi, lib
from ._types import _REASON, Histogram


def _make_stats_class():
    fields = []
    for name, f in ffi.typeof("kva_stats").fields:
        if f.type.kind == "array" and f.type.item.cname == "uint64_t" and name == "fallbacks":
            fields.append((name, dict))
        elif f.type.kind == "struct":
            fields.append((name, Histogram))
        elif f.type.kind == "array":
            fields.append((name, tuple))
        else:
            fields.append((name, int))
    cls = dataclasses.make_dataclass("Stats", fields, frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = ("kva_stats (fields in kvadmit.h order). fallbacks: {Reason: count}; "
                   "histograms: Histogram.")
    return cls


Stats = _make_stats_class()
_BOUNDS = None


def histogram_bounds():
    """kva_histogram_bounds(): the buckets' upper bounds in ns (+Inf last, as None)."""
    global _BOUNDS
    if _BOUNDS is None:
        p = lib.kva_histogram_bounds()
        n = ffi.typeof("kva_histogram").fields[2][1].type.length
        _BOUNDS = tuple(p[i] for i in range(n - 1)) + (None,)
    return _BOUNDS


def stats_from_c(s):
    """The Stats of a kva_stats."""
    values = {}
    bounds = histogram_bounds()
    for name, f in ffi.typeof("kva_stats").fields:
        v = getattr(s, name)
        if name == "fallbacks":
            values[name] = {_REASON.get(i, i): v[i] for i in range(len(v))}
        elif f.type.kind == "struct":
            values[name] = Histogram(v.count, v.sum_ns, tuple(v.buckets), bounds)
        elif f.type.kind == "array":
            values[name] = tuple(v)  # admitted_by_priority: a copy, not the C array
        else:
            values[name] = v
    return Stats(**values)





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
