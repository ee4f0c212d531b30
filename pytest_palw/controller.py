"""The controlling process: what had to pass, what was reported, the certificate.

Registered as a plugin in the process that runs the session (xdist's controller, or the only
process without xdist), as xdist's DSession is. Before any case runs it reads the expected
inventory from the suite's sources; it then receives every case report (the workers' too) and
every worker's facts, and at the end builds the certificate once: the verdict is a join of the
inventory with the reports (certificate/verdict.py), never a count of what happened to be reported.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_palw.certificate import Certificate, page_path
from pytest_palw.certificate import inventory as inventories
from pytest_palw.selection import golden_recording_reasons, partial_run_reasons, run_mode_reasons
from pytest_palw.tiers import tier_of


class Controller:
    def __init__(self, session):
        self.palw = session  # this process's PalwSession (options, runtime, facts)
        self.config = session.config
        self.certificate = Certificate()
        self.expected = False  # the suite was asked for: a verdict is owed
        self.stop_message: str | None = None  # pytest.exit's or Ctrl-C's, as pytest reported it
        chosen = session.option("palw_certificate")
        self.path = Path(chosen).resolve() if chosen else None  # fixed now: a case may change the cwd

    # -- before any case ---------------------------------------------------------------------------
    def discard_old_certificate(self) -> None:
        """A certificate file on disk speaks for the run that wrote it: an older one must not
        survive a run that stops early or runs no case (it would still say CERTIFIED)."""
        discard(self.path)

    def expect(self) -> None:
        """The expected inventory and the suite digest, from the suite's sources (before any case)."""
        self.expected = True
        certificate = self.certificate
        certificate.started = time.time()
        try:
            certificate.inventory = inventories.build()
        except inventories.InventoryError as error:
            certificate.run.other.append(f"the expected inventory could not be read: {error}")
        certificate.suite = inventories.suite_digest()

    # -- hooks (this object is a registered plugin) ------------------------------------------------
    def pytest_runtest_logreport(self, report) -> None:
        case_id = inventories.case_id(report.nodeid, report.location[0] if report.location else "",
                                      self.config.rootpath)
        if case_id is None:
            return
        certificate = self.certificate
        inventory = certificate.inventory
        tier = inventory.tiers.get(case_id) if inventory is not None else None
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        category = status[0] if status else default_category(report)  # -p no:terminal answers None
        certificate.record(case_id, report, tier or tier_of(report.keywords), category)

    @pytest.hookimpl(optionalhook=True)  # xdist's: `-p no:xdist` must still work
    def pytest_testnodedown(self, node, error) -> None:
        """A worker is done (error None) or died (error: why): its facts, or a crash on record."""
        worker = node.gateway.id
        facts = getattr(node, "workeroutput", {}).get("palw_facts")
        if error is not None:
            self.certificate.run.crashed_workers.append(f"{worker} crashed: {str(error)[:200]}")
        elif facts:
            self.certificate.merge_facts(facts, worker)

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        """Ctrl-C, or pytest.exit (a session-stopping error's one line) while the cases ran."""
        self.stop_message = f"{excinfo.typename}: {excinfo.value}"[:300]

    @pytest.hookimpl(trylast=True)  # after every plugin that sets the exit status (syrupy, xdist)
    def pytest_sessionfinish(self, session) -> None:
        if not self.expected:
            return
        certificate, config = self.certificate, self.config
        certificate.merge_facts(self.palw.facts(), "controller")
        run = certificate.run
        run.exitstatus = session.exitstatus
        run.interrupted = self.stop_message or stop_reason(session)
        run.other += run_mode_reasons(config) + golden_recording_reasons(config)
        run.selection = partial_run_reasons(config.args, certificate.facts.get("deselected", 0), certificate.cases,
                                            config.invocation_params.dir, config.option.pyargs)
        if any(facts.get("optimize") for facts in certificate.workers.values()):
            run.other.append("Python ran with -O (PYTHONOPTIMIZE): assert statements are stripped, so no case "
                             "could fail: run without it to certify")
        foreign = sorted({entry for facts in certificate.workers.values()
                          for entry in facts.get("foreign_fixtures", [])})
        if foreign:
            run.other.append(f"{len(foreign)} fixture(s) the suite uses come from outside the plugin and the suite "
                             f"({', '.join(foreign[:3])}): a conftest or plugin replaced them; remove it to certify")
        certificate.finish(time.time())

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.certificate.document is not None:
            from pytest_palw.certificate.terminal import terminal_summary

            terminal_summary(terminalreporter, self.certificate.document, self.path)

    def close(self, status, error=None) -> None:
        """pytest is done (plugin.pytest_cmdline_main): after every hook, unconfigure and cleanup, a
        plugin may have changed the exit status, or pytest raised. The verdict is judged again with
        what pytest returns, and only now is the certificate written: a process that dies before
        this leaves none."""
        if self.certificate.document is None:
            return
        if error is not None:
            code = 130 if isinstance(error, KeyboardInterrupt) else 1
            why = f"pytest raised {type(error).__name__} after the session: {str(error)[:200]}"
        else:
            code, why = int(status), None
        changed = self.certificate.rejudge(code, why)
        if self.path:
            self.certificate.write(self.path)
        if changed:
            verdict = self.certificate.document["verdict"]
            print(f"palw: judged again with pytest's final exit status {code}: "
                  + ("CERTIFIED" if verdict["certified"] else "not certified: " + "; ".join(verdict["reasons"])))


def discard(path: Path | None) -> None:
    """An older certificate (and its page) must not survive this run: it would speak for it."""
    if path:
        path.unlink(missing_ok=True)
        page_path(path).unlink(missing_ok=True)


def default_category(report) -> str:
    """pytest's category of a report when no plugin answers pytest_report_teststatus."""
    if report.passed:
        return "passed" if report.when == "call" else ""
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "skipped"


def stop_reason(session) -> str | None:
    if session.exitstatus == pytest.ExitCode.INTERRUPTED:
        return "interrupted"
    if session.shouldstop or session.shouldfail:
        return str(session.shouldstop or session.shouldfail)
    return None
