"""The cpu runtime built once (shared cache, like the lead's runtime fixture) and reused."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from pytest_palw import paths
from pytest_palw.builder import api
from pytest_palw.builder.manifest import MANIFEST_NAME, Manifest
from pytest_palw.builder.patching import read_series
from pytest_palw.cache import sha256_file, tree_digest


@pytest.fixture(scope="session")
def cpu_manifest(sdist_source) -> Manifest:
    # No binding install here: the test suite must not change the interpreter it runs in.
    return api.build("cpu", install_binding=False)


def test_manifest_lists_every_input(cpu_manifest, sdist_source):
    # The build may be a cache hit made by another checkout (CI keeps the cache, the clone is new): the key
    # is the inputs' content, so each input is checked against this checkout's file, by name and digest,
    # never by the path the building checkout recorded (it may be gone).
    inputs = cpu_manifest.inputs
    assert inputs["sdist"]["sha256"] == sdist_source.ref.sha256
    assert inputs["seed_patch"]["sha256"] == sha256_file(paths.SEED_PATCH)
    listed = read_series(paths.OVERLAYS_DIR)
    assert listed, "patches/overlays/series names no overlay: the pinned-cc overlay is part of every build"
    assert [Path(entry["path"]).name for entry in inputs["overlays"]] == [path.name for path in listed]
    for entry, path in zip(inputs["overlays"], listed):
        assert entry["sha256"] == sha256_file(path)
    native = inputs["native"]
    tracked = subprocess.run(["git", "ls-files", "."], cwd=paths.NATIVE_RUNTIME_DIR, capture_output=True,
                             text=True, check=True).stdout.split()
    assert tracked and set(native["files"]) == set(tracked)
    for name, digest in native["files"].items():
        assert digest == sha256_file(paths.NATIVE_RUNTIME_DIR / name), name
    assert native["sha256"] == tree_digest(paths.NATIVE_RUNTIME_DIR)
    assert "palw_cuda_llama_mmvq.h" in native["files"]
    assert cpu_manifest.variant == "cpu" and cpu_manifest.trace
    assert "-DGGML_CUDA_PALW_TRACE=ON" in cpu_manifest.cmake_flags
    assert all(cpu_manifest.tools[name] for name in ("cmake", "ninja", "cc", "cxx"))


def test_outputs_exist_with_their_digests(cpu_manifest):
    assert cpu_manifest.outputs_exist()
    assert sha256_file(cpu_manifest.libllama) == cpu_manifest.outputs["libllama_sha256"]
    names = {entry["name"] for entry in cpu_manifest.outputs["ggml_libs"]}
    assert {"libggml.so", "libggml-base.so", "libggml-cpu.so"} <= names
    for entry in cpu_manifest.outputs["ggml_libs"]:
        assert sha256_file(Path(entry["path"])) == entry["sha256"]
    assert b"llama_palw_cuda_trace_attach_v2\x00" in cpu_manifest.libllama.read_bytes()
    assert Path(cpu_manifest.binding_python_path, "llama_cpp", "__init__.py").is_file()
    assert Manifest.load(cpu_manifest.path).to_json() == cpu_manifest.to_json()


def test_observer_runs(cpu_manifest):
    import subprocess

    observer = cpu_manifest.outputs["tools"]["observer"]
    result = subprocess.run([observer, "--help"], capture_output=True, text=True, timeout=60)
    assert "--model MODEL" in result.stdout + result.stderr


def test_second_build_is_a_cache_hit(cpu_manifest, run_palw):
    started = time.monotonic()
    result = run_palw("build", "--variant", "cpu", "--print-manifest", "--no-binding-install")
    elapsed = time.monotonic() - started
    print(f"warm `palw build --variant cpu`: {elapsed:.2f} s")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(cpu_manifest.path)
    assert "palw: cache hit:" in result.stderr and "cmake configure" not in result.stderr
    again = api.find_manifest("cpu")
    assert again is not None and again.key == cpu_manifest.key
    assert json.loads(Path(cpu_manifest.path).read_text())["key"] == cpu_manifest.key
    assert Path(cpu_manifest.path).name == MANIFEST_NAME


def test_find_manifest_never_downloads_or_builds(private_cache, monkeypatch):
    from pytest_palw.builder import source

    monkeypatch.setattr(source, "download_sdist", lambda: pytest.fail("find_manifest downloaded"))
    assert api.find_manifest("cpu") is None
    assert not list((private_cache / "builds").iterdir()) if (private_cache / "builds").exists() else True
