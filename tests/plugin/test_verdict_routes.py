"""Every route to a CERTIFIED verdict that skips work is refused: the verdict joins the expected
inventory with what was reported, so no option, plugin or failure makes less look like all.

The routes run the real plugin (controller, inventory, verdict, certificate) in a pytest
subprocess on a toy suite that stands in for the conformance suite, with the runtime stubbed
(``palw_toy_stub``: no preflight, every tier available): there the whole toy suite can pass, so a
plain run is CERTIFIED (the control) and each route must fail for its own reason. The same routes
on the real suite (CPU tier) are in test_verdict.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import pytest

STUB = '''
"""Test stub: the toy suite beside this file stands in for the conformance suite; no runtime."""
import sys
from pathlib import Path

import pytest_palw.paths
import pytest_palw.session

TOY_SUITE = Path(__file__).resolve().parent / "suite"
for module in [m for name, m in list(sys.modules.items()) if name.startswith("pytest_palw")]:
    if hasattr(module, "CONFORMANCE_DIR"):
        module.CONFORMANCE_DIR = TOY_SUITE
pytest_palw.session.PalwSession.preflight = lambda self: None
pytest_palw.session.PalwSession.tier_skip_reason = lambda self, tier: None
'''

CLAIMS = '''
"""Claim: a toy claim with index cases."""
import os
import signal

import pytest

pytestmark = pytest.mark.palw_cpu


_FAILED_ONCE = set()


def _hooks(case):
    if case in os.environ.get("TOY_FAIL_ONCE", "").split(",") and case not in _FAILED_ONCE:
        _FAILED_ONCE.add(case)  # fails its first attempt in this process, passes any later one
        raise AssertionError(f"{case} fails its first attempt on purpose")
    if case in os.environ.get("TOY_FAIL", "").split(","):
        raise AssertionError(f"{case} fails on purpose")
    if os.environ.get("TOY_KILL") == case and os.environ.get("PYTEST_XDIST_WORKER"):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("TOY_EXIT") == case:
        pytest.exit("palw: the toy runtime stopped the session: fix the toy", returncode=7)


@pytest.mark.parametrize("index", range(6))
def test_index(index):
    _hooks(f"test_index[{index}]")


@pytest.mark.palw_pinned
@pytest.mark.parametrize("mode", ["a", "b"])
@pytest.mark.parametrize("index", [0, 1])
def test_pinned(index, mode):
    _hooks(f"test_pinned[{index}-{mode}]")


@pytest.mark.palw_metal
@pytest.mark.skipif(True, reason="another platform")
def test_metal():
    pytest.fail("never runs here")
'''

OTHER = '''
"""Claim: a second toy claim."""
import os

import pytest


@pytest.mark.palw_gpu
def test_gpu():
    assert True


def test_plain():
    assert "test_plain" not in os.environ.get("TOY_FAIL", "").split(",")


def test_session(palw_session):
    assert palw_session.config is not None
'''

PLUGINS = {
    # pytest-rerunfailures style: an outcome pytest itself does not know
    "toy_rerun": '''
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "call" and item.name == "test_index[1]":
        report.outcome = "rerun"
    return report

def pytest_report_teststatus(report):
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
''',
    # drops a case as --lf does: without pytest_deselected
    "toy_drop": '''
def pytest_collection_modifyitems(items):
    items[:] = [item for item in items if item.name != "test_index[4]"]
''',
    # replaces each case's call by nothing
    "toy_no_runtest": '''
def pytest_collection_modifyitems(items):
    for item in items:
        item.runtest = lambda: None
''',
    # answers pytest_pyfunc_call without calling the function
    "toy_no_pyfunc": '''
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    return True
''',
    # expects a failure
    "toy_xfail": '''
import pytest

def pytest_collection_modifyitems(items):
    for item in items:
        if item.name == "test_index[2]":
            item.add_marker(pytest.mark.xfail(reason="known"))
''',
    # wraps each suite function (functools.wraps) and swallows its failure
    "toy_wraps": '''
import functools

def pytest_collection_modifyitems(items):
    for item in items:
        original = item.obj

        @functools.wraps(original)
        def swallowing(*args, __original=original, **kwargs):
            try:
                __original(*args, **kwargs)
            except AssertionError:
                pass

        item.obj = swallowing
''',
    # wraps each suite function (functools.wraps) and never calls it
    "toy_wraps_norun": '''
import functools

def pytest_collection_modifyitems(items):
    for item in items:
        item.obj = functools.wraps(item.obj)(lambda *args, **kwargs: None)
''',
    # every index case runs with index 0
    "toy_param": '''
def pytest_collection_modifyitems(items):
    for item in items:
        if "index" in getattr(getattr(item, "callspec", None), "params", {}):
            item.callspec.params["index"] = 0
            item.funcargs.pop("index", None)
''',
    # the real test_index[4] is replaced by an item of the same node id that runs index 0
    "toy_impostor": '''
import dataclasses

import pytest

def pytest_collection_modifyitems(items):
    for position, item in enumerate(items):
        if item.name == "test_index[4]":
            twin = next(i for i in items if i.name == "test_index[0]")
            callspec = dataclasses.replace(twin.callspec, _idlist=["4"])  # named [4], runs index 0
            items[position] = pytest.Function.from_parent(twin.parent, name="test_index", callspec=callspec,
                                                           callobj=twin.obj, fixtureinfo=twin._fixtureinfo)
            assert items[position].nodeid == item.nodeid
''',
    # changes pytest's exit status after every sessionfinish hook ran
    "toy_exit_after": '''
import pytest

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    result = yield
    session.exitstatus = 1
    return result
''',
    # stops pytest with its own code while the summary is written
    "toy_exit_in_summary": '''
import pytest

def pytest_terminal_summary(terminalreporter):
    pytest.exit("stopped in the summary", returncode=2)
''',
    # an object that fails in __del__, collected only at pytest's last cleanup
    "toy_unraisable": '''
class Cycle:
    def __init__(self):
        self.me = self

    def __del__(self):
        raise RuntimeError("an error at shutdown")


def pytest_sessionfinish(session):
    Cycle()
''',
    # garbage that fails in __del__, left by the cases where only an explicit collection finds it
    "toy_unraisable_in_run": '''
import gc

from toy_unraisable import Cycle  # the module only: its hook is not registered


def pytest_runtest_logfinish(nodeid, location):
    gc.disable()  # no automatic collection: pytest's at the end (or palw's before it) must find it
    Cycle()
''',
    # changes the exit status in one of pytest's last cleanups
    "toy_exit_in_cleanup": '''
SESSION = []

def pytest_configure(config):
    def later():
        SESSION[0].exitstatus = 4

    config.add_cleanup(later)

def pytest_sessionstart(session):
    SESSION.append(session)
''',
    # the process dies after the session, before pytest returns
    "toy_dies": '''
import os

def pytest_unconfigure(config):
    os._exit(1)
''',
    # adds a case the inventory does not know to a suite module
    "toy_extra": '''
import pytest

def pytest_collection_modifyitems(items):
    for item in list(items):
        if item.name == "test_plain":
            items.append(pytest.Function.from_parent(item.parent, name="test_plain_again", callobj=item.obj))
''',
}
TOY_CASES = 6 + 4 + 3  # test_index, test_pinned, test_gpu + test_plain + test_session (test_metal exempt)


@pytest.fixture
def toy(pytester, monkeypatch):
    """A pytester directory with the toy suite, the stub and the route plugins on PYTHONPATH."""
    pytester.makeini("[pytest]\n")
    suite = pytester.mkdir("suite")
    (suite / "test_claims.py").write_text(CLAIMS)
    (suite / "test_other.py").write_text(OTHER)
    (pytester.path / "palw_toy_stub.py").write_text(STUB)
    for name, source in PLUGINS.items():
        (pytester.path / f"{name}.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))
    for name in ("TOY_FAIL", "TOY_FAIL_ONCE", "TOY_KILL", "TOY_EXIT", "PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        monkeypatch.delenv(name, raising=False)

    def run(*args, cache=False):
        certificate = pytester.path / "cert.json"
        certificate.unlink(missing_ok=True)
        extra = [] if cache else ["-p", "no:cacheprovider"]
        result = pytester.runpytest_subprocess("suite", "-p", "palw_toy_stub", f"--palw-certificate={certificate}",
                                               *extra, *args, timeout=300)
        assert certificate.is_file(), result.stdout.str()[-3000:] + result.stderr.str()[-2000:]
        return json.loads(certificate.read_text()), result

    return run


def _verdict(document):
    return document["verdict"]


def _reasons(document) -> str:
    return " | ".join(document["verdict"]["reasons"])


def _refused(document, result, *fragments):
    verdict = _verdict(document)
    assert verdict["certified"] is False, (verdict, result.stdout.str()[-2000:])
    for fragment in fragments:
        assert fragment in _reasons(document), (fragment, verdict["reasons"])


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_the_whole_toy_suite_passing_is_certified(toy, workers):
    """The control: every case of the inventory ran its body and passed, pytest exited 0."""
    document, result = toy(*workers)
    assert result.ret == 0
    assert _verdict(document) == {"certified": True, "reasons": [], "expected": TOY_CASES, "passed": TOY_CASES,
                                  "exempt": 1}, result.stdout.str()[-2000:]
    assert document["inventory"]["size"] == TOY_CASES + 1 and document["inventory"]["exempt"][0]["id"] == (
        "conformance/test_claims.py::test_metal")
    assert all(case["body"] == case["id"] for case in document["cases"] if case["outcome"] == "passed")


@pytest.mark.parametrize("order", [["-p", "no:randomly"], ["-p", "no:cacheprovider"], ["--ff"]],
                         ids=["no-randomly", "no-cacheprovider", "failed-first-nothing-failed"])
def test_options_that_drop_nothing_leave_the_verdict_alone(toy, order):
    document, result = toy(*order, cache=True)
    assert _verdict(document)["certified"] is True, _verdict(document)


@pytest.mark.parametrize("mode, name", [("--setup-only", "--setup-only"), ("--setup-plan", "--setup-plan")])
def test_setup_only_runs_are_refused(toy, mode, name):
    document, result = toy(mode)
    _refused(document, result, f"{TOY_CASES} case(s) whose body never ran", name)
    assert _verdict(document)["passed"] == 0


def test_setup_plan_through_pytest_addopts_is_refused(toy, monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "--setup-plan")
    document, result = toy()
    _refused(document, result, f"{TOY_CASES} case(s) whose body never ran", "--setup-plan")


def test_collect_only_is_refused(toy):
    document, result = toy("--co")
    _refused(document, result, f"{TOY_CASES} of {TOY_CASES} expected case(s) never reported", "--collect-only")


def test_last_failed_after_a_failing_run_is_refused(toy, monkeypatch):
    """--lf keeps only the failed cases of each module, without telling pytest_deselected about the
    rest; with a failure in every module, every module still runs."""
    monkeypatch.setenv("TOY_FAIL", "test_index[2],test_plain")
    first, _ = toy(cache=True)
    _refused(first, _, "2 case(s) failed (first: conformance/test_claims.py::test_index[2], "
             "conformance/test_other.py::test_plain)")
    monkeypatch.delenv("TOY_FAIL")
    document, result = toy("--lf", cache=True)
    assert result.ret == 0 and document["summary"]["passed"] == 2  # the two cases ran and passed
    _refused(document, result, f"{TOY_CASES - 2} of {TOY_CASES} expected case(s) never reported")


def test_failed_first_after_a_failing_run_is_refused_while_it_fails(toy, monkeypatch):
    monkeypatch.setenv("TOY_FAIL", "test_index[2]")
    toy(cache=True)
    document, result = toy("--ff", cache=True)
    _refused(document, result, "1 case(s) failed", "pytest exited with status 1 (TESTS_FAILED)")


def test_python_functions_that_match_nothing_is_refused(toy):
    document, result = toy("-o", "python_functions=x")
    _refused(document, result, f"{TOY_CASES} of {TOY_CASES} expected case(s) never reported",
             "pytest exited with status 5 (NO_TESTS_COLLECTED)")


def test_deselecting_one_case_is_refused(toy):
    document, result = toy("--deselect", "suite/test_claims.py::test_pinned[1-b]")
    _refused(document, result, f"1 of {TOY_CASES} expected case(s) never reported (first: "
             "conformance/test_claims.py::test_pinned[1-b])", "partial run: 1 conformance case(s) deselected")


@pytest.mark.parametrize("restarts", [[], ["--max-worker-restart=0"]], ids=["replaced", "no-restart"])
def test_a_worker_killed_inside_a_case_is_refused(toy, monkeypatch, restarts):
    monkeypatch.setenv("TOY_KILL", "test_index[3]")
    document, result = toy("-n", "2", *restarts)
    assert result.ret != 0
    _refused(document, result, "1 case(s) crashed their worker (first: conformance/test_claims.py::test_index[3])",
             " crashed: ", "pytest exited with status 1")
    if restarts:
        assert _verdict(document)["passed"] < TOY_CASES - 1


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_pytest_exit_in_a_case_is_refused_with_its_line_and_code(toy, monkeypatch, workers):
    """A case's pytest.exit (or_exit: a user's environment, in one line) stops the run with that
    line and exit code, in a worker as in one process: not xdist's "keyboard-interrupt" or an
    INTERNALERROR traceback that hides the cause. The stopping case is the same in both: its body
    never ran to its end, and it crashed nothing (xdist's crash report of its worker is not a crash).
    Whether other cases went unreported depends, under xdist, on what the other worker had left."""
    monkeypatch.setenv("TOY_EXIT", "test_index[3]")
    document, result = toy(*workers)
    assert result.ret == 7, result.stdout.str()[-3000:]
    line = "palw: the toy runtime stopped the session: fix the toy"
    _refused(document, result, f"the run was interrupted (Exit: {line})", "pytest exited with status 7",
             "case(s) whose body never ran to its end (first: conformance/test_claims.py::test_index[3])")
    if not workers:
        _refused(document, result, "expected case(s) never reported")
    assert "crashed" not in _reasons(document)
    stopping = next(case for case in document["cases"] if case["id"] == "conformance/test_claims.py::test_index[3]")
    assert stopping["state"] == "body not reached" and not stopping.get("crashed"), stopping
    assert _verdict(document)["passed"] < TOY_CASES
    assert "keyboard-interrupt" not in _reasons(document)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert any(line in text for text in result.stdout.lines[-4:]), result.stdout.lines[-4:]


def test_pytest_exit_with_an_exit_code_enum_in_a_worker_keeps_its_line(toy, pytester):
    """pytest.ExitCode (an IntEnum) as the code: execnet cannot send an enum, so the worker hands an int."""
    (pytester.path / "enum_exit.py").write_text(
        "import pytest\n\n\ndef pytest_runtest_call(item):\n    if item.name == 'test_index[3]':\n"
        "        pytest.exit('palw: the toy runtime stopped the session: fix the toy', "
        "returncode=pytest.ExitCode.USAGE_ERROR)\n")
    document, result = toy("-p", "enum_exit", "-n", "2")
    assert result.ret == 4, result.stdout.str()[-3000:]
    _refused(document, result, "the run was interrupted (Exit: palw: the toy runtime stopped the session: fix the toy)")
    assert " crashed: " not in _reasons(document)


def test_an_outcome_pytest_does_not_name_is_refused(toy):
    document, result = toy("-p", "toy_rerun")
    assert result.ret == 0  # pytest counts a "rerun" as nothing
    _refused(document, result, "1 case(s) reported an outcome pytest does not name (rerun)")


def test_a_plugin_that_drops_a_case_is_refused(toy):
    document, result = toy("-p", "toy_drop")
    assert result.ret == 0
    _refused(document, result, f"1 of {TOY_CASES} expected case(s) never reported (first: "
             "conformance/test_claims.py::test_index[4])")


@pytest.mark.parametrize("plugin", ["toy_no_runtest", "toy_no_pyfunc"])
def test_a_plugin_that_skips_the_body_is_refused(toy, plugin):
    """pytest reports the calls passed; the plugin's witness says no function body ran."""
    document, result = toy("-p", plugin)
    assert result.ret == 0 and document["summary"]["passed"] == TOY_CASES
    _refused(document, result, f"{TOY_CASES} case(s) whose body never ran to its end")
    assert _verdict(document)["passed"] == 0


def test_a_plugin_that_expects_a_failure_is_refused(toy):
    document, result = toy("-p", "toy_xfail")
    _refused(document, result, "1 case(s) marked xfail")


def test_a_case_outside_the_inventory_is_refused(toy):
    document, result = toy("-p", "toy_extra")
    assert result.ret == 0
    _refused(document, result, "1 case(s) of the suite are not in the expected inventory (first: "
             "conformance/test_other.py::test_plain_again)")
    assert _verdict(document)["passed"] == TOY_CASES


def test_a_wrapper_cannot_hide_a_failing_body(toy, monkeypatch):
    """The witness runs the suite's own function, not a wrapper put in its place."""
    monkeypatch.setenv("TOY_FAIL", "test_index[2]")
    for plugin in ("toy_wraps", "toy_wraps_norun"):
        document, result = toy("-p", plugin)
        _refused(document, result, "1 case(s) failed (first: conformance/test_claims.py::test_index[2])")


def test_a_case_run_with_other_parameters_is_refused(toy):
    document, result = toy("-p", "toy_param")
    assert result.ret == 0 and document["summary"]["passed"] == TOY_CASES
    # test_index[1..5] and test_pinned[1-*] ran as index 0 (test_index[0], test_pinned[0-*] as themselves)
    _refused(document, result, "7 case(s) whose body never ran to its end")


def test_an_impostor_with_the_node_id_of_a_case_is_refused(toy):
    document, result = toy("-p", "toy_impostor")
    assert result.ret == 0
    _refused(document, result,
             "1 case(s) whose body never ran to its end (first: conformance/test_claims.py::test_index[4])")


@pytest.mark.parametrize("plugin, status", [("toy_exit_after", 1), ("toy_exit_in_summary", 2)])
def test_an_exit_status_changed_after_the_verdict_is_refused(toy, plugin, status):
    """The verdict is judged again at unconfigure with the status pytest will exit with."""
    document, result = toy("-p", plugin)
    assert result.ret == status
    _refused(document, result, f"pytest exited with status {status}")
    assert document["exit_status"] == status


def _certify_with_unraisable_as_error(toy, pytester, plugin):
    """`palw certify` on the toy suite with ``plugin`` and -W error for unraisable exceptions: (result,
    verdict)."""
    toy()  # writes nothing we use: only sets the directory up
    certificate = pytester.path / "certified.json"
    run = ("import sys, palw_toy_stub\nfrom pytest_palw.cli import main\n"
           f"sys.exit(main(['certify', '--require-certified', '--certificate', {str(certificate)!r}, '--', "
           f"'-p', 'palw_toy_stub', '-p', 'no:cacheprovider', '-p', {plugin!r}, '-W', "
           "'error::pytest.PytestUnraisableExceptionWarning']))")
    result = pytester.run(sys.executable, "-c", run, timeout=300)
    return result, json.loads(certificate.read_text())["verdict"]


def test_palw_certify_judges_with_the_code_pytest_returned(toy, pytester):
    """pytest can still fail after the session's last hook (-W error and an error at shutdown):
    `palw certify` judges again with what pytest.main returned or raised."""
    result, verdict = _certify_with_unraisable_as_error(toy, pytester, "toy_unraisable")
    assert result.ret != 0
    assert verdict["certified"] is False and verdict["passed"] == TOY_CASES, verdict
    assert any(reason.startswith(("pytest raised", "pytest exited with status")) for reason in verdict["reasons"])


def test_palw_certify_still_collects_the_run_s_garbage(toy, pytester):
    """`palw certify` keeps the cyclic collector off what its run leaves (speed), but only after one
    collection at the session's end: an error in the __del__ of a case's garbage still reaches
    pytest (here -W error makes it fail the run), as it does in plain pytest."""
    result, verdict = _certify_with_unraisable_as_error(toy, pytester, "toy_unraisable_in_run")
    assert result.ret != 0
    assert verdict["certified"] is False and verdict["passed"] == TOY_CASES, verdict
    assert any("pytest raised ExceptionGroup after the session: multiple unraisable exception warnings "
               f"({TOY_CASES + 1} sub-exceptions)" in reason for reason in verdict["reasons"]), verdict["reasons"]


def test_assert_statements_stripped_are_refused(toy, monkeypatch):
    """python -O (PYTHONOPTIMIZE) strips every assert: a failing case passes."""
    monkeypatch.setenv("TOY_FAIL", "test_plain")
    monkeypatch.setenv("PYTHONOPTIMIZE", "1")
    for workers in ([], ["-n", "2"]):
        document, result = toy(*workers)
        _refused(document, result, "Python ran with -O (PYTHONOPTIMIZE)")


def test_a_replaced_plugin_fixture_is_refused(toy, pytester):
    """A conftest beside the suite puts a fixture of its own in place of the plugin's."""
    (pytester.path / "conftest.py").write_text("from types import SimpleNamespace\nimport pytest\n\n\n"
                                               "@pytest.fixture\ndef palw_session():\n"
                                               "    return SimpleNamespace(config=1)\n")
    document, result = toy()
    assert result.ret == 0
    _refused(document, result, "1 fixture(s) the suite uses come from outside the plugin and the suite (palw_session")


def test_an_exit_status_changed_in_a_cleanup_is_refused(toy):
    document, result = toy("-p", "toy_exit_in_cleanup")
    assert result.ret == 4
    _refused(document, result, "pytest exited with status 4")


def test_a_process_that_dies_before_pytest_returns_leaves_no_certificate(toy, pytester):
    result = pytester.runpytest_subprocess("suite", "-p", "palw_toy_stub", "-p", "no:cacheprovider", "-p", "toy_dies",
                                           f"--palw-certificate={pytester.path / 'died.json'}")
    assert result.ret == 1 and not (pytester.path / "died.json").exists()


def test_no_terminal_reporter_still_certifies(toy):
    # pytest-retry (installed by the test extras) reads the terminal's --verbose in pytest_configure
    document, result = toy("-p", "no:terminal", "-p", "no:pytest-retry")
    assert result.ret == 0 and _verdict(document)["certified"] is True, _reasons(document)


def test_node_ids_that_select_nothing_less_still_certify(toy, pytester):
    """A node id outside the suite, or one that names a whole suite function beside the suite."""
    (pytester.mkdir("extra") / "test_extra.py").write_text("def test_a():\n    pass\n")
    document, result = toy("extra/test_extra.py::test_a")
    assert _verdict(document)["certified"] is True, _reasons(document)
    document, result = toy("suite/test_claims.py::test_index")
    assert _verdict(document)["certified"] is True, _reasons(document)


def test_deselecting_the_exempt_case_still_certifies(toy):
    document, result = toy("--deselect", "suite/test_claims.py::test_metal")
    assert _verdict(document)["certified"] is True, _reasons(document)


def test_a_usage_error_leaves_no_old_certificate(toy, pytester):
    certificate = pytester.path / "cert.json"
    for named in ([f"--palw-certificate={certificate}"], []):  # on the command line, then in the ini file
        if not named:
            pytester.makeini(f"[pytest]\npalw_certificate = {certificate}\n")
        certificate.write_text(json.dumps({"verdict": {"certified": True}}))
        certificate.with_suffix(".html").write_text("<h1>CERTIFIED</h1>")
        result = pytester.runpytest_subprocess("suite", "-p", "palw_toy_stub", *named, "--no-such-option")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert not certificate.exists() and not certificate.with_suffix(".html").exists()


def test_every_local_plugin_is_named_in_the_certificate(toy, pytester):
    document, _ = toy("-p", "toy_xfail")
    local = {entry["module"]: entry for entry in document["pytest"]["local"]}
    assert {"palw_toy_stub", "toy_xfail"} <= set(local)
    assert local["toy_xfail"]["sha256"] == hashlib.sha256((pytester.path / "toy_xfail.py").read_bytes()).hexdigest()


def test_stop_at_first_failure_is_refused(toy, monkeypatch):
    monkeypatch.setenv("TOY_FAIL", "test_index[0]")
    document, result = toy("-x")
    _refused(document, result, "1 case(s) failed", "the run was interrupted", "expected case(s) never reported")


def test_every_reason_is_listed(toy, monkeypatch):
    """Several things wrong at once: each is named, not only the first."""
    monkeypatch.setenv("TOY_FAIL", "test_index[0]")
    document, result = toy("--deselect", "suite/test_other.py::test_gpu", "-p", "toy_rerun")
    _refused(document, result, "1 case(s) failed", "expected case(s) never reported", "pytest does not name (rerun)",
             "partial run: 1 conformance case(s) deselected", "pytest exited with status 1")
