"""pytest-palw: hooks only, each handing over to the process's PalwSession (session.py); the
controlling process also registers a Controller (controller.py) with hooks of its own (resolving
what the run certifies, handing it to the workers, the inventory, the reports, the certificate)."""

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
    certificate standing either (named on the command line, in $PALW_CERTIFICATE or in an ini file)."""
    options.discard_named_certificate(early_config)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    """Around the whole of pytest: the certificate is judged with the status pytest returns (or the
    exception it raises) after every hook and cleanup, and written only then."""
    try:
        status = yield
    except BaseException as error:
        close(config, None, error)
        raise
    failed_write = close(config, status)
    return status if failed_write is None else failed_write


def close(config, status, error=None) -> int | None:
    """The controller's final verdict and write; a process that never configured (a usage error) or
    a worker has nothing to close. An exit status when the certificate could not be written."""
    session = config.stash.get(_KEY, None)
    if session is not None and session.controller is not None:
        return session.controller.close(status, error)
    return None


def pytest_configure(config):
    config.stash[_KEY] = PalwSession(config)
    palw_session(config).configure()


def pytest_sessionstart(session):
    palw_session(session.config).mark("session_start")


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
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


def pytest_sessionfinish(session):
    palw_session(session.config).worker_finish(session)
