"""Each wrong input to `palw build` ends in one line naming cause and fix, and a non-zero exit."""

from __future__ import annotations

import json
import shutil

import pytest

from pytest_palw.builder.source import MARKER_NAME, MARKER_SCHEMA, SDIST_SHA256
from pytest_palw.errors import PatchError, SourceError


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("palw: error:")]


def assert_one_line_error(result, exit_code: int, *fragments: str) -> str:
    lines = error_lines(result)
    assert result.returncode == exit_code, result.stderr[-2000:]
    assert len(lines) == 1, result.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_missing_source_path(run_palw, tmp_path):
    missing = tmp_path / "nowhere"
    result = run_palw("build", "--source", missing, "--build-root", tmp_path / "builds")
    assert_one_line_error(result, SourceError.exit_code, str(missing), "does not exist",
                          "palw source --output")


def test_directory_that_is_not_llama_cpp(run_palw, tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "README.md").write_text("not llama.cpp\n")
    result = run_palw("build", "--source", tmp_path, "--build-root", tmp_path / "builds")
    assert_one_line_error(result, SourceError.exit_code, "is not a llama.cpp tree")


def test_tampered_sdist(run_palw, sdist_source, tmp_path):
    tampered = tmp_path / sdist_source.ref.path.name
    shutil.copyfile(sdist_source.ref.path, tampered)
    with open(tampered, "r+b") as handle:
        handle.seek(tampered.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    result = run_palw("build", "--source", tampered, "--build-root", tmp_path / "builds")
    line = assert_one_line_error(result, SourceError.exit_code, str(tampered), SDIST_SHA256)
    assert "sha256 is " in line and "expected" in line


def test_overlay_that_does_not_apply(run_palw, sdist_source, tmp_path):
    overlays = tmp_path / "overlays"
    overlays.mkdir()
    # Context that is not in ggml/CMakeLists.txt: git apply must reject this hunk.
    (overlays / "0001-bad.patch").write_text(
        "diff --git a/ggml/CMakeLists.txt b/ggml/CMakeLists.txt\n"
        "--- a/ggml/CMakeLists.txt\n+++ b/ggml/CMakeLists.txt\n"
        "@@ -3,3 +3,4 @@ project(\"ggml\")\n"
        " this line is not there\n nor this one\n+added\n and not this\n")
    (overlays / "series").write_text("# test\n0001-bad.patch\n")
    result = run_palw("build", "--build-root", tmp_path / "builds", env={"PALW_OVERLAYS_DIR": str(overlays)})
    assert_one_line_error(result, PatchError.exit_code, "0001-bad.patch", "ggml/CMakeLists.txt",
                          '@@ -3,3 +3,4 @@ project("ggml")', "series")


def test_series_naming_a_missing_overlay(run_palw, tmp_path):
    overlays = tmp_path / "overlays"
    overlays.mkdir()
    (overlays / "series").write_text("0009-gone.patch\n")
    result = run_palw("build", "--overlays", overlays, "--build-root", tmp_path / "builds",
                      "--source", tmp_path / "nowhere")
    assert_one_line_error(result, PatchError.exit_code, "0009-gone.patch", "does not exist")


def test_stale_palw_source(run_palw, tmp_path):
    source = tmp_path / "palw-source"
    tree = source / "llama.cpp"
    for name in ("CMakeLists.txt", "include/llama.h", "ggml/CMakeLists.txt", "src/llama.cpp"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("\n")
    marker = {"schema": MARKER_SCHEMA, "version": 1,
              "seed_patch": {"name": "llama.cpp-palw-full.patch", "sha256": "0" * 64},
              "overlays": [], "tree_sha256": "", "pruned": []}
    (source / MARKER_NAME).write_text(json.dumps(marker))
    result = run_palw("build", "--source", source, "--build-root", tmp_path / "builds")
    assert_one_line_error(result, PatchError.exit_code, "is stale", "palw source --output")


@pytest.mark.parametrize("argv", [["build", "--variant", "rocm"], ["build", "--jobs", "0"]])
def test_bad_arguments_are_usage_errors(run_palw, argv):
    result = run_palw(*argv)
    assert result.returncode == 2
    assert "usage: palw build" in result.stderr


def test_no_network_and_no_cached_sdist(run_palw, private_cache, tmp_path):
    # An empty cache and a pip that may not look anywhere: the offline path must be named.
    result = run_palw("build", env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "no-links")})
    assert_one_line_error(result, SourceError.exit_code, "cannot download llama-cpp-python==0.3.34",
                          "palw source --output FILE")
    sources = private_cache / "sources"
    assert not list(sources.glob("*.tar.gz")) and not list(sources.glob("download-*")), \
        "no half download left behind"


def test_tampered_cached_sdist(run_palw, private_cache):
    (private_cache / "sources").mkdir()
    (private_cache / "sources" / "llama_cpp_python-0.3.34.tar.gz").write_bytes(b"not the sdist")
    result = run_palw("build")
    assert_one_line_error(result, SourceError.exit_code, SDIST_SHA256, "delete it")
