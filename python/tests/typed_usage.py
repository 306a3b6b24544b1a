# SPDX-License-Identifier: Apache-2.0
"""A typed host, for mypy only (ctest -R python_mypy; python/mypy.ini): what
a type checker must see through the package's inline types (py.typed).
Each `type: ignore[code]` marks a mistake mypy must catch: with
warn_unused_ignores, an ignore that is not needed (the type unseen, Any)
fails the check, so this file fails if the types go missing."""
from typing import List, Optional

import kvadmit
from kvadmit import How, Plan, Reason, State, Stats


def host(e: kvadmit.Engine, now: int, budget: Optional[int]) -> List[kvadmit.Handle]:
    h: kvadmit.Handle = e.submit(1, 100, prefix_key=7, user=3)
    serial: int = h.engine
    plan: Plan = e.step(now, token_budget=budget)
    restored = [a.handle for a in plan.admissions if a.how is How.RESTORE]
    s: Stats = e.stats()
    waiting: int = s.waiting + s.running + serial
    misses: int = s.fallbacks[Reason.MISS]
    info = e.query(h)
    assert info.state is State.RUNNING and waiting >= misses
    # mistakes mypy must catch
    e.step("now")  # type: ignore[arg-type]
    name: int = How.RESTORE.name  # type: ignore[assignment]
    s.no_such_counter  # type: ignore[attr-defined]
    e.submit(2, 100, user="x")  # type: ignore[arg-type]
    How.NO_SUCH  # type: ignore[attr-defined]
    return restored
