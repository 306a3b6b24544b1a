# SPDX-License-Identifier: Apache-2.0
"""pytest setup: import the package from this source tree. The library comes
from $KVADMIT_LIBRARY (ctest sets it to the build's libkvadmit.so) or the
package's own search (kvadmit/_lib.py)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kvadmit  # noqa: E402

MS = 1_000_000


@pytest.fixture
def make_engine():
    made = []

    def make(**kw):
        kw.setdefault("total_pages", 1024)
        kw.setdefault("page_tokens", 16)
        kw.setdefault("copy_slots", 4)
        kw.setdefault("max_running", 64)
        e = kvadmit.Engine(**kw)
        made.append(e)
        return e
    yield make
    for e in made:
        e.close()


def step_until(engine, cond, now=0, limit=1000, on_plan=None):
    """Steps 1 ms at a time until cond(plan) is true; returns (plan, now)."""
    for _ in range(limit):
        now += MS
        plan = engine.step(now)
        if on_plan:
            on_plan(plan)
        if cond(plan):
            return plan, now
    raise AssertionError("condition not reached")
