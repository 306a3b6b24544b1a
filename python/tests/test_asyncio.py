# SPDX-License-Identifier: Apache-2.0
"""python/README.md's asyncio recipe, run as it stands there: the engine's
wake hands an asyncio.Event.set to the loop with call_soon_threadsafe, from
worker threads and from the loop's own thread, and the scheduler coroutine
sleeps on it (it would never wake if the handoff were wrong)."""
import asyncio
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def recipe():
    with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- asyncio-recipe:begin -->\n```python\n(.*?)```\n"
                  r"<!-- asyncio-recipe:end -->", text, re.S)
    assert m, "python/README.md: the asyncio recipe block is gone"
    ns = {}
    exec(compile(m.group(1), "python/README.md (asyncio recipe)", "exec"), ns)
    return ns["serve"]


def test_asyncio_recipe_wakes_the_loop_from_worker_threads():
    serve = recipe()
    reqs = [(i, 64) for i in range(1, 201)]
    steps = asyncio.run(asyncio.wait_for(serve(reqs), 60))
    # woken per submit at most (each wakes only when the inbox was empty):
    # the scheduler slept between them instead of polling
    assert 1 <= steps <= 2 * len(reqs)


def test_asyncio_recipe_wakes_the_loop_from_its_own_thread():
    serve = recipe()
    reqs = [(i, 64) for i in range(1, 51)]
    steps = asyncio.run(asyncio.wait_for(serve(reqs, submit_from_threads=False), 60))
    assert 1 <= steps <= 2 * len(reqs)
