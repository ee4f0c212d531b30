"""The pre-session load probe: a runtime that kills Python while loading stops the session in one line."""

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.load_probe import probe_model_load, verdict


def test_a_child_killed_by_a_signal_is_named():
    line = verdict(-11, Path("/builds/cuda/palw-manifest.json"), Path("/models/full.gguf"))
    assert "kills the process (SIGSEGV)" in line and "palw build --force" in line
    assert "\n" not in line


@pytest.mark.parametrize("returncode", [0, 1])
def test_a_clean_exit_or_ordinary_error_is_left_to_the_in_process_load(returncode):
    assert verdict(returncode, Path("lib"), Path("model.gguf")) is None


def test_the_real_cpu_runtime_loads_the_tiny_model():
    """The probe's child itself: it must load the model and exit 0 (a failed load exits 1, which
    probe_model_load leaves to the in-process load, so calling that alone would pass)."""
    from pytest_palw.build import api
    from pytest_palw.fixtures.models import ensure_model

    manifest = api.find_manifest(variant="cpu")
    if manifest is None:
        pytest.skip("no CPU runtime built yet: run `palw build`")
    result = subprocess.run([sys.executable, "-m", "pytest_palw.load_probe", str(manifest.path),
                             str(ensure_model("tiny"))], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"the probe child could not load the tiny model:\n{result.stderr[-3000:]}"


def test_a_missing_model_is_not_mistaken_for_a_crash(tmp_path):
    from pytest_palw.build import api

    manifest = api.find_manifest(variant="cpu")
    if manifest is None:
        pytest.skip("no CPU runtime built yet: run `palw build`")
    try:
        probe_model_load(manifest.path, tmp_path / "absent.gguf")
    except RuntimeLibraryError as error:  # pragma: no cover - the assertion explains
        pytest.fail(f"an ordinary load failure was reported as a crash: {error}")
