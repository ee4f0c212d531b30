"""patches/overlays: the series and the pinned-CC overlay, checked against the seed patch text.

Applying needs the llama.cpp source (the build does that); these checks need only the
patch files: the overlay may rewrite only lines the seed adds, and must route every
hard-coded Ada pin of the PALW code through PALW_CUDA_PINNED_CC.
"""

import re

import pytest

from pytest_palw.paths import OVERLAYS_DIR, SEED_PATCH

PINNED_CC_OVERLAY = "0001-palw-pinned-cc.patch"
ADA_PIN = re.compile(r"\.cc != GGML_CUDA_CC_ADA_LOVELACE|\bcc != GGML_CUDA_CC_ADA_LOVELACE")


def series_names() -> list[str]:
    lines = (OVERLAYS_DIR / "series").read_text().splitlines()
    return [name for line in lines if (name := line.split("#", 1)[0].strip())]


def changed_lines(patch_text: str, sign: str) -> list[str]:
    """Added ('+') or removed ('-') lines of a unified diff, without the sign."""
    return [line[1:] for line in patch_text.splitlines()
            if line.startswith(sign) and not line.startswith(sign * 3)]


@pytest.fixture(scope="module")
def overlay_text() -> str:
    return (OVERLAYS_DIR / PINNED_CC_OVERLAY).read_text()


def test_series_names_every_overlay_once_and_nothing_else():
    names = series_names()
    assert names == [PINNED_CC_OVERLAY]
    assert sorted(p.name for p in OVERLAYS_DIR.glob("*.patch")) == sorted(names)


def test_overlay_rewrites_only_lines_the_seed_adds(overlay_text):
    seed_added = set(changed_lines(SEED_PATCH.read_text(), "+"))
    removed = changed_lines(overlay_text, "-")
    assert removed, "the overlay removes nothing"
    assert [line for line in removed if line not in seed_added] == []


def test_overlay_replaces_every_ada_pin_of_the_seed(overlay_text):
    seed_pins = [line for line in changed_lines(SEED_PATCH.read_text(), "+") if ADA_PIN.search(line)]
    removed_pins = [line for line in changed_lines(overlay_text, "-") if ADA_PIN.search(line)]
    assert len(seed_pins) == 3 and sorted(removed_pins) == sorted(seed_pins)
    added = changed_lines(overlay_text, "+")
    assert not [line for line in added if ADA_PIN.search(line)]
    assert sum("!= PALW_CUDA_PINNED_CC" in line for line in added) == 3


def test_overlay_touches_the_files_it_declares(overlay_text):
    files = re.findall(r"^diff --git a/(\S+) b/\1$", overlay_text, re.M)
    assert files == ["ggml/CMakeLists.txt", "ggml/src/ggml-cuda/CMakeLists.txt",
                     "ggml/src/ggml-cuda/common.cuh", "ggml/src/ggml-cuda/mmvq.cu"]


def test_cmake_default_keeps_the_seed_behaviour(overlay_text):
    added = "\n".join(changed_lines(overlay_text, "+"))
    assert re.search(r'set\s*\(PALW_CUDA_PINNED_CC "890" CACHE STRING', added)
    assert "PALW_CUDA_PINNED_CC=${PALW_CUDA_PINNED_CC}" in added
    # Without the CMake definition the header falls back to the seed's Ada pin.
    assert "#define PALW_CUDA_PINNED_CC GGML_CUDA_CC_ADA_LOVELACE" in added
