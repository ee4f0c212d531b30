"""The pre-session load probe: a runtime that kills Python while loading stops the session in one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.probes.load_probe import LoadProbe, verdict


def test_a_child_killed_by_a_signal_is_named():
    line = verdict(-11, Path("/builds/cuda/palw-manifest.json"), Path("/models/full.gguf"))
    assert "kills the process (SIGSEGV)" in line and "palw build --force" in line
    assert "\n" not in line
    # A brought runtime (no manifest) is not ours to rebuild: its fix names the vendor's own build.
    brought = verdict(-11, Path("/opt/vendor/lib"), Path("/models/full.gguf"), brought=True)
    assert "kills the process (SIGSEGV)" in brought and "palw build" not in brought
    assert "one C++ runtime" in brought and "relink" in brought


@pytest.mark.parametrize("returncode", [0, 1])
def test_a_clean_exit_or_ordinary_error_is_left_to_the_in_process_load(returncode):
    assert verdict(returncode, Path("lib"), Path("model.gguf")) is None


def test_the_real_cpu_runtime_loads_the_tiny_model(cpu_build):
    """The probe's child itself: it must load the model and exit 0 (a failed load exits 1, which
    LoadProbe.check leaves to the in-process load, so calling that alone would pass)."""
    from pytest_palw.fixtures.models.catalog import ensure_model

    manifest = cpu_build
    result = subprocess.run([sys.executable, "-m", "pytest_palw.probes.load_probe", str(manifest.path),
                             str(ensure_model("tiny"))], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"the probe child could not load the tiny model:\n{result.stderr[-3000:]}"


def test_a_missing_model_is_not_mistaken_for_a_crash(tmp_path, cpu_build):
    try:
        LoadProbe(cpu_build.path, tmp_path / "absent.gguf").check()
    except RuntimeLibraryError as error:  # pragma: no cover - the assertion explains
        pytest.fail(f"an ordinary load failure was reported as a crash: {error}")


CRASHING_CHILD = '''
import sys

import pytest_palw.probes.load_probe as probe

# The probe's child dies of SIGSEGV, as a runtime with two C++ runtimes did under Python.
probe.child_command = lambda location, model: [
    sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_crashing_load_stops_the_session_before_any_case(pytester, monkeypatch, workers, cpu_build,
                                                           shared_palw_cache):
    """The probe starts beside the session (under xdist: while the workers collect); its verdict
    still comes first: one line, the probe's exit code, no case run, a certificate that says why."""
    from pytest_palw.paths import CONFORMANCE_DIR

    pytester.makepyfile(crashing_probe=CRASHING_CHILD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))
    certificate = pytester.path / "certificate.json"
    result = pytester.runpytest_subprocess(str(CONFORMANCE_DIR), "-p", "crashing_probe", *workers, "-p",
                                           "no:cacheprovider", "-q", f"--palw-certificate={certificate}", timeout=900)
    output = result.stdout.str() + "\n" + result.stderr.str()
    assert result.ret == RuntimeLibraryError.exit_code, output[-3000:]
    [line] = [line for line in output.splitlines() if "kills the process (SIGSEGV)" in line]
    assert "palw build --force" in line
    document = json.loads(certificate.read_text())
    assert document["summary"]["collected"] == 0, output[-3000:]  # no case reported anything
    assert document["verdict"]["certified"] is False
    assert any("kills the process (SIGSEGV)" in reason for reason in document["verdict"]["reasons"])
