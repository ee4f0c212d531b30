"""The certificate says where each golden a run compared with came from: shipped with the suite
(SHIPPED.json, by its bytes) or recorded where the suite is installed, when and by which build; a
golden recorded by the build under test is a comparison of the runtime with itself."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from pytest_palw.goldens import GOLDENS_DIR, SHIPPED
from pytest_palw.paths import CONFORMANCE_DIR
from pytest_palw.runtime.codec import fingerprint

REDIRECT = '''
"""Test stub: the goldens live in a copy beside this file (a recording run must not edit the suite)."""
from pathlib import Path

import pytest_palw.goldens

pytest_palw.goldens.GOLDENS_DIR = Path(__file__).resolve().parent / "goldens"
'''
CASE = str(CONFORMANCE_DIR / "test_golden_streams.py") + "::test_cpu_reference_stream"


def test_every_committed_golden_is_listed_as_shipped_by_its_bytes():
    listed = json.loads((GOLDENS_DIR / SHIPPED).read_text())["goldens"]
    found = {(path.parent.name, path.name): path for path in GOLDENS_DIR.rglob("*.bin")}
    assert set(found) == {(module, name) for module, files in listed.items() for name in files}
    for (module, name), path in found.items():
        entry = listed[module][name]
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert entry["fingerprint"] == fingerprint(path.read_bytes())


def test_a_shipped_golden_is_named_as_shipped(pytester, tmp_path):
    certificate = tmp_path / "cert.json"
    pytester.runpytest_subprocess(CASE, "-p", "no:cacheprovider", f"--palw-certificate={certificate}")
    goldens = json.loads(certificate.read_text())["goldens"]
    entry = goldens["test_cpu_reference_stream[reference-cpu-tiny-t268].bin"]
    assert entry["origin"] == "shipped with the suite" and entry["fingerprint"] == "3cc59f0b6165bd8e"
    assert "self_comparison" not in entry


def test_a_golden_recorded_here_says_by_whom_and_that_it_compares_the_runtime_with_itself(
        pytester, tmp_path, monkeypatch):
    shutil.copytree(GOLDENS_DIR, pytester.path / "goldens")
    (pytester.path / "palw_goldens_copy.py").write_text(REDIRECT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))
    common = [CASE, "-p", "palw_goldens_copy", "-p", "no:cacheprovider", "--palw-token=7"]
    recording = pytester.runpytest_subprocess(*common, "--snapshot-update", "--snapshot-no-cleanup")
    golden = pytester.path / "goldens" / "test_golden_streams" / "test_cpu_reference_stream[reference-cpu-tiny-t7].bin"
    assert golden.is_file(), recording.stdout.str()[-2000:]
    recorded = json.loads(golden.with_name(golden.name + ".json").read_text())
    assert recorded["build_key"] and recorded["device"] == "cpu" and recorded["recorded_at"]

    certificate = tmp_path / "cert.json"
    pytester.runpytest_subprocess(*common, f"--palw-certificate={certificate}")
    entry = json.loads(certificate.read_text())["goldens"][golden.name]
    assert entry["origin"] == "recorded where the suite is installed, not shipped with it"
    assert entry["recorded"] == recorded and entry["sha256"] == hashlib.sha256(golden.read_bytes()).hexdigest()
    assert "compares the runtime with itself" in entry["self_comparison"]
