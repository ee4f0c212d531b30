"""pytest-palw: hooks only, each handing over to the process's PalwSession (session.py); outside
xdist's workers a Controller (controller.py) is registered beside it with hooks of its own
(resolving what the run certifies, handing it to the workers, the inventory, the reports, the
certificate), as xdist registers its DSession only in the controlling process.

Installed, this module is loaded by every pytest run of the environment, so it imports only what
registering the options and the markers needs. The session, the runtime and the certificate load
when a run uses the suite: a PALW option given or a run that reaches the suite (at configure), a
collected case of the suite, a case with a PALW mark or fixture, or a fixture asking for the
session. Any other run pays for a few small modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_palw import options
from pytest_palw.marks import LAUNCH_MARK
from pytest_palw.tiers import TIER_MEANINGS, TIERS

if TYPE_CHECKING:
    from pytest_palw.session import PalwSession

pytest_plugins = ["pytest_palw.pytest_fixtures"]

_KEY = pytest.StashKey["PalwSession"]()
_CONTROLLER = pytest.StashKey[object]()  # controller.Controller, outside the workers only
_WORKER_STOP = pytest.StashKey[dict]()  # the first worker's pytest.exit, in the controlling process
PALW_MARKS = tuple(f"palw_{tier}" for tier in TIERS) + (LAUNCH_MARK,)


def palw_session(config) -> PalwSession:
    """This process's PalwSession (the fixtures' and palw certify's way in), started on first need."""
    session = config.stash.get(_KEY, None)
    return session if session is not None else start(config)


def started(config) -> PalwSession | None:
    """The session if this run uses the suite so far, else None (and nothing heavy imported)."""
    return config.stash.get(_KEY, None)


def start(config) -> PalwSession:
    """The full session of this process; outside xdist's workers also the Controller."""
    from pytest_palw.session import PalwSession

    session = config.stash[_KEY] = PalwSession(config)
    session.configure()
    if not is_worker(config):
        from pytest_palw.controller import Controller

        controller = config.stash[_CONTROLLER] = Controller(session)
        config.pluginmanager.register(controller, "palw-controller")
    return session


def is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def uses_suite(config) -> bool:
    """Known at configure: a PALW option given, a certificate named (even in an ini file), or
    arguments that reach the suite."""
    from pytest_palw.selection import reaches_suite

    return (options.explicitly_set(config) or options.resolve(config, "palw_certificate") is not None
            or reaches_suite(config))


def needs_session(items) -> bool:
    """A collected case of the suite, or one with a PALW mark or fixture."""
    from pytest_palw.selection import in_suite

    return any(in_suite(item.path) or any(item.get_closest_marker(name) for name in PALW_MARKS)
               or any(name.startswith("palw_") for name in getattr(item, "fixturenames", ()))
               for item in items)


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
    """The controller's final verdict and write; a process that never configured (a usage error),
    that did not use the suite, or a worker has nothing to close. An exit status when the
    certificate could not be written."""
    controller = config.stash.get(_CONTROLLER, None)
    if controller is not None:
        return controller.close(status, error)
    return None


def pytest_configure(config):
    for tier, meaning in TIER_MEANINGS.items():
        config.addinivalue_line("markers", f"palw_{tier}: {meaning}")
    config.addinivalue_line("markers", f"{LAUNCH_MARK}(label, stream='v2'): the case is about the launch "
                            "at its `index` parameter (the certificate's launch map)")
    if uses_suite(config):
        start(config)


def pytest_sessionstart(session):
    if (palw := started(session.config)) is not None:
        palw.mark("session_start")


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    if (palw := started(session.config)) is not None:
        palw.start_ahead(session)
    try:
        return (yield)
    except pytest.exit.Exception as stop:  # a case's pytest.exit: a worker hands its line on
        if (palw := started(session.config)) is not None:
            palw.stopped(stop)
        raise
    except KeyboardInterrupt:  # xdist's Interrupted: it stops the run on a worker's exit status 2
        stop = session.config.stash.get(_WORKER_STOP, None)
        if stop is None:
            raise
        # that worker's case called pytest.exit: the run stops with its line and code, as in one process
        pytest.exit(stop["message"], returncode=stop["returncode"])
    finally:
        if (palw := started(session.config)) is not None:
            palw.ahead.stop()
            palw.lookahead.stop()
            palw.mark("loop_done")  # before any plugin's finishing work


@pytest.hookimpl(optionalhook=True)  # xdist's, in the controlling process
def pytest_testnodedown(node, error):
    if (stop := getattr(node, "workeroutput", {}).get("palw_stop")) is not None:  # PalwSession.worker_finish
        node.config.stash.setdefault(_WORKER_STOP, stop)


def pytest_collection_modifyitems(config, items):
    if started(config) is not None or needs_session(items):
        palw_session(config).mark_tiers(items)


def pytest_collection_finish(session):
    if (palw := started(session.config)) is not None:
        palw.mark("collected")


def pytest_deselected(items):
    if items and (started(items[0].config) is not None or needs_session(items)):
        palw_session(items[0].config).count_deselected(items)


def pytest_runtest_setup(item):
    if (palw := started(item.config)) is not None:
        palw.setup_case(item)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    palw = started(item.config)
    if palw is None:
        return (yield)
    with palw.witness(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if (palw := started(item.config)) is not None:
        palw.attest(item, report)
    return report


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    if (palw := started(item.config)) is not None:
        palw.mark("last_case_end", first=False)


def pytest_sessionfinish(session):
    if (palw := started(session.config)) is not None:
        palw.worker_finish(session)
