"""Shared inputs of the build tests: the real sdist (cached once, in the user's cache) and a patched tree.

The sdist and the full build live in the shared cache (``paths.cache_dir``, honouring
$PALW_CACHE_DIR) so one download and one build serve every run and the lead's runtime
fixture; everything a test writes goes under its tmp_path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_palw.build.patching import apply_patch_set, copy_tree, current_patch_set
from pytest_palw.build.source import locate_source, materialize


@pytest.fixture(scope="session")
def run_palw():
    """``run_palw("build", "--source", x)``: the CLI in a child process, as a user runs it."""

    def run(*args: str, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest_palw.cli", *map(str, args)],
                              capture_output=True, text=True, env={**os.environ, **(env or {})},
                              timeout=timeout)

    return run


@pytest.fixture(scope="session")
def sdist_source():
    """The verified sdist, downloaded on first use and cached across runs, and its extracted tree."""
    ref = locate_source(None)
    return materialize(ref)


@pytest.fixture(scope="session")
def patched_tree(sdist_source, tmp_path_factory) -> Path:
    """The 0.3.34 tree with the seed patch and the overlays applied, once per session."""
    tree = tmp_path_factory.mktemp("patched") / "llama.cpp"
    copy_tree(sdist_source.tree, tree)
    apply_patch_set(tree, current_patch_set())
    return tree
