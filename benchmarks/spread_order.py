"""A timing experiment, not part of the suite: reorder the collection so that xdist's worksteal
hands each worker an equal share of the case-seconds of an earlier run, longest first.

    PYTHONPATH=benchmarks SPREAD_FROM=certificate.json [SPREAD_ORDER=longest|interleave] \
        palw certify --model profile:full -n 8 -- -p spread_order

worksteal gives worker i the i-th contiguous 1/n of the collection, then moves work by stealing
from the tail. A module of long cases (test-backend-ops' four groups) lands whole on one worker.
Here the items are dealt into n chunks of equal count, each to the chunk with the fewest
case-seconds so far (longest item first), and the chunks are concatenated. `longest`: each chunk
runs its long cases first; `interleave`: each chunk alternates its longest and shortest cases.
A plugin outside the suite: `palw certify` names it in the verdict, so such a run is never
CERTIFIED; it is for the wall time only.
"""

from __future__ import annotations

import json
import os

import pytest


def _durations(path: str) -> dict[str, float]:
    with open(path) as handle:
        document = json.load(handle)
    return {case["nodeid"]: float(case.get("duration_s") or 0.0) for case in document.get("cases", [])}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    source = os.environ.get("SPREAD_FROM")
    workerinput = getattr(config, "workerinput", None)
    workers = int(workerinput["workercount"]) if workerinput else int(os.environ.get("SPREAD_WORKERS", "1"))
    if not source or workers < 2 or not items:
        return
    cost = _durations(source)
    order = sorted(range(len(items)), key=lambda i: (-cost.get(items[i].nodeid, 0.0), i))
    capacity, left = [], len(items)  # worksteal's first split: len(pending) // nodes_remaining each
    for k in range(workers):
        capacity.append(left // (workers - k))
        left -= capacity[-1]
    chunks: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for i in order:
        k = min((k for k in range(workers) if len(chunks[k]) < capacity[k]), key=lambda k: (load[k], k))
        chunks[k].append(i)
        load[k] += cost.get(items[i].nodeid, 0.0)
    if os.environ.get("SPREAD_ORDER", "longest") == "interleave":
        chunks = [[chunk[j // 2] if j % 2 == 0 else chunk[-1 - j // 2] for j in range(len(chunk))]
                  for chunk in chunks]
    items[:] = [items[i] for chunk in chunks for i in chunk]
