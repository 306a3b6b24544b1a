#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/report.py on a filtered run: it prints the rows it has, exits 0
and leaves the README, the plots and the published JSON untouched."""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.normpath(os.path.join(here, "..", ".."))
report = os.path.join(top, "bench", "report.py")

with open(os.path.join(top, "docs", "bench", "results.json")) as f:
    doc = json.load(f)
doc["benchmarks"] = [b for b in doc["benchmarks"] if b["name"].startswith("BM_step_blocked/")]
assert doc["benchmarks"], "the committed results hold BM_step_blocked rows"

with tempfile.TemporaryDirectory() as tmp:
    subset = os.path.join(tmp, "subset.json")
    with open(subset, "w") as f:
        json.dump(doc, f)
    readme = os.path.join(tmp, "README.md")
    text = "# bench\n<!-- results:begin (bench/report.py writes this part) -->\nold\n<!-- results:end -->\n"
    with open(readme, "w") as f:
        f.write(text)
    published = os.path.join(tmp, "published", "results.json")
    plots = os.path.join(tmp, "plots")
    r = subprocess.run([sys.executable, report, subset, "--readme", readme, "--plots", plots,
                        "--publish", published], capture_output=True, text=True)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert "BM_step_blocked" in r.stdout or "step" in r.stdout, r.stdout
    assert "a subset run" in r.stderr, r.stderr
    with open(readme) as f:
        assert f.read() == text, "a subset run rewrote the README"
    assert not os.path.exists(published), "a subset run published its JSON"
    assert not os.path.exists(plots), "a subset run drew plots"

    # A subset never opens the README: one without markers (an error, status
    # 1, for a complete run) passes untouched.
    bad = os.path.join(tmp, "bad.md")
    with open(bad, "w") as f:
        f.write("no markers\n")
    r = subprocess.run([sys.executable, report, subset, "--readme", bad],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
print("test_report_subset: ok")
