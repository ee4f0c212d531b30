"""Routes an outside review found (2026-12-04) around what the controller hands the workers and the
certificate on disk: each must end not certified, or with no older certificate standing."""

import json
import os
import shutil
import textwrap

import pytest

from pytest_palw.paths import CONFORMANCE_DIR

CASES = str(CONFORMANCE_DIR / "test_class_counts.py")


def _pytest(pytester, *args, timeout=600):
    """pytest in a child process of its own (xdist workers, -p plugins, the environment the test set),
    in ``pytester.path``."""
    return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *map(str, args), timeout=timeout)


def _output(result) -> str:
    return result.stdout.str() + "\n" + result.stderr.str()


def _on_pythonpath(pytester, monkeypatch) -> None:
    """``pytester.path`` (where a test's -p plugin module is) on the PYTHONPATH of the run and its workers."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))


def test_certify_whose_pytest_writes_elsewhere_leaves_no_certificate(run_palw, tmp_path, stale_certificate):
    named, other = tmp_path / "named.json", tmp_path / "other.json"
    stale_certificate(named)
    result = run_palw("certify", "--certificate", named, "--", f"--palw-certificate={other}", CASES, cwd=tmp_path)
    assert result.returncode != 0
    assert "not" in result.stdout and "nothing is certified" in result.stdout
    assert not named.exists() and not named.with_suffix(".html").exists()
    assert not other.exists()


def test_a_plugin_registered_by_a_conftest_still_removes_an_older_certificate(pytester, monkeypatch, tmp_path,
                                                                              stale_certificate):
    pytester.makeconftest('pytest_plugins = ["pytest_palw.plugin"]\n')
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    certificate = tmp_path / "late.json"
    stale_certificate(certificate)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p xdist.plugin -p syrupy")  # after pytester, which clears it
    result = _pytest(pytester, f"--palw-certificate={certificate}", "--palw-model=/nonexistent.gguf")
    assert "does not exist" in _output(result)
    assert not certificate.exists() and not certificate.with_suffix(".html").exists()


@pytest.fixture
def worker_plugin(pytester, monkeypatch):
    """Write a -p plugin module that runs ``body`` in the xdist workers' pytest_configure only."""
    def write(body: str) -> None:
        pytester.makepyfile(palw_worker_only="import os\n\ndef pytest_configure(config):\n"
                            "    if hasattr(config, 'workerinput'):\n"
                            + textwrap.indent(textwrap.dedent(body), " " * 8))
        _on_pythonpath(pytester, monkeypatch)
    return write


def test_a_worker_runs_no_other_model_than_the_one_checked(pytester, monkeypatch, tmp_path, worker_plugin):
    from pytest_palw.fixtures.models.catalog import ensure_model

    model = tmp_path / "model.gguf"
    shutil.copy(ensure_model("tiny"), model)
    worker_plugin("""
        if config.workerinput['workerid'] == 'gw0':
            with open(os.environ['PALW_TEST_MODEL'], 'ab') as handle:
                handle.write(bytes(32))
    """)
    monkeypatch.setenv("PALW_TEST_MODEL", str(model))
    certificate = tmp_path / "c.json"
    result = _pytest(pytester, "-n", "2", "-p", "palw_worker_only", f"--palw-model={model}",
                     f"--palw-certificate={certificate}", CASES)
    assert "changed since the controller checked it" in _output(result)
    document = json.loads(certificate.read_text()) if certificate.exists() else None
    assert document is None or not document["verdict"]["certified"]


def test_a_worker_runs_the_build_the_controller_checked_whatever_its_options(pytester, tmp_path, worker_plugin,
                                                                             cpu_build):
    worker_plugin("config.option.palw_lib = '/nonexistent/palw-manifest.json'\n")
    certificate = tmp_path / "c.json"
    result = _pytest(pytester, "-n", "2", "-p", "palw_worker_only", "--palw-model=profile:tiny",
                     f"--palw-certificate={certificate}", CASES)
    document = json.loads(certificate.read_text())
    assert document["runtime"]["lib_dir"] == str(cpu_build.lib_dir)
    cases = [case for case in document["cases"] if "test_class_counts.py" in case["id"]]
    assert cases and {case["outcome"] for case in cases} == {"passed"}, result.stdout.str()[-2000:]
    assert not [reason for reason in document["verdict"]["reasons"] if "disagree" in reason]


def test_a_launch_changed_on_the_way_is_dropped_and_refuses_the_verdict(pytester, monkeypatch, tmp_path):
    pytester.makepyfile(palw_move_launch=textwrap.dedent("""
        import pytest

        @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after the plugin attached the launch
        def pytest_runtest_makereport(item, call):
            report = yield
            launch = getattr(report, "palw_launch", None)
            if launch is not None and launch["index"] == 5:
                report.palw_launch = {**launch, "index": 6}
            return report
    """))
    _on_pythonpath(pytester, monkeypatch)
    certificate = tmp_path / "c.json"
    _pytest(pytester, "-n", "2", "-p", "palw_move_launch", "--palw-model=profile:tiny",
            f"--palw-certificate={certificate}", f"{CONFORMANCE_DIR / 'test_launch_order.py'}::test_mixed_launch[5]")
    document = json.loads(certificate.read_text())
    case = next(case for case in document["cases"] if case["id"].endswith("test_mixed_launch[5]"))
    assert case["outcome"] == "passed" and case["launch"] is None
    assert any("reported launch" in reason and "test_mixed_launch[5]" in reason
               for reason in document["verdict"]["reasons"])
