"""pytest-palw: hooks only, each handing over to the process's PalwSession (session.py)."""

from __future__ import annotations

import pytest

from pytest_palw import options
from pytest_palw.session import PalwSession

pytest_plugins = ["pytest_palw.fixtures"]

_KEY = pytest.StashKey[PalwSession]()


def _session(config) -> PalwSession:
    return config.stash[_KEY]


def pytest_addoption(parser):
    options.add_options(parser)


def pytest_configure(config):
    config.stash[_KEY] = PalwSession(config)
    _session(config).configure()


def pytest_sessionstart(session):
    _session(session.config).start(session)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    _session(session.config).before_first_case()  # under xdist: while the workers start and collect
    try:
        return (yield)
    finally:
        _session(session.config).mark("loop_done")  # before any plugin's finishing work


def pytest_collection_modifyitems(config, items):
    _session(config).mark_tiers(items)


def pytest_collection_finish(session):
    _session(session.config).mark("collected")


def pytest_deselected(items):
    if items:
        _session(items[0].config).count_deselected(items)


def pytest_runtest_setup(item):
    _session(item.config).setup_case(item)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    _session(item.config).mark("last_case_end", first=False)


@pytest.hookimpl(optionalhook=True)  # xdist hooks: `-p no:xdist` must still work
def pytest_configure_node(node):
    _session(node.config).configure_node(node.workerinput)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _session(node.config).worker_done(getattr(node, "workeroutput", {}), node.gateway.id)


def pytest_sessionfinish(session, exitstatus):
    _session(session.config).finish(session, exitstatus)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    _session(config).summarize(terminalreporter)
