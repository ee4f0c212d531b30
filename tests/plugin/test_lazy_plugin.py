"""Installed, the plugin is loaded by every pytest run of the environment: a run that does not use
the suite must not import the session, the runtime driver, numpy or cffi (their cost is measured
by benchmarks/bench_plugin_overhead.py)."""

import subprocess
import sys

HEAVY = ("numpy", "cffi", "pytest_palw.runtime", "pytest_palw.session", "pytest_palw.controller",
         "pytest_palw.certificate", "pytest_palw.fixtures.oracles.launch_table")


def _imported(importtime_stderr: str) -> set[str]:
    """The modules ``python -X importtime`` says it imported."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def _heavy(modules: set[str]) -> list[str]:
    return sorted(name for name in modules if any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY))


def test_the_entry_point_module_imports_nothing_heavy():
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pytest_palw.plugin"],
                            capture_output=True, text=True, check=True)
    modules = _imported(result.stderr)
    assert "pytest_palw.plugin" in modules
    assert _heavy(modules) == []


def test_an_unrelated_run_never_starts_the_session(pytester):
    """The plugin is autoloaded (its pytest11 entry point), its options and marks registered; a
    suite that uses none of it loads nothing of the session."""
    pytester.makepyfile("""
        import sys

        def test_unrelated(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("palw")
            assert any(line.startswith("palw_gpu:") for line in pytestconfig.getini("markers"))
            assert [name for name in sys.modules if name.split(".")[0] in ("numpy", "cffi")
                    or name.startswith(("pytest_palw.runtime", "pytest_palw.session"))] == []
            assert pytestconfig.pluginmanager.get_plugin("palw-controller") is None
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert result.parseoutcomes() == {"passed": 1}


def test_a_palw_option_starts_the_session_and_the_controller(pytester, tmp_path):
    certificate = tmp_path / "cert.json"
    pytester.makepyfile("""
        import sys

        def test_started(pytestconfig):
            assert "pytest_palw.session" in sys.modules
            assert pytestconfig.pluginmanager.get_plugin("palw-controller") is not None
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--palw-certificate={certificate}")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert result.parseoutcomes() == {"passed": 1}
