"""Fixtures the test packages under tests/ share: the `palw` CLI in a child process, this host's
cached CPU build (or a skip), a private pytest-palw cache, the shared cache pinned for pytester's
children, the verified sdist, a fake llama.cpp tree, the host ABI and an older CERTIFIED
certificate a run must not leave standing.

Kept apart on purpose (each says why where it lives): tests/plugin makes ``shared_palw_cache``
autouse (every test of it starts pytest with pytester); tests/fixtures/models' model cache is
private per run and set only while a model is ensured; the oracle, wheel and full-build tests
build the CPU runtime when it is missing instead of skipping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Imported before any test: pytester puts sys.modules back as it found it after each test, and a
# numpy first imported during one (a model from fixtures/models/catalog.py, through gguf) cannot be
# imported again in this process ("cannot load module more than once per process").
import numpy  # noqa: F401
import pytest


@pytest.fixture(scope="session")
def run_palw():
    """``run_palw("build", "--source", x)``: the CLI in a child process, as a user runs it."""

    def run(*args, env: dict | None = None, timeout: int = 900, cwd=None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest_palw.cli", *map(str, args)],
                              capture_output=True, text=True, env={**os.environ, **(env or {})},
                              timeout=timeout, cwd=cwd)

    return run


@pytest.fixture(scope="session")
def cpu_build():
    """This host's cached CPU runtime build (its manifest), or a skip that says how to make one."""
    from pytest_palw.builder import api

    manifest = api.find_manifest(variant="cpu")
    if manifest is None:
        pytest.skip("no CPU runtime built yet: run `palw build`")
    return manifest


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    """An empty pytest-palw cache of this test's own: $PALW_CACHE_DIR points at it for the test
    (and for the children it starts, run_palw's included), so the user's cache is never touched."""
    cache = tmp_path / "palw-cache"
    cache.mkdir()
    monkeypatch.setenv("PALW_CACHE_DIR", str(cache))
    return cache


@pytest.fixture(scope="session")
def shared_cache_root() -> Path:
    """This host's pytest-palw cache ($PALW_CACHE_DIR, else the user's cache dir), read once: a session
    fixture is set up before a test's ``pytester``, which moves $HOME (and the user's cache dir with it)."""
    from pytest_palw.paths import cache_root

    return cache_root()


@pytest.fixture
def shared_palw_cache(shared_cache_root, monkeypatch) -> Path:
    """$PALW_CACHE_DIR pinned to this host's cache for the test and the children it starts: pytester
    gives each subprocess a fresh HOME, where the sessions it starts would rebuild the `palw build`
    runtime and the models instead of reusing them. The opposite of ``private_cache``."""
    monkeypatch.setenv("PALW_CACHE_DIR", str(shared_cache_root))
    return shared_cache_root


@pytest.fixture(scope="session")
def sdist_source():
    """The verified sdist, downloaded on first use and cached across runs (the user's cache, so one
    download serves every run), and its extracted tree."""
    from pytest_palw.builder.source import locate_source, materialize

    return materialize(locate_source(None))


@pytest.fixture(scope="session")
def fake_llama_tree():
    """``fake_llama_tree(root)``: the few files that make ``root`` a llama.cpp tree (one line each)."""

    def make(root: Path) -> Path:
        for name in ("CMakeLists.txt", "include/llama.h", "ggml/CMakeLists.txt", "src/llama.cpp"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(f"// {name}\n")
        return root

    return make


@pytest.fixture(scope="session")
def abi():
    """The host ABI: the PALW header and the native codec compiled for this host (cffi)."""
    from pytest_palw.runtime.binding.hostabi import load_host_abi

    return load_host_abi()


@pytest.fixture(scope="session")
def stale_certificate():
    """``stale_certificate(path)``: an older CERTIFIED certificate at ``path`` and its page beside it."""
    from pytest_palw.certificate import page_path

    def write(path: Path) -> Path:
        certified = {"schema": "pytest-palw.certificate", "verdict": {"certified": True, "reasons": []}}
        path.write_text(json.dumps(certified))
        page_path(path).write_text("<p>CERTIFIED</p>\n")
        return path

    return write
