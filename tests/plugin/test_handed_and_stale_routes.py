"""Routes an outside review found (2026-12-04) around what the controller hands the workers and the
certificate on disk: each must end not certified, or with no older certificate standing."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from pytest_palw.paths import CONFORMANCE_DIR

CASES = str(CONFORMANCE_DIR / "test_class_counts.py")


def _pytest(*args, cwd, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout)


def test_certify_whose_pytest_writes_elsewhere_leaves_no_certificate(run_palw, tmp_path, stale_certificate):
    named, other = tmp_path / "named.json", tmp_path / "other.json"
    stale_certificate(named)
    result = run_palw("certify", "--certificate", named, "--", f"--palw-certificate={other}", CASES, cwd=tmp_path)
    assert result.returncode != 0
    assert "not" in result.stdout and "nothing is certified" in result.stdout
    assert not named.exists() and not named.with_suffix(".html").exists()
    assert not other.exists()


def test_a_plugin_registered_by_a_conftest_still_removes_an_older_certificate(tmp_path, stale_certificate):
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text('pytest_plugins = ["pytest_palw.plugin"]\n')
    (project / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    certificate = tmp_path / "late.json"
    stale_certificate(certificate)
    result = _pytest(f"--palw-certificate={certificate}", "--palw-model=/nonexistent.gguf", cwd=project,
                     env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "-p xdist.plugin -p syrupy"})
    assert "does not exist" in result.stdout + result.stderr
    assert not certificate.exists() and not certificate.with_suffix(".html").exists()


@pytest.fixture
def worker_plugin(tmp_path):
    """Write a -p plugin module that runs ``body`` in the xdist workers' pytest_configure only."""
    def write(body: str) -> dict:
        (tmp_path / "palw_worker_only.py").write_text(
            "import os\n\ndef pytest_configure(config):\n    if hasattr(config, 'workerinput'):\n"
            + textwrap.indent(textwrap.dedent(body), " " * 8))
        return {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return write


def test_a_worker_runs_no_other_model_than_the_one_checked(tmp_path, worker_plugin):
    from pytest_palw.fixtures.models.catalog import ensure_model

    model = tmp_path / "model.gguf"
    shutil.copy(ensure_model("tiny"), model)
    env = worker_plugin("""
        if config.workerinput['workerid'] == 'gw0':
            with open(os.environ['PALW_TEST_MODEL'], 'ab') as handle:
                handle.write(bytes(32))
    """)
    certificate = tmp_path / "c.json"
    result = _pytest("-n", "2", "-p", "palw_worker_only", f"--palw-model={model}", f"--palw-certificate={certificate}",
                     CASES, cwd=tmp_path, env={**env, "PALW_TEST_MODEL": str(model)})
    assert "changed since the controller checked it" in result.stdout + result.stderr
    document = json.loads(certificate.read_text()) if certificate.exists() else None
    assert document is None or not document["verdict"]["certified"]


def test_a_worker_runs_the_build_the_controller_checked_whatever_its_options(tmp_path, worker_plugin, cpu_build):
    env = worker_plugin("config.option.palw_lib = '/nonexistent/palw-manifest.json'\n")
    certificate = tmp_path / "c.json"
    result = _pytest("-n", "2", "-p", "palw_worker_only", "--palw-model=profile:tiny",
                     f"--palw-certificate={certificate}", CASES, cwd=tmp_path, env=env)
    document = json.loads(certificate.read_text())
    assert document["runtime"]["lib_dir"] == str(cpu_build.lib_dir)
    cases = [case for case in document["cases"] if "test_class_counts.py" in case["id"]]
    assert cases and {case["outcome"] for case in cases} == {"passed"}, result.stdout[-2000:]
    assert not [reason for reason in document["verdict"]["reasons"] if "disagree" in reason]


def test_a_launch_changed_on_the_way_is_dropped_and_refuses_the_verdict(tmp_path):
    (tmp_path / "palw_move_launch.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after the plugin attached the launch
        def pytest_runtest_makereport(item, call):
            report = yield
            launch = getattr(report, "palw_launch", None)
            if launch is not None and launch["index"] == 5:
                report.palw_launch = {**launch, "index": 6}
            return report
    """))
    certificate = tmp_path / "c.json"
    _pytest("-n", "2", "-p", "palw_move_launch", "--palw-model=profile:tiny", f"--palw-certificate={certificate}",
            f"{CONFORMANCE_DIR / 'test_launch_order.py'}::test_mixed_launch[5]", cwd=tmp_path,
            env={"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    document = json.loads(certificate.read_text())
    case = next(case for case in document["cases"] if case["id"].endswith("test_mixed_launch[5]"))
    assert case["outcome"] == "passed" and case["launch"] is None
    assert any("reported launch" in reason and "test_mixed_launch[5]" in reason
               for reason in document["verdict"]["reasons"])
