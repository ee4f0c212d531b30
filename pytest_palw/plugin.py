"""pytest-palw: hooks only, each handing over to the process's PalwSession (session.py); the
controlling process also registers a Controller (controller.py) with hooks of its own."""

from __future__ import annotations

import pytest

from pytest_palw import options
from pytest_palw.session import PalwSession

pytest_plugins = ["pytest_palw.pytest_fixtures"]

_KEY = pytest.StashKey[PalwSession]()


def palw_session(config) -> PalwSession:
    """This process's PalwSession (the fixtures' and palw certify's way in)."""
    return config.stash[_KEY]


def pytest_addoption(parser):
    options.add_options(parser)


def pytest_load_initial_conftests(early_config):
    """Before the arguments are checked: a run that ends in a usage error must not leave an older
    certificate standing either (the controller removes one named in an ini file at configure)."""
    options.discard_named_certificate(early_config)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    """Around the whole of pytest: the certificate is judged with the status pytest returns (or the
    exception it raises) after every hook and cleanup, and written only then."""
    try:
        status = yield
    except BaseException as error:
        PalwSession.close(config.stash.get(_KEY, None), None, error)
        raise
    PalwSession.close(config.stash.get(_KEY, None), status)
    return status


def pytest_configure(config):
    config.stash[_KEY] = PalwSession(config)
    palw_session(config).configure()


def pytest_sessionstart(session):
    palw_session(session.config).start(session)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    palw_session(session.config).before_first_case()  # under xdist: while the workers start and collect
    try:
        return (yield)
    finally:
        palw_session(session.config).mark("loop_done")  # before any plugin's finishing work


def pytest_collection_modifyitems(config, items):
    palw_session(config).mark_tiers(items)


def pytest_collection_finish(session):
    palw_session(session.config).mark("collected")


def pytest_deselected(items):
    if items:
        palw_session(items[0].config).count_deselected(items)


def pytest_runtest_setup(item):
    palw_session(item.config).setup_case(item)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    with palw_session(item.config).witness(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    palw_session(item.config).attest(item, report)
    return report


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    palw_session(item.config).mark("last_case_end", first=False)


@pytest.hookimpl(optionalhook=True)  # xdist hooks: `-p no:xdist` must still work
def pytest_configure_node(node):
    palw_session(node.config).configure_node(node.workerinput)


def pytest_sessionfinish(session):
    palw_session(session.config).worker_finish(session)
