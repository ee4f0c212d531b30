"""The work of this process's next cases, run on a few threads while the case before them runs.

One GPU time-slices the processes that drive it, but the threads of one process share its CUDA
context, so their kernels overlap: one process served 64, 103 and 176 reject cases a second with 1,
2 and 4 threads (benchmarks/RESULTS.md, 2026-12-07). A family of GPU cases (the 614 reject cases,
one fresh context and one trace each; test-backend-ops' four groups, one child process each) asks
here for its evidence:

    palw_session.lookahead.take(item, key_of, job, *arguments)   # job(*arguments, *key_of(item))

With threads, the first ask starts the job of ``item`` and those of the cases that follow it in this
process's queue (xdist's pending cases in a worker, the collection otherwise) while they are of the
family (``key_of`` is not None), at most ``window`` ahead, then waits for ``item``'s. The next case's
ask finds its job done or running and tops the window up. Without threads (``--palw-lookahead
0``) the job runs in the case, as its own call.

A job gets the arguments its case's fixtures gave it (session-wide values: the model, the caller
factory, the token) and its key; it reads nothing of another case. Its value reaches the case's body
as a fixture's does, and the body's assertions judge it; its exception is raised in that case. A job
started for a case that xdist then hands to another worker is dropped there, unjudged: that worker
runs the case's own.

Only family cases run beside jobs: before any other case starts (``settle``), the jobs in flight
are waited for, since a case may set the environment a context is created with (GGML_SCHED_DEBUG) or
capture the llama log. Jobs not started when the cases end are dropped (``stop``).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable

import pytest

# how many cases ahead of the running one, per thread: enough that no thread waits for the next ask
WINDOW_PER_THREAD = 2


class Lookahead:
    def __init__(self, threads: int):
        if threads < 0:
            raise ValueError("Lookahead needs 0 or more threads")
        self.threads = threads
        self.window = WINDOW_PER_THREAD * threads
        self._jobs: dict[str, Future] = {}  # case nodeid -> its job
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def take(self, item, key_of: Callable[[object], tuple | None], job: Callable, *arguments):
        """``job(*arguments, *key_of(item))`` for ``item``, run ahead where threads are given (the
        module docstring); its exception is raised here."""
        key = key_of(item)
        if key is None:
            raise ValueError(f"{item.nodeid} is not of the family it asks for")
        if self.threads == 0:
            return job(*arguments, *key)
        with self._lock:
            future = self._jobs.pop(item.nodeid, None)
            if future is None:
                future = self._submit(job, arguments, key)
            for following in upcoming(item, self.window):
                following_key = key_of(following)
                if following_key is None:
                    break
                if following.nodeid not in self._jobs:
                    self._jobs[following.nodeid] = self._submit(job, arguments, following_key)
        return future.result()

    def _submit(self, job: Callable, arguments: tuple, key: tuple) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="palw-lookahead")
        return self._pool.submit(job, *arguments, *key)

    def settle(self, item) -> None:
        """Before ``item`` starts: unless a job was started for it, wait for every job in flight."""
        with self._lock:
            if item.nodeid in self._jobs:
                return
            running = [future for future in self._jobs.values() if not future.done()]
        wait(running)

    def stop(self) -> None:
        """Drop the jobs not started, wait for those running."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._jobs.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def upcoming(item, count: int) -> list:
    """Up to ``count`` cases this process runs after ``item``, in order: a worker's pending cases in
    xdist's queue (none where that queue cannot be read: an xdist of another design), else the
    collection after ``item``."""
    if count <= 0:
        return []
    session = item.session
    if not hasattr(item.config, "workerinput"):
        position = _positions(session).get(item.nodeid)
        return [] if position is None else session.items[position + 1:position + 1 + count]
    interactor = _xdist_worker(item.config)
    if interactor is None:
        return []
    indices: list[int] = []
    following = getattr(interactor, "nextitem_index", None)
    if isinstance(following, int):
        indices.append(following)
    with interactor.torun.lock() as queue:
        for index in queue:
            if len(indices) >= count:
                break
            if isinstance(index, int):
                indices.append(index)
    return [session.items[index] for index in indices[:count]]


def _xdist_worker(config):
    """xdist's WorkerInteractor of this worker (registered unnamed) with a queue this module reads
    (xdist >= 3.6: ``torun.lock()`` and ``nextitem_index``), or None."""
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor" and hasattr(getattr(plugin, "torun", None), "lock") \
                and hasattr(plugin, "nextitem_index"):
            return plugin
    return None


_POSITIONS = pytest.StashKey[dict]()  # nodeid -> index in session.items


def _positions(session) -> dict[str, int]:
    positions = session.stash.get(_POSITIONS, None)
    if positions is None or len(positions) != len(session.items):
        positions = session.stash[_POSITIONS] = {item.nodeid: i for i, item in enumerate(session.items)}
    return positions
