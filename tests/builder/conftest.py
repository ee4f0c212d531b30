"""Shared inputs of the build tests: a patched tree (the sdist itself, ``sdist_source``, is in
tests/conftest.py: the CLI tests use it too).

The sdist and the full build live in the shared cache (``paths.cache_dir``, honouring
$PALW_CACHE_DIR) so one download and one build serve every run and the lead's runtime
fixture; everything a test writes goes under its tmp_path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_palw.builder.patching import apply_patch_set, copy_tree, current_patch_set


@pytest.fixture(scope="session")
def patched_tree(sdist_source, tmp_path_factory) -> Path:
    """The 0.3.34 tree with the seed patch and the overlays applied, once per session."""
    tree = tmp_path_factory.mktemp("patched") / "llama.cpp"
    copy_tree(sdist_source.tree, tree)
    apply_patch_set(tree, current_patch_set())
    return tree
