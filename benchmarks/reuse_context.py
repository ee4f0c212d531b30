"""A timing experiment, not part of the suite: the reject cases on one context per process.

    PYTHONPATH=benchmarks palw certify --model profile:full -n 8 -- -p reuse_context

Today every reject case (`test_reject_index.py`'s test_reject_v2 / test_reject_v1) creates a llama
context with the pinned policy and frees it (`palw_context`): one process alone spends about as
long creating and freeing it as tracing up to the refused launch (`benchmarks/bench_decode.py`).
Here the first reject case of a process creates its context and the following ones get that same
context, its memory cleared before each (`llama_memory_clear`), as `bench_decode.py`'s
`reused_context` measures it for one process. The GPU slot (`--palw-gpu-slots`) is still taken for
each case and given back after it, so the slots keep meaning "this process is doing GPU work now".
The context is freed for real before the first case of another function and before the session's
fixtures end. `REUSE_CASES` (comma-separated function names) names other functions, to check the
mechanics on a CPU build.

It changes what the reject cases run on (a context that has refused traces before, not a fresh
one), so it measures the wall time of that claim change before anyone makes it. A plugin outside the
suite: `palw certify` names it in the verdict, so such a run is never CERTIFIED.
"""

from __future__ import annotations

import os

import pytest

from pytest_palw.runtime import library

CASES = set(filter(None, os.environ.get("REUSE_CASES", "test_reject_v2,test_reject_v1").split(",")))
_original_context, _original_free = library.Model.context, library.Context.free
_state: dict = {"active": False, "context": None, "created": 0, "reused": 0}


def _context(self, eval_owner=None, **overrides):
    if not _state["active"] or eval_owner is not None or overrides:
        return _original_context(self, eval_owner, **overrides)
    held = _state["context"]
    if held is not None and held.model is self and held.pointer:
        if held._slots is not None:
            held._slots.acquire()
        llama = self.runtime.llama
        llama.llama_memory_clear(llama.llama_get_memory(held.pointer), True)
        _state["reused"] += 1
        return held
    _drop()
    held = _state["context"] = _original_context(self)  # takes the slot
    _state["created"] += 1
    return held


def _free(self):
    if self is _state["context"] and self.pointer:
        if self._slots is not None:
            self._slots.release()  # the context stays, its slot goes back
        return
    _original_free(self)


def _drop():
    held, _state["context"] = _state["context"], None
    if held is not None and held.pointer:
        if held._slots is not None:
            held._slots.acquire()  # held once more, so that the real free gives back exactly one
        _original_free(held)


def pytest_configure(config):
    library.Model.context, library.Context.free = _context, _free


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _state["active"] = getattr(item, "originalname", None) in CASES
    try:
        return (yield)
    finally:
        _state["active"] = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or getattr(nextitem, "originalname", None) not in CASES:
        _drop()  # before the session's fixtures (the model) end
    return (yield)


def pytest_sessionfinish(session):
    _drop()
    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    print(f"\nreuse_context {worker}: {_state['created']} context(s) created, {_state['reused']} reused")
