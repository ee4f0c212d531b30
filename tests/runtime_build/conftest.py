"""Shared inputs of the build tests: the real sdist (cached once, in the user's cache) and a patched tree.

The sdist and the full build live in the shared cache (``paths.cache_dir``, honouring
$PALW_CACHE_DIR) so one download and one build serve every run and the lead's runtime
fixture; everything a test writes goes under its tmp_path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_palw.build.patching import apply_patch_set, copy_tree, current_patch_set
from pytest_palw.build.source import locate_source, materialize


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
