"""Work that a module's cases wait for, started when the run's first case starts, beside the cases.

Some cases judge what a child process printed (the seed's observer). Each child costs its case most of
its seconds waiting, one core idle. ``@ahead`` turns such a job into a
module-scoped fixture whose work this process starts for every selected case that will use it, all at
once when the cases start (``AheadJobs.start``), on a pool of one thread per core; the case then
waits only for what is not done by the time it runs.

    @ahead                                     # the fixture's value: job(palw_session)
    def report(palw_session): ...

    @ahead(keys=lambda item: [item.callspec.params["name"]], prepare=model_of)
    def run(palw_session, name, model): ...     # the fixture's value: a function of a key;
                                                # model = model_of(palw_session, name)

A job gets only the session (and its key): it runs outside the case, so it reads nothing of a case's
fixtures; what it needs of the session (the build, the model, the runtime) is resolved in this thread
before any job starts, and its ``prepare(palw_session[, key])`` runs in this thread before the job is
submitted, its value handed to the job as its last argument: what the job needs from the disk caches
(a model generated on a cold cache starts processes of its own, which must not exec while a case
changes the environment). It states nothing itself: its
value reaches a case's body as a fixture's does, and the body's assertions judge it. An exception in
a job or its prepare is raised where a case asks for the value; a PalwError there stops the session
in one line (errors.or_exit; a worker hands the line to the controller).

A job starts its children with ``palw_session.ahead.run`` (subprocess.run with the environment as it
was when the jobs started). The cases change ``os.environ`` while jobs run (GGML_SCHED_DEBUG around
a context's creation), and a child that inherits the environment reads the parent's while it
execs (subprocess's vfork): a child started as the array is reallocated fails with EFAULT ("Bad
address"), one started while a case's variable is set would inherit it.

Started ahead only outside xdist's workers (a worker does not know which cases it will get) and not
for a run that executes no fixture (--collect-only, --setup-plan); there, and for a case whose
job was not started, the job starts when the fixture is asked for. Jobs left running when the cases
end (-x, --maxfail) are waited for, jobs not started are dropped.
"""

from __future__ import annotations

import os
import subprocess
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable

import pytest

from pytest_palw.errors import or_exit

# fixture name -> (job, keys, prepare); one job per name across the suite
JOBS: dict[str, tuple[Callable, Callable | None, Callable | None]] = {}


def ahead(job: Callable | None = None, *, keys: Callable[[object], Iterable] | None = None,
          prepare: Callable | None = None):
    """Decorator: the module-scoped fixture named after ``job`` (see the module docstring); with
    ``keys``, one job per key, and ``keys(item)`` the keys a case will ask for; ``prepare``, called
    with the job's arguments in the cases' thread before the job is submitted, its value the job's
    last argument."""
    def register(job: Callable):
        name = job.__name__
        held = JOBS.get(name)
        if held is not None and _origin(held[0]) != _origin(job):
            raise TypeError(f"two @ahead jobs are named {name!r} ({_origin(held[0])}, {_origin(job)}): rename one")
        JOBS.setdefault(name, (job, keys, prepare))  # the same file imported again (the inventory) adds none

        @pytest.fixture(scope="module", name=name)
        def fixture(palw_session):
            jobs = palw_session.ahead
            if keys is None:
                return jobs.result(name, None)
            return lambda value: jobs.result(name, value)

        fixture.__doc__ = job.__doc__
        return fixture

    return register if job is None else register(job)


def _origin(job: Callable) -> str:
    code = getattr(job, "__code__", None)
    return f"{code.co_filename if code else job.__module__}::{job.__qualname__}"


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class AheadJobs:
    """This process's started jobs: (fixture name, key's type, key) -> Future (keys of equal value and
    other types, 1 and True, are other jobs)."""

    def __init__(self, session):
        self.session = session
        self.futures: dict[tuple[str, type, object], Future] = {}
        self.lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None
        # os.environ as the jobs started (start), or as the first job was asked for in this thread (a
        # worker: after its configure set the worker's CUDA_VISIBLE_DEVICES)
        self.environment: dict[str, str] | None = None

    def run(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        """subprocess.run for a job's child: its own copy of the environment the jobs started with."""
        return subprocess.run(args, env=dict(os.environ if self.environment is None else self.environment),
                              **kwargs)

    def submit(self, name: str, value) -> Future:
        with self.lock:
            future = self.futures.get((name, type(value), value))
            if future is None:
                if self.environment is None:
                    self.environment = dict(os.environ)
                if self.pool is None:
                    self.pool = ThreadPoolExecutor(cores(), thread_name_prefix="palw-ahead")
                job, _, prepare = JOBS[name]
                arguments = (self.session,) if value is None else (self.session, value)
                if prepare is not None:
                    arguments += (prepare(*arguments),)
                future = self.futures[(name, type(value), value)] = self.pool.submit(job, *arguments)
            return future

    def result(self, name: str, value):
        """The job's value, or its exception; a PalwError (the user's environment: a read-only or full
        cache) stops the session with its one line and exit code, as palw_runtime's does."""
        return or_exit(lambda: self.submit(name, value).result())

    def start(self, items) -> int:
        """Start the job of every @ahead fixture a selected case of a runnable tier will use, in the
        order the cases come; the number started. Anything that stops the start (the build cannot be
        resolved here) starts nothing: the cases ask, and get the error in their own report."""
        wanted = []
        for item in items:
            names = [name for name in getattr(item, "fixturenames", ()) if name in JOBS]
            if not names:
                continue
            try:
                if self._tier_skip_reason(item) is not None:
                    continue
                for name in names:
                    keys = JOBS[name][1]
                    wanted += [(name, None)] if keys is None else [(name, value) for value in keys(item)]
            except Exception:  # noqa: BLE001 - a case reports it in its own setup
                return 0
        if not wanted:
            return 0
        try:
            self.session.build  # noqa: B018 - resolved once, in this thread, before any job reads it
            self.session.resolved_model  # noqa: B018
            # Loaded here, before any job starts a process: loading sets LLAMA_CPP_LIB_PATH, and a
            # child a job starts otherwise than through run() (a model generator's worker) inherits
            # the environment as it execs.
            self.session.runtime  # noqa: B018
        except Exception:  # noqa: BLE001
            return 0
        self.environment = dict(os.environ)
        started = 0
        for name, value in dict.fromkeys(wanted):
            try:
                self.submit(name, value)
                started += 1
            except Exception:  # noqa: BLE001 - its prepare failed: the case asks again and reports it
                continue
        return started

    def _tier_skip_reason(self, item) -> str | None:
        from pytest_palw.tiers import tier_of

        tier = tier_of(item.keywords)
        return None if tier is None else self.session.tier_skip_reason(tier)

    def stop(self) -> None:
        """Drop the jobs not started, wait for those running."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
