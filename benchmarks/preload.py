"""A timing experiment, not part of the suite: each xdist worker loads the runtime and the model and
runs the discovery in a thread started at its configure, beside its collection, instead of in its
first case that needs them.

    PYTHONPATH=benchmarks palw certify --model profile:full -n 8 -- -p preload

In the H100 warm run of 2026-12-06 (`benchmarks/timeline.py`) the workers had collected by 4.5-5.4 s,
loaded the runtime at ~6.2 s and the model at ~8.5 s, and found the discovery at 8.6-9.5 s: about
4 s of each worker's start lie on the run's critical path. Here they overlap the worker's session
start and collection; the thread is joined before the worker's first case, so no case runs beside
it and nothing is loaded twice. A plugin outside the suite: `palw certify` names it in the verdict,
so such a run is never CERTIFIED; it is for the wall time only.
"""

from __future__ import annotations

import threading

import pytest

_THREAD = pytest.StashKey[threading.Thread]()


def _load(session) -> None:
    try:
        session.discovery  # noqa: B018 - the runtime, the model, the token and the discovery, in this order
    except BaseException:  # noqa: BLE001 - the first case that needs them raises it again, as without this
        pass


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        return
    from pytest_palw.plugin import started

    session = started(config)
    if session is None:
        return
    thread = config.stash[_THREAD] = threading.Thread(target=_load, args=(session,), name="palw-preload",
                                                      daemon=True)
    thread.start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    thread = item.config.stash.get(_THREAD, None)
    if thread is not None:
        thread.join()
