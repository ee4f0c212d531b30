"""The controlling process: what the run certifies, what had to pass, what was reported, the certificate.

Registered as a plugin by plugin.pytest_configure in the process that runs the session (xdist's
controller, or the only process without xdist), never in a worker, as xdist's DSession is; it
drives this process's PalwSession (session.py) and imports nothing from it. Before any worker
starts it resolves the runtime build and the model once, checks them in one line each and hands them to every worker
(preflight/resolve.py); before any case runs it reads the expected inventory from the suite's
sources; it then receives every case report (the workers' too) and every worker's facts, and at
the end builds the certificate once: the verdict is a join of the inventory with the reports
(certificate/verdict.py), never a count of what happened to be reported.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_palw import options as opts
from pytest_palw.certificate import Certificate, discard
from pytest_palw.certificate import inventory as inventories
from pytest_palw.certificate.facts import absent_tool_reasons, pytest_statement
from pytest_palw.certificate.state import category_of
from pytest_palw.errors import PalwError, or_exit
from pytest_palw.preflight.resolve import Handover
from pytest_palw.probes.load_probe import LoadProbe
from pytest_palw.runtime.kernel_digest import parse_kernel_digest
from pytest_palw.runtime.library import require_palw_library, require_undamaged
from pytest_palw.selection import golden_recording_reasons, partial_run_reasons, reaches_suite, run_mode_reasons
from pytest_palw.tiers import tier_of


class Controller:
    def __init__(self, session):
        self.palw = session  # this process's PalwSession (options, runtime, facts)
        self.config = session.config
        self.certificate = Certificate()
        self.expected = False  # the suite was asked for: a verdict is owed
        self.stop_message: str | None = None  # pytest.exit's or Ctrl-C's, as pytest reported it
        self.load_probe: LoadProbe | None = None
        self.preflight_failed = False
        self.handover: Handover | None = None  # what preflight resolved, for every worker
        # the workers a case's pytest.exit stopped (not crashed), as objects: xdist's replacement of
        # one takes its id, and a crash of that replacement is a crash
        self.stopped_workers: list = []
        chosen = session.option("palw_certificate")
        self.path = Path(chosen).resolve() if chosen else None  # fixed now: a case may change the cwd
        # Again (plugin.pytest_load_initial_conftests did it for the command line, the environment
        # and the ini file): a plugin registered late (a conftest's pytest_plugins) never saw that
        # hook, and a conftest may have changed the directory a relative path resolves against.
        discard(self.path)

    def requested(self) -> bool:
        """Does this run reach the conformance suite (or name a PALW option)?"""
        return opts.explicitly_set(self.config) or reaches_suite(self.config)

    # -- before any worker starts: what the run certifies, resolved once -------------------------------
    def pytest_sessionstart(self, session) -> None:
        self.palw.mark("session_start")
        if self.requested() and not session.config.option.collectonly:
            self.preflight_failed = True  # until it returns: its pytest.exit is said once (pytest_keyboard_interrupt)
            or_exit(self.preflight)
            self.preflight_failed = False

    def preflight(self) -> None:
        """Fail fast, in one line, on a wrong option, a wrong model or an unpatched library; start
        the load probe (awaited before the first case)."""
        palw = self.palw
        palw.mark("preflight_start")
        parse_kernel_digest(palw.option("palw_kernel_digest"))
        palw.resolved_model  # noqa: B018 (resolves and checks the model's profile, once)
        palw.mark("model_checked")
        build = palw.build
        palw.mark("runtime_chosen")
        if palw.runtime_line:
            self.say(palw.runtime_line)
        require_palw_library(build.lib_dir)
        require_undamaged(build)
        self.load_probe = LoadProbe(build.location, palw.resolved_model.path, brought=build.manifest_path is None)
        palw.mark("probe_started")
        pin = palw.pin_observation  # a brought CUDA runtime's: observed once, here (children, beside the probe)
        if pin is not None:
            self.say(f"pinned cc {pin['pinned_cc']}: {pin['observed_by']}" if pin.get("pinned_cc") is not None
                     else f"pinned cc not observed: {pin.get('why')}")
            palw.mark("pin_observed")
        self.handover = Handover(str(build.location), palw.runtime_line,
                                 palw.resolved_model, pin)

    @pytest.hookimpl(optionalhook=True)  # xdist's: `-p no:xdist` must still work
    def pytest_configure_node(self, node) -> None:
        """Every worker runs the build and the model resolved here (the session's, unchanged)."""
        if self.handover is not None:
            node.workerinput.update(self.handover.to_wire())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session):
        """Before the first case (under xdist: while the workers start and collect): the expected
        inventory, the pytest statement, the load probe's verdict."""
        if self.requested():
            self.expect()
            self.certificate.facts["pytest"] = pytest_statement(self.config)
        or_exit(self.await_preflight)
        return (yield)

    def await_preflight(self) -> None:
        """The load probe's verdict (RuntimeLibraryError), once, before any case runs."""
        probe, self.load_probe = self.load_probe, None
        if probe is not None:
            probe.check()
            self.palw.mark("probe_done")

    def say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"palw: {line}")

    # -- before any case -----------------------------------------------------------------------------
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
        if case_id is None or self.stopped_case(report):
            return
        certificate = self.certificate
        inventory = certificate.inventory
        tier = inventory.tiers.get(case_id) if inventory is not None else None
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        self.check_launch(case_id, report)
        certificate.record(case_id, report, tier or tier_of(report.keywords), category_of(report, status))

    def stopped_case(self, report) -> bool:
        """xdist's crash report (``when`` "???") of the case whose pytest.exit stopped its worker: that
        case did not crash, its body never ended, as in one process (its setup report stands)."""
        node = getattr(report, "node", None)
        return report.when not in ("setup", "call", "teardown") and any(node is w for w in self.stopped_workers)

    def check_launch(self, case_id: str, report) -> None:
        """A report's launch (session.attest) must be the one its case's inventory family and index
        give here; one that is not was changed on the way (a plugin): dropped, and a verdict reason."""
        reported = getattr(report, "palw_launch", None)
        inventory = self.certificate.inventory
        if reported is None or inventory is None:
            return
        function, _, param = case_id.partition("[")
        family = inventory.launches.get(function)
        expected = (self.palw.launch_at(*family, int(param[:-1]))
                    if family is not None and param[:-1].isdigit() else None)
        if reported != expected:
            report.palw_launch = None
            reason = (f"{case_id} reported launch {reported}, its inventory family gives {expected}: a plugin "
                      "changed the reports; remove it to certify")
            if reason not in self.certificate.run.other:
                self.certificate.run.other.append(reason)

    @pytest.hookimpl(optionalhook=True)  # xdist's: `-p no:xdist` must still work
    def pytest_testnodedown(self, node, error) -> None:
        """A worker is done (error None) or died (error: why): its facts, or a crash on record."""
        worker = node.gateway.id
        output = getattr(node, "workeroutput", {})
        facts = output.get("palw_facts")
        if error is None:
            if facts:
                self.certificate.merge_facts(facts, worker)
        # a worker stopped by its case's pytest.exit did not crash: plugin.py stops the run with its line
        elif error == "keyboard-interrupt" and output.get("palw_stop"):
            self.stopped_workers.append(node)  # before xdist reports its running case (stopped_case)
        else:
            self.certificate.run.crashed_workers.append(f"{worker} crashed: {str(error)[:200]}")

    @pytest.hookimpl(trylast=True)  # after the terminal reporter kept it
    def pytest_keyboard_interrupt(self, excinfo) -> None:
        """Ctrl-C, or pytest.exit (a session-stopping error's one line) while the cases ran. A
        preflight's line is printed once, by pytest (``Exit: palw: ...``), not again by the terminal."""
        self.stop_message = f"{excinfo.typename}: {excinfo.value}"[:300]
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.preflight_failed and hasattr(reporter, "_keyboardinterrupt_memo"):
            reporter._keyboardinterrupt_memo = None

    @pytest.hookimpl(trylast=True)  # after every plugin that sets the exit status (syrupy, xdist)
    def pytest_sessionfinish(self, session) -> None:
        if not self.expected:
            return
        certificate, config = self.certificate, self.config
        certificate.merge_facts(self.palw.facts(), "controller")
        self.state_model_digest()
        run = certificate.run
        run.exitstatus = session.exitstatus
        run.interrupted = self.stop_message or stop_reason(session)
        run.other += run_mode_reasons(config) + golden_recording_reasons(config)
        if self.handover is not None:  # the build was resolved in the preflight
            run.other += absent_tool_reasons(self.palw.build.tools, self.palw.build.variant)
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

    def state_model_digest(self) -> None:
        """The model's sha256 as this process read it in this run (computed beside collection, at
        resolve time) is the certificate's; a cached synthetic model whose bytes are not what its
        generator wrote is removed (the next run makes it again), said in one line."""
        model = self.certificate.facts.get("model")
        if self.handover is None or self.handover.model is None or not isinstance(model, dict):
            return
        resolved = self.handover.model
        try:
            model["sha256"] = resolved.sha256
        except PalwError as error:
            self.certificate.run.other.append(str(error))
            return
        if resolved.spec.startswith("profile:"):
            from pytest_palw.fixtures.models.model_cache import as_written, forget

            written = as_written(resolved.path)
            if written is not None and written["sha256"] not in (None, resolved.sha256):
                forget(resolved.path)
                self.say(f"the cached model {resolved.path.name} is damaged (sha256 {resolved.sha256[:16]}..., "
                         f"written as {written['sha256'][:16]}...): removed; the next run generates it again")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.certificate.document is not None:
            from pytest_palw.certificate.terminal import terminal_summary

            terminal_summary(terminalreporter, self.certificate.document, self.path)

    def close(self, status, error=None) -> int | None:
        """pytest is done (plugin.pytest_cmdline_main): after every hook, unconfigure and cleanup, a
        plugin may have changed the exit status, or pytest raised. The verdict is judged again with
        what pytest returns, and only now is the certificate written: a process that dies before
        this leaves none. Returns the exit status to end with instead when it cannot be written."""
        if self.certificate.document is None:
            return
        if error is not None:
            code = 130 if isinstance(error, KeyboardInterrupt) else 1
            why = f"pytest raised {type(error).__name__} after the session: {str(error)[:200]}"
        else:
            code, why = int(status), None
        changed = self.certificate.rejudge(code, why)
        if self.path:
            try:
                self.certificate.write(self.path)
            except PalwError as error:  # neither file is left: nothing half-written is announced
                print(f"palw: error: {error}")
                return error.exit_code
        if changed:
            verdict = self.certificate.document["verdict"]
            print(f"palw: judged again with pytest's final exit status {code}: "
                  + ("CERTIFIED" if verdict["certified"] else "not certified: " + "; ".join(verdict["reasons"])))


def stop_reason(session) -> str | None:
    if session.exitstatus == pytest.ExitCode.INTERRUPTED:
        return "interrupted"
    if session.shouldstop or session.shouldfail:
        return str(session.shouldstop or session.shouldfail)
    return None
