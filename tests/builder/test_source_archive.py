"""Sources: naming them, `palw source` archives (reproducible, checked), and what pruning keeps."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile

import pytest

from pytest_palw import paths
from pytest_palw.builder import archive, pruning
from pytest_palw.builder.config import BuildConfig, trace_available
from pytest_palw.builder.source import (
    MARKER_NAME,
    MARKER_SCHEMA,
    locate_source,
    materialize,
    read_archive_marker,
)
from pytest_palw.builder.toolchain import detect
from pytest_palw.cache import tree_digest
from pytest_palw.errors import SourceError


def _marker(tree):
    return {"schema": MARKER_SCHEMA, "version": 1, "seed_patch": {}, "overlays": [],
            "tree_sha256": tree_digest(tree), "pruned": []}


def test_a_random_file_is_not_a_source(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8b not really")
    with pytest.raises(SourceError, match="neither the llama-cpp-python 0.3.34 sdist"):
        locate_source(junk)


def test_archive_is_reproducible_and_marker_first(tmp_path, fake_llama_tree):
    tree = fake_llama_tree(tmp_path / "llama.cpp")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o755)
    first, second = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    archive.write_archive(first, _marker(tree), tree, None)
    (tree / "src" / "llama.cpp").touch()  # a new mtime must not change the bytes
    archive.write_archive(second, _marker(tree), tree, None)
    assert first.read_bytes() == second.read_bytes()
    assert read_archive_marker(first)["tree_sha256"] == tree_digest(tree)
    with tarfile.open(first) as packed:
        members = packed.getmembers()
    assert members[0].name == f"palw-source/{MARKER_NAME}"
    assert {m.mtime for m in members} == {0} and {m.uid for m in members} == {0}
    assert next(m for m in members if m.name.endswith("run.sh")).mode == 0o755


def test_archive_round_trip_and_damage(tmp_path, private_cache, fake_llama_tree):
    tree = fake_llama_tree(tmp_path / "llama.cpp")
    good = tmp_path / "good.tar.gz"
    archive.write_archive(good, _marker(tree), tree, None)
    ref = locate_source(good)
    assert ref.kind == "palw-source" and ref.patched
    extracted = materialize(ref)
    assert tree_digest(extracted.tree) == tree_digest(tree)

    bad_marker = dict(_marker(tree), tree_sha256="0" * 64)
    damaged = tmp_path / "damaged.tar.gz"
    archive.write_archive(damaged, bad_marker, tree, None)
    with pytest.raises(SourceError, match="is damaged"):
        materialize(locate_source(damaged))


def test_an_extracted_archive_directory_is_a_palw_source(tmp_path, fake_llama_tree):
    root = tmp_path / "palw-source"
    tree = fake_llama_tree(root / "llama.cpp")
    (root / MARKER_NAME).write_text(json.dumps(_marker(tree)))
    ref = locate_source(root)
    assert ref.kind == "palw-source" and ref.sha256 == tree_digest(tree)


def test_the_sdist_binding_comes_along(sdist_source):
    assert (sdist_source.binding_python_path / "llama_cpp" / "llama_cpp.py").is_file()
    assert not (sdist_source.tree / ".git").exists()


def test_pruned_paths_exist_in_the_patched_tree(patched_tree):
    # A stale prune list would silently keep weight in the archive.
    missing = [path for path in pruning.PRUNED if not (patched_tree / path).exists()]
    assert missing == []


def test_pruned_tree_still_configures_for_cpu(patched_tree, tmp_path):
    """CMake enters none of the pruned paths with our flags: the proof is that it configures."""
    pruned = tmp_path / "pruned"
    shutil.copytree(patched_tree, pruned, symlinks=True)
    removed = pruning.prune(pruned)
    assert set(removed) == set(pruning.PRUNED)
    tools = detect("cpu")
    runtime = paths.NATIVE_RUNTIME_DIR
    config = BuildConfig("cpu", trace=trace_available(runtime))
    result = subprocess.run([str(tools.cmake), "-S", str(pruned), "-B", str(tmp_path / "b"),
                             "-G", "Ninja", *tools.cmake_arguments(), *config.cmake_flags(runtime)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "llama-palw-observer" in (tmp_path / "b" / "build.ninja").read_text()


def test_a_pruned_directory_keeps_its_kept_files(patched_tree, tmp_path):
    """tests/ goes (LLAMA_BUILD_TESTS=OFF) but for test-backend-ops.cpp, which the GPU tier builds."""
    pruned = tmp_path / "pruned"
    shutil.copytree(patched_tree / "tests", pruned / "tests", symlinks=True)
    assert pruning.prune(pruned) == ["tests"]
    assert sorted(str(p.relative_to(pruned)) for p in pruned.rglob("*")) == ["tests", *sorted(pruning.KEPT)]
    kept = "tests/test-backend-ops.cpp"
    assert (pruned / kept).read_bytes() == (patched_tree / kept).read_bytes()
