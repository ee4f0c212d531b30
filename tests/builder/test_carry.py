"""`palw build --cache-to/--cache-from`: a build archived on one machine is, on a machine with an
empty cache, a cache hit of the same key whose manifest points at the new machine's paths and whose
libraries run; an archive of another key is refused, one that is missing means building."""

import json
import os
import tarfile
from pathlib import Path

import pytest

from pytest_palw.builder import carry
from pytest_palw.builder.source import locate_source
from pytest_palw.paths import CONFORMANCE_DIR


@pytest.fixture(scope="module")
def archived(cpu_build, tmp_path_factory):
    """The cached CPU build, archived by `palw build --cache-to` (its source: the cached sdist)."""
    source = locate_source(None, download=False)
    if source is None:
        pytest.skip("no cached llama-cpp-python sdist: run `palw build` once")
    directory = tmp_path_factory.mktemp("carried")
    return cpu_build, source.path, directory


def test_a_carried_build_is_a_cache_hit_on_an_empty_cache(archived, shared_palw_cache, run_palw, tmp_path, pytester,
                                                          monkeypatch):
    manifest, sdist, directory = archived
    saved = run_palw("build", "--source", sdist, "--cache-to", directory, "--print-manifest")
    assert saved.returncode == 0, saved.stderr[-2000:]
    archive = carry.archive_path(directory, Path(manifest.path).parent.name)
    with tarfile.open(archive) as members:
        names = members.getnames()
    assert f"build/{Path(manifest.path).parent.name}/palw-manifest.json" in names
    assert not [name for name in names if name.endswith((".o", ".a")) or "/CMakeFiles/" in name]

    fresh = tmp_path / "fresh-cache"
    env = {"PALW_CACHE_DIR": str(fresh)}
    restored = run_palw("build", "--source", sdist, "--cache-from", directory, "--print-manifest", env=env)
    assert restored.returncode == 0, restored.stderr[-2000:]
    assert "palw: restored" in restored.stderr and "cache hit" in restored.stderr
    assert "ninja" not in restored.stderr
    path = Path(restored.stdout.strip().splitlines()[-1])
    assert fresh in path.parents
    moved = json.loads(path.read_text())
    assert moved["key"] == manifest.key
    old_root = str(Path(manifest.path).parent)
    assert old_root not in path.read_text()
    assert Path(moved["outputs"]["libllama"]).is_file() and fresh in Path(moved["outputs"]["libllama"]).parents

    # the restored libraries run: a CPU-tier claim module against the carried build, from the fresh cache
    monkeypatch.setenv("PALW_CACHE_DIR", env["PALW_CACHE_DIR"])
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", f"--palw-lib={path}",
                                           f"--palw-certificate={tmp_path / 'c.json'}",
                                           str(CONFORMANCE_DIR / "test_class_counts.py"), timeout=600)
    document = json.loads((tmp_path / "c.json").read_text())
    assert document["runtime"]["lib_dir"].startswith(str(fresh)), result.stdout.str()[-2000:]
    outcomes = {case["outcome"] for case in document["cases"] if "test_class_counts.py" in case["id"]}
    assert outcomes == {"passed"}, result.stdout.str()[-2000:]


def test_an_archive_of_another_key_is_refused(archived, tmp_path, monkeypatch):
    manifest, _, directory = archived
    carry.save(manifest, directory)
    other = tmp_path / "cpu-0000000000000000"
    monkeypatch.setenv("PALW_CACHE_DIR", str(tmp_path / "cache"))
    os.replace(carry.archive_path(directory, Path(manifest.path).parent.name),
               carry.archive_path(tmp_path, other.name))
    with pytest.raises(Exception, match="holds build cpu-"):
        carry.restore(tmp_path, other, "0" * 64)
    assert carry.restore(tmp_path / "empty", other, "0" * 64) is False
