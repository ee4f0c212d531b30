"""The verdict never says more than what ran: stale certificates, interrupted runs, recording runs,
bad options and a stuck load each give an honest, one-line answer."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.paths import CONFORMANCE_DIR
from pytest_palw.selection import golden_recording_reasons


def test_collect_only_never_reads_back_an_old_certificate(tmp_path, run_palw, stale_certificate):
    """The stale CERTIFIED file is replaced by this run's verdict: nothing ran, nothing certified."""
    certificate = stale_certificate(tmp_path / "palw-certificate.json")
    result = run_palw("certify", "--require-certified", f"--certificate={certificate}", "--", "--collect-only",
                      "-p", "no:cacheprovider", cwd=tmp_path)
    assert result.returncode != 0, result.stdout[-2000:]
    assert "CERTIFIED" not in result.stdout + result.stderr
    verdict = json.loads(certificate.read_text())["verdict"]
    assert verdict["certified"] is False and verdict["passed"] == 0
    assert any(reason.startswith("--collect-only") for reason in verdict["reasons"]), verdict["reasons"]


def test_a_pytest_that_fails_to_start_leaves_no_old_certificate_or_page(tmp_path, run_palw, stale_certificate):
    """A bad -p stops pytest before any plugin hook: `palw certify` removed the old JSON and page first."""
    certificate = stale_certificate(tmp_path / "palw-certificate.json")
    page = certificate.with_suffix(".html")
    page.write_text("<h1>CERTIFIED</h1>")
    result = run_palw("certify", "--require-certified", f"--certificate={certificate}", "--", "-p", "no_such_plugin_x",
                      cwd=tmp_path)
    assert result.returncode != 0 and "no certificate written" in result.stdout
    assert not certificate.exists() and not page.exists()


def test_a_failed_preflight_never_reads_back_an_old_certificate(tmp_path, run_palw, stale_certificate):
    certificate = stale_certificate(tmp_path / "palw-certificate.json")
    result = run_palw("certify", "--require-certified", f"--certificate={certificate}",
                      f"--model={tmp_path / 'missing.gguf'}", "--", "-p", "no:cacheprovider", cwd=tmp_path)
    assert result.returncode != 0
    assert "CERTIFIED" not in result.stdout + result.stderr
    assert not certificate.exists()


def test_pytest_alone_discards_an_old_certificate(pytester, tmp_path, stale_certificate):
    """The plugin itself, without `palw certify`: the old CERTIFIED file is gone before the run, and
    what stands after it is this run's verdict."""
    certificate = stale_certificate(tmp_path / "cert.json")
    pytester.runpytest_subprocess(str(CONFORMANCE_DIR), "--collect-only", "-q", "-p", "no:cacheprovider",
                                  f"--palw-certificate={certificate}")
    assert json.loads(certificate.read_text())["verdict"]["certified"] is False


INTERRUPTER = """
import pytest

def pytest_runtest_call(item):
    if item.name == "test_no_other_class":
        raise KeyboardInterrupt
"""


def test_an_interrupted_run_counts_as_pytest_does(pytester, tmp_path, monkeypatch):
    """Ctrl-C inside a case: the case's setup passed, its call never finished. pytest counts it
    nowhere; neither may the certificate, and the verdict says the run was interrupted."""
    pytester.makepyfile(palw_interrupter=INTERRUPTER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))
    certificate = tmp_path / "cert.json"
    result = pytester.runpytest_subprocess(str(CONFORMANCE_DIR / "test_class_counts.py"), "-p",
                                           "palw_interrupter", "-p", "no:cacheprovider",
                                           f"--palw-certificate={certificate}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    outcomes = result.parseoutcomes()
    summary = json.loads(certificate.read_text())["summary"]
    for name in ("passed", "failed", "skipped"):
        assert summary[name] == outcomes.get(name, 0), (name, summary, outcomes)
    assert summary["incomplete"] == 1
    reasons = json.loads(certificate.read_text())["verdict"]["reasons"]
    assert any(reason.startswith("the run was interrupted") for reason in reasons), reasons


def test_a_non_hex_kernel_digest_stops_the_session_in_one_line(pytester):
    result = pytester.runpytest_subprocess(str(CONFORMANCE_DIR / "test_class_counts.py"), "-p",
                                           "no:cacheprovider", "--palw-kernel-digest=not-hex")
    assert result.ret == 2
    lines = [line for line in result.stdout.lines + result.stderr.lines if "palw:" in line]
    # pytest shows its exit message on stdout and stderr: one cause, one line each
    assert lines and all("--palw-kernel-digest 'not-hex' is not one nonzero sha256" in line for line in lines)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_load_probe_timeout_is_one_line(tmp_path, cpu_build):
    from pytest_palw.fixtures.models.catalog import ensure_model
    from pytest_palw.probes.load_probe import LoadProbe

    with pytest.raises(RuntimeLibraryError) as stuck:
        LoadProbe(cpu_build.path, ensure_model("tiny"), timeout=0.01).check()
    assert "did not finish in 0.01 s" in str(stuck.value) and "\n" not in str(stuck.value)


@pytest.mark.parametrize("dest", ["update_snapshots", "update_new_snapshots_only"])
def test_a_golden_recording_run_is_never_certified(dest):
    config = SimpleNamespace(option=SimpleNamespace(**{dest: True}))
    assert golden_recording_reasons(config) and "recorded, not checked" in golden_recording_reasons(config)[0]
    assert golden_recording_reasons(SimpleNamespace(option=SimpleNamespace())) == []


def test_a_device_class_without_goldens_is_one_reason(pytester, tmp_path):
    """A token with no committed golden stands for a device class never certified here: the golden
    case is not run, and the verdict says so once, with how to record it (no snapshot diff)."""
    certificate = tmp_path / "cert.json"
    result = pytester.runpytest_subprocess(str(CONFORMANCE_DIR / "test_golden_streams.py"), "-p",
                                           "no:cacheprovider", "--palw-token=7",
                                           f"--palw-certificate={certificate}")
    document = json.loads(certificate.read_text())
    reasons = [r for r in document["verdict"]["reasons"] if "no committed golden streams" in r]
    assert len(reasons) == 1 and "--snapshot-update" in reasons[0], document["verdict"]
    assert "Snapshot" not in result.stdout.str()
    assert not document["verdict"]["certified"]


def test_setup_plan_is_never_certified(tmp_path, run_palw):
    """The issue's own command on this host: `palw certify --require-certified -- --setup-plan`. No case
    body runs; the verdict names the cases that did not run and the GPU tiers, and the exit is non-zero."""
    certificate = tmp_path / "palw-certificate.json"
    result = run_palw("certify", "--require-certified", f"--certificate={certificate}", "--", "--setup-plan", "-p",
                      "no:cacheprovider", cwd=tmp_path)
    assert result.returncode != 0, result.stdout[-3000:]
    document = json.loads(certificate.read_text())
    verdict, reasons = document["verdict"], " | ".join(document["verdict"]["reasons"])
    assert verdict["certified"] is False and verdict["passed"] == 0 and verdict["expected"] == len(
        document["cases"]) - 1 > 3000
    assert "case(s) whose body never ran to its end" in reasons and "--setup-plan" in reasons
    assert "PINNED-tier case(s) not run" in reasons and "GPU-tier case(s) not run" in reasons
    assert "not certified (0 of " in result.stdout


@pytest.mark.parametrize("route, reason", [
    (["--setup-only"], "--setup-only: fixtures were set up"),
    (["-o", "python_functions=x"], "pytest exited with status 5 (NO_TESTS_COLLECTED)"),
    (["--deselect", "conformance/test_reject_index.py::test_reject_v2[180]"],
     "expected case(s) never reported (first: conformance/test_reject_index.py::test_reject_v2[180])"),
    (["-p", "no:randomly"], "PINNED-tier case(s) not run"),
], ids=["setup-only", "python-functions", "deselect-one-reject-case", "no-randomly"])
def test_palw_certify_refuses_each_route_on_the_real_suite(tmp_path, route, reason, run_palw):
    """The real suite on this host's CPU runtime: never certified (the GPU tiers cannot run here),
    `--require-certified` exits non-zero, and each route is named for what it did. A plugin option
    that drops nothing leaves only the GPU tiers' reasons."""
    certificate = tmp_path / "palw-certificate.json"
    result = run_palw("certify", "--require-certified", f"--certificate={certificate}", "--", *route,
                      "-p", "no:cacheprovider", cwd=tmp_path)
    assert result.returncode != 0, result.stdout[-2000:]
    verdict = json.loads(certificate.read_text())["verdict"]
    assert verdict["certified"] is False and any(reason in line for line in verdict["reasons"]), verdict["reasons"]
    if route[0] == "-p":
        assert all("tier case(s) not run" in line for line in verdict["reasons"]), verdict["reasons"]


def test_setup_plan_through_pytest_addopts_is_never_certified(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "--setup-plan")
    certificate = tmp_path / "cert.json"
    result = pytester.runpytest_subprocess(str(CONFORMANCE_DIR), "-p", "no:cacheprovider",
                                           f"--palw-certificate={certificate}")
    verdict = json.loads(certificate.read_text())["verdict"]
    assert verdict["certified"] is False and verdict["passed"] == 0, result.stdout.str()[-2000:]
    assert any(reason.startswith("--setup-plan") for reason in verdict["reasons"])


def test_pytest_alone_writes_the_page_beside_the_certificate(pytester, tmp_path):
    """`pytest --palw-certificate` writes the same HTML page as `palw certify` (one document, rendered)."""
    certificate = tmp_path / "cert.json"
    pytester.runpytest_subprocess(str(CONFORMANCE_DIR / "test_class_counts.py"), "-p", "no:cacheprovider",
                                  f"--palw-certificate={certificate}")
    from pytest_palw.certificate.html import render

    document = json.loads(certificate.read_text())
    page = (tmp_path / "cert.html").read_text()
    assert page == render(document)
    assert f"{document['verdict']['passed']} of {document['verdict']['expected']} expected cases passed" in page


def test_certify_writes_its_verdict_and_the_report_beside_it(tmp_path, run_palw):
    """`palw certify` on this host (CPU tier): an honest verdict, and the HTML page next to the JSON."""
    certificate = tmp_path / "palw-certificate.json"
    result = run_palw("certify", f"--certificate={certificate}", "-n", "2", "--", "-p", "no:cacheprovider",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    document = json.loads(certificate.read_text())
    assert document["verdict"]["certified"] is False
    page = certificate.with_suffix(".html")
    assert page.is_file() and "not certified" in result.stdout and str(page) in result.stdout
    assert "NOT CERTIFIED" in page.read_text().upper()


def test_certify_runs_with_the_suites_plugins_only(tmp_path, run_palw):
    """A plugin the host happens to have (here pytest-benchmark and hypothesis, installed with the
    test extra) is not loaded into a certification; the certificate names the plugins that were."""
    certificate = tmp_path / "certificate.json"
    result = run_palw("certify", f"--certificate={certificate}", "--", "-p", "no:cacheprovider", "-k",
                      "test_class_counts", cwd=tmp_path)
    assert certificate.is_file(), result.stdout[-3000:] + result.stderr[-2000:]
    document = json.loads(certificate.read_text())
    names = {entry.split()[0] for entry in document["pytest"]["plugins"]}
    assert names == {"pytest-palw", "pytest-xdist", "syrupy"}, document["pytest"]


def test_a_failing_tier_check_exits_with_its_own_code():
    """A runtime that fails while a case's tier is checked stops the session with that error's
    line and exit code (RuntimeLibraryError: 7), as at preflight, not a fixed code."""
    from types import SimpleNamespace

    from pytest_palw.errors import RuntimeLibraryError
    from pytest_palw.session import skip_if_tier_unavailable

    def unloadable(tier):
        raise RuntimeLibraryError("libllama.so could not be loaded: rebuild with `palw build`")

    session = SimpleNamespace(tier_skip_reason=unloadable)
    with pytest.raises(pytest.exit.Exception) as stopped:
        skip_if_tier_unavailable(session, item=SimpleNamespace(keywords={"palw_gpu": True}))
    assert stopped.value.returncode == RuntimeLibraryError.exit_code
    assert str(stopped.value.msg).startswith("palw: libllama.so could not be loaded")


def test_only_the_worker_a_pytest_exit_stopped_has_its_crash_report_set_aside():
    """xdist's crash report of the case whose pytest.exit stopped its worker is not a crash. xdist
    replaces that worker under the same id: a crash of the replacement is still a crash."""
    from pytest_palw.certificate import Certificate
    from pytest_palw.controller import Controller

    controller = Controller.__new__(Controller)  # the two hooks under test read these two fields only
    controller.certificate, controller.stopped_workers = Certificate(), []
    stopped = SimpleNamespace(gateway=SimpleNamespace(id="gw1"),
                              workeroutput={"palw_stop": {"message": "palw: stop", "returncode": 7}})
    replacement = SimpleNamespace(gateway=SimpleNamespace(id="gw1"), workeroutput={})
    controller.pytest_testnodedown(stopped, "keyboard-interrupt")
    assert controller.stopped_case(SimpleNamespace(when="???", node=stopped))
    assert not controller.stopped_case(SimpleNamespace(when="call", node=stopped))
    assert not controller.stopped_case(SimpleNamespace(when="???", node=replacement))
    controller.pytest_testnodedown(replacement, "Not properly terminated")
    assert controller.certificate.run.crashed_workers == ["gw1 crashed: Not properly terminated"]
