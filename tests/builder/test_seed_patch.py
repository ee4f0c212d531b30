"""The system under test is exactly the seed patch, and it applies to llama-cpp-python 0.3.34's tree."""

from __future__ import annotations

from pytest_palw import paths
from pytest_palw.builder.patching import current_patch_set
from pytest_palw.cache import sha256_file

SEED_SHA256 = "3249774cbdc96a7fd0aa24ddd67c8b642c5ac9a60176c3e2ff496ef0371ebbb0"


def test_seed_patch_is_byte_for_byte_the_seed():
    data = paths.SEED_PATCH.read_bytes()
    assert sha256_file(paths.SEED_PATCH) == SEED_SHA256
    assert not data.endswith(b"\n"), "the seed's last line has no newline; keep the file verbatim"
    assert data.endswith(b"receipt-authority=false")


def test_seed_patch_and_overlays_apply_to_the_sdist_tree(patched_tree):
    # Files the seed patch creates and changes, and a line it adds.
    assert (patched_tree / "tools" / "palw-observer" / "palw-observer.cpp").is_file()
    assert (patched_tree / "tools" / "palw-mmvq-smoke" / "palw-mmvq-smoke.cpp").is_file()
    patchset = (patched_tree / "tools" / "palw-observer" / "PALW_PATCHSET").read_text()
    assert patchset.startswith("palw-full-patch-v1")
    assert "GGML_CUDA_PALW_TRACE" in (patched_tree / "ggml" / "CMakeLists.txt").read_text()
    # The sdist's submodule gitlink is gone (it breaks git apply) and no rejects were left.
    assert not (patched_tree / ".git").exists()
    assert not list(patched_tree.rglob("*.rej"))


def test_every_overlay_in_series_is_accounted_for():
    patch_set = current_patch_set()
    assert patch_set.seed_sha256 == SEED_SHA256
    for path, digest in patch_set.overlays:
        assert path.parent == paths.OVERLAYS_DIR
        assert digest == sha256_file(path)
