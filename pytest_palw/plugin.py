"""pytest-palw: hooks only, each delegating to the process's PalwSession."""

from __future__ import annotations

import time

import pytest

from . import options
from .errors import PalwError
from .selection import golden_recording_reasons, in_suite, partial_run_reasons
from .session import PalwSession, skip_if_tier_unavailable

pytest_plugins = ["pytest_palw.pytest_fixtures"]

_KEY = pytest.StashKey[PalwSession]()


def _session(config) -> PalwSession:
    return config.stash[_KEY]


class _ReportListener:
    def __init__(self, session: PalwSession):
        self.session = session

    def pytest_runtest_logreport(self, report):
        self.session.record(report)


def pytest_addoption(parser):
    options.add_options(parser)


def pytest_configure(config):
    for tier, meaning in (("cpu", "runs on any PALW runtime (CPU tier, CI)"),
                          ("gpu", "needs a CUDA runtime exposing the PALW procs (GPU tier)"),
                          ("pinned", "needs a device whose cc equals the runtime's pinned cc"),
                          ("metal", "needs an Apple GPU (not part of a CUDA certification)")):
        config.addinivalue_line("markers", f"palw_{tier}: {meaning}")
    session = config.stash[_KEY] = PalwSession(config)
    session.configure_worker()
    if session.worker_id is None:
        # Under xdist the controller sees every worker's reports here.
        config.pluginmanager.register(_ReportListener(session), "palw-report-listener")
        session.discard_old_certificate()


def pytest_sessionstart(session):
    palw = _session(session.config)
    palw.mark("session_start")
    if palw.worker_id is None and palw.requested() and not session.config.option.collectonly:
        try:
            palw.preflight()
        except PalwError as error:
            pytest.exit(f"palw: {error}", returncode=error.exit_code)
        palw.certificate.started = time.time()


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    # Before the first case (under xdist: while the workers start and collect).
    palw = _session(session.config)
    try:
        palw.await_preflight()
    except PalwError as error:
        pytest.exit(f"palw: {error}", returncode=error.exit_code)
    try:
        return (yield)
    finally:
        palw.mark("loop_done")  # before any plugin's finishing work


def pytest_collection_modifyitems(config, items):
    # Every case of the conformance suite counts for the certificate: cpu tier unless marked.
    for item in items:
        if in_suite(item.path) and not any(
                item.get_closest_marker(f"palw_{tier}") for tier in ("cpu", "gpu", "pinned", "metal")):
            item.add_marker("palw_cpu")


def pytest_collection_finish(session):
    _session(session.config).mark("collected")


def pytest_deselected(items):
    if items:
        _session(items[0].config).deselected += sum(1 for item in items if in_suite(item.path))


def pytest_runtest_setup(item):
    palw = _session(item.config)
    palw.mark("first_case")
    skip_if_tier_unavailable(palw, item)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    _session(item.config).mark("last_case_end", first=False)


@pytest.hookimpl(optionalhook=True)  # xdist hooks: `-p no:xdist` must still work
def pytest_configure_node(node):
    _session(node.config).configure_node(node.workerinput)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    facts = getattr(node, "workeroutput", {}).get("palw_facts")
    if facts:
        _session(node.config).certificate.merge_facts(facts, node.gateway.id)


def pytest_sessionfinish(session, exitstatus):
    palw = _session(session.config)
    if palw.worker_id is not None:
        session.config.workeroutput["palw_facts"] = palw.facts()
        return
    palw.certificate.merge_facts(palw.facts(), "controller")
    palw.certificate.finished = time.time()
    # Under xdist the workers collect and deselect (each the same cases): the first count holds.
    palw.certificate.partial_run = partial_run_reasons(
        session.config.args, palw.certificate.facts.get("deselected", 0), palw.certificate.cases,
        palw.ran_files) + golden_recording_reasons(session.config)
    palw.certificate.interrupted = palw.stop_reason(session, exitstatus)
    path = palw.option("palw_certificate")
    if path and palw.certificate.cases:
        palw.certificate.write(path)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    palw = _session(config)
    if palw.worker_id is None and palw.certificate.cases:
        from .report import terminal_summary

        terminal_summary(terminalreporter, palw)
