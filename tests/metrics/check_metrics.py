#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Parses kvadmit's metrics (written by metrics_dump) with the Prometheus client
library's parsers, Prometheus text and OpenMetrics, and fails on any error or on a
kva_stats field missing from the text. Exit 77 (skipped) without the library."""
import math
import re
import subprocess
import sys
import tempfile

try:
    from prometheus_client.parser import text_string_to_metric_families as parse_prom
    from prometheus_client.openmetrics.parser import \
        text_string_to_metric_families as parse_om
except ImportError:
    print("python3-prometheus-client is not installed", file=sys.stderr)
    sys.exit(77)


CANONICAL = re.compile(r"(0|[1-9][0-9]*)\.([0-9]*[1-9]|0)")


def families(parse, text):
    fams = list(parse(text))  # raises on any syntax or semantic error
    names = [f.name for f in fams]
    assert len(names) == len(set(names)), "a family appears twice"
    return fams


def check_run(prom, om):
    for fams in (families(parse_prom, prom), families(parse_om, om)):
        by = {f.name: f for f in fams}
        info = by.get("kvadmit_build")  # OpenMetrics strips _info for info/gauge? keep both
        info = info or by.get("kvadmit_build_info")
        assert info is not None, "kvadmit_build_info missing"
        for f in fams:
            assert f.documentation, f"{f.name}: no HELP"
            if f.type == "counter":
                for s in f.samples:
                    assert s.name.endswith(("_total", "_created")), s.name
            if f.type == "gauge":
                assert not f.name.endswith("_total"), f"gauge {f.name} named like a counter"
            if f.type == "histogram":
                buckets = [s for s in f.samples if s.name.endswith("_bucket")]
                counts = [s.value for s in buckets]
                assert counts == sorted(counts), f"{f.name}: buckets not cumulative"
                assert math.isinf(float(buckets[-1].labels["le"])), f.name
                # le is matched as a string: OpenMetrics' canonical numbers
                # ("0.01", "1.0"), one text per bound
                for s in buckets[:-1]:
                    assert CANONICAL.fullmatch(s.labels["le"]), f"{f.name}: le={s.labels['le']}"
        hists = [f for f in fams if f.type == "histogram"]
        assert len(hists) == 4, [f.name for f in hists]
        assert any(s.value > 0 for f in hists for s in f.samples if s.name.endswith("_count"))
    assert om.endswith("# EOF\n")


def check_fields(prom, om, expected):
    for parse, text in ((parse_prom, prom), (parse_om, om)):
        values = {s.value for f in families(parse, text) for s in f.samples}
        missing = [v for v in expected if v not in values and v / 1e9 not in values]
        assert not missing, f"kva_stats fields not exported: values {missing}"


def main():
    dump = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([dump, d], check=True)
        read = lambda n: open(f"{d}/{n}").read()
        check_run(read("run.prom"), read("run.om"))
        expected = [float(x) for x in read("fields.txt").split()]
        check_fields(read("fields.prom"), read("fields.om"), expected)
        print(read("run.prom").splitlines()[0])
    print(f"metrics: both formats parse; all {len(expected)} kva_stats values exported")


if __name__ == "__main__":
    main()
