"""A timing experiment, not part of the suite: the reject cases in dedicated xdist workers.

    PYTHONPATH=benchmarks LANE_NODES=2 palw certify --model profile:full -n 8 -- -p lanes

On one GPU, the processes' CUDA contexts are time-sliced: a reject case takes ~14 ms in a process
alone and ~120 ms in a warm `-n 8` run, where all eight workers reach the 614 reject cases at once
and share the GPU with the seed tools and test-backend-ops. Here xdist's worksteal is replaced by a
scheduler with two lanes: the first ``LANE_NODES`` workers get the cases of the functions named in
``LANE_FUNCS`` (default: the reject families), the others everything else; a worker whose lane is
empty takes from the other, and stealing still evens out the tail. ``LANE_STRICT=1``: a worker
never takes the other lane's cases (it steals only from its own lane), so the lane workers alone
run the reject cases. ``LANE_NODES=0``: plain worksteal with the slot timing below.

``SLOT_TIMES=DIR``: every process writes its GPU-slot waits and holds (``--palw-gpu-slots``) to
``DIR/<worker>.json``, so a run says how long its cases waited for a slot and held one.

A plugin outside the suite: `palw certify` names it in the verdict, so such a run is never
CERTIFIED; it is for the wall time only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pytest_palw.preflight import gpu_share

FUNCS = set(filter(None, os.environ.get("LANE_FUNCS", "test_reject_v2,test_reject_v1").split(",")))
STRICT = os.environ.get("LANE_STRICT") == "1"
_times: dict[str, list[float]] = {"wait": [], "hold": []}
_held_since: list[float] = []
_take, _release = gpu_share.GpuSlots._take, gpu_share.GpuSlots.release


def _timed_take(self):
    start = time.perf_counter()
    try:
        return _take(self)
    finally:
        now = time.perf_counter()
        _times["wait"].append(now - start)
        _held_since[:] = [now]


def _timed_release(self):
    _release(self)
    if not self._holders and _held_since:
        _times["hold"].append(time.perf_counter() - _held_since.pop())


if os.environ.get("SLOT_TIMES"):
    gpu_share.GpuSlots._take, gpu_share.GpuSlots.release = _timed_take, _timed_release


def pytest_sessionfinish(session):
    directory = os.environ.get("SLOT_TIMES")
    if not directory:
        return
    workerinput = getattr(session.config, "workerinput", None)
    name = workerinput["workerid"] if workerinput else "main"
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / f"{name}.json").write_text(json.dumps(_times))


def _lane(nodeid: str) -> bool:
    function = nodeid.split("::")[-1].split("[")[0]
    return function in FUNCS


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    count = int(os.environ.get("LANE_NODES", "2"))
    if count <= 0:
        return None
    from xdist.scheduler.worksteal import MIN_PENDING, WorkStealingScheduling

    class LaneScheduling(WorkStealingScheduling):
        lane_nodes: list = []

        def add_node(self, node):
            super().add_node(node)
            if len(self.lane_nodes) < count:
                self.lane_nodes = [*self.lane_nodes, node]

        def check_schedule(self):
            up = {node: pending for node, pending in self.node2pending.items() if not node.shutting_down}
            strict = STRICT and any(node in up for node in self.lane_nodes)  # no lane worker left: share

            def idle():
                return [node for node, pending in up.items() if len(pending) < MIN_PENDING]

            if not idle():
                return
            if self.pending and self.collection is not None:
                lanes = {True: [i for i in self.pending if _lane(self.collection[i])]}
                lanes[False] = [i for i in self.pending if i not in set(lanes[True])]
                for lane in (True, False):
                    nodes = [node for node in idle() if (node in self.lane_nodes) == lane]
                    for k, node in enumerate(nodes):
                        pool = lanes[lane] if strict else lanes[lane] or lanes[not lane]
                        share = pool[: max(1, len(pool) // (len(nodes) - k))] if pool else []
                        self._send_indices(node, share)
                        chosen = set(share)
                        lanes = {key: [i for i in value if i not in chosen] for key, value in lanes.items()}
                if not idle():
                    return
                if not strict:
                    return
            if not strict:
                if not self.pending:
                    super().check_schedule()  # nothing pending: steal from the longest queue
                return
            if self.steal_requested_from_node is not None:
                return
            for lane in (True, False):  # strict: a worker steals only from its own lane
                waiting = [node for node in idle() if (node in self.lane_nodes) == lane]
                if not waiting:
                    continue
                peers = [(node, pending) for node, pending in up.items() if (node in self.lane_nodes) == lane]
                donor, queue = max(peers, key=lambda peer: len(peer[1]))
                steal = min(len(queue) // 2, max(0, len(queue) - MIN_PENDING))
                if steal:
                    donor.send_steal(queue[-steal:])
                    self.steal_requested_from_node = donor
                    return
                if not any(_lane(self.collection[i]) == lane for i in self.pending):
                    for node in waiting:
                        node.shutdown()

        def _send_indices(self, node, indices):
            if not indices:
                return
            chosen = set(indices)
            self.pending[:] = [i for i in self.pending if i not in chosen]
            self.node2pending[node].extend(indices)
            node.send_runtest_some(indices)

    return LaneScheduling(config, log)
