"""The cache key moves with every input that decides the build, and with nothing else."""

from __future__ import annotations

import dataclasses
import os

import pytest

from pytest_palw.builder.cache_key import KeyInputs, build_dir_name, cache_key
from pytest_palw.builder.plan import make_plan

BASE = KeyInputs(
    source_kind="sdist", source_sha256="a" * 64, seed_patch_sha256="b" * 64,
    overlays=(("0001-x.patch", "c" * 64),), native_sha256="d" * 64, variant="cpu",
    cuda_arch=None, pinned_cc=None, trace=True, cmake_flags=("-DBUILD_SHARED_LIBS=ON",),
    compilers=(("cc", "/usr/bin/gcc-12 | gcc 12.2.0"), ("cxx", "/usr/bin/g++-12 | g++ 12.2.0")))

CHANGES = {
    "source_kind": "tree",
    "source_sha256": "e" * 64,
    "seed_patch_sha256": "f" * 64,
    "overlays": (("0001-x.patch", "0" * 64),),
    "native_sha256": "1" * 64,
    "variant": "cuda",
    "cuda_arch": "90",
    "pinned_cc": 890,
    "trace": False,
    "cmake_flags": ("-DBUILD_SHARED_LIBS=OFF",),
    "compilers": (("cc", "/usr/bin/gcc-13 | gcc 13.1.0"), ("cxx", "/usr/bin/g++-12 | g++ 12.2.0")),
}


def test_same_inputs_same_key():
    assert cache_key(BASE) == cache_key(dataclasses.replace(BASE))
    assert len(cache_key(BASE)) == 64


def test_every_field_is_covered():
    assert set(CHANGES) == {field.name for field in dataclasses.fields(KeyInputs)}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_changing_one_input_changes_the_key(name):
    assert cache_key(dataclasses.replace(BASE, **{name: CHANGES[name]})) != cache_key(BASE)


def test_overlay_order_counts():
    two = (("0001-a.patch", "1" * 64), ("0002-b.patch", "2" * 64))
    assert cache_key(dataclasses.replace(BASE, overlays=two)) != cache_key(
        dataclasses.replace(BASE, overlays=tuple(reversed(two))))


def test_build_dir_name():
    assert build_dir_name("cuda", "0123456789abcdef" * 4) == "cuda-0123456789abcdef"


# -- the key as make_plan computes it from real files -------------------------------------

@pytest.fixture
def inputs(tmp_path, fake_llama_tree):
    """A fake llama.cpp tree, native runtime and overlay dir: make_plan needs no network for them."""
    tree = fake_llama_tree(tmp_path / "llama.cpp")
    native = tmp_path / "native"
    native.mkdir()
    (native / "palw_cuda_llama_mmvq.h").write_text("#pragma once\n")
    overlays = tmp_path / "overlays"
    overlays.mkdir()

    def key(**overrides):
        arguments = dict(variant="cpu", cuda_arch="89;90", pinned_cc=None, source=tree,
                         build_root=tmp_path / "builds", overlays=overlays, runtime_dir=native)
        arguments.update(overrides)
        return make_plan(**arguments).key

    return tree, native, overlays, key


def test_plan_key_is_stable_and_ignores_mtimes(inputs):
    tree, native, _overlays, key = inputs
    first = key()
    for path in (tree / "src" / "llama.cpp", native / "palw_cuda_llama_mmvq.h"):
        os.utime(path, (1, 1))
    assert key() == first


def test_plan_key_follows_file_contents_and_names(inputs):
    tree, native, overlays, key = inputs
    seen = {key()}
    (native / "record_codec.cpp").write_text("int x;\n")
    seen.add(key())
    (native / "record_codec.cpp").rename(native / "record_codec2.cpp")
    seen.add(key())
    (tree / "src" / "llama.cpp").write_text("// changed\n")
    seen.add(key())
    (overlays / "0001-a.patch").write_text("diff\n")
    (overlays / "series").write_text("0001-a.patch\n")
    seen.add(key())
    (overlays / "0001-a.patch").write_text("diff changed\n")
    seen.add(key())
    assert len(seen) == 6


def test_plan_key_follows_the_options(inputs):
    _tree_dir, _native, _overlays, key = inputs
    keys = {key(), key(pinned_cc=890), key(build_root="/elsewhere")}
    assert len(keys) == 2  # the build root is where, not what: same key


def test_unpatched_reference_plan(inputs):
    """`palw build --unpatched`: the same source with the empty patch set, its own key and dir."""
    tree, native, overlays, key = inputs
    arguments = dict(variant="cpu", cuda_arch="89;90", pinned_cc=None, source=tree,
                     build_root="/builds", overlays=overlays, runtime_dir=native)
    patched, unpatched = make_plan(**arguments), make_plan(**arguments, patched=False)
    assert unpatched.key != patched.key
    assert unpatched.build_dir.name == f"cpu-unpatched-{unpatched.key[:16]}"
    assert unpatched.patch_set.is_empty and unpatched.patch_set.describe()["seed_patch"] is None
    assert not unpatched.config.trace and unpatched.config.targets == ("llama", "ggml")
    assert not any("PALW" in flag for flag in unpatched.config.cmake_flags(native))
    # The native runtime is not compiled in, so editing it must not invalidate the reference.
    (native / "record_codec.cpp").write_text("int changed;\n")
    assert make_plan(**arguments, patched=False).key == unpatched.key
    assert make_plan(**arguments).key != patched.key


def test_unpatched_refuses_a_pin_and_a_patched_archive(inputs, tmp_path, private_cache):
    from pytest_palw.builder import archive
    from pytest_palw.builder.source import MARKER_SCHEMA
    from pytest_palw.cache import tree_digest
    from pytest_palw.errors import BuildError

    tree, native, overlays, _key = inputs
    arguments = dict(variant="cpu", cuda_arch="89;90", build_root=tmp_path, overlays=overlays,
                     runtime_dir=native, patched=False)
    with pytest.raises(BuildError, match="no pin"):
        make_plan(pinned_cc=890, source=tree, **arguments)
    packed = tmp_path / "palw-source.tar.gz"
    marker = {"schema": MARKER_SCHEMA, "version": 1, "seed_patch": {}, "overlays": [],
              "tree_sha256": tree_digest(tree), "pruned": []}
    archive.write_archive(packed, marker, tree, None)
    with pytest.raises(BuildError, match="already patched: an --unpatched build needs the sdist"):
        make_plan(pinned_cc=None, source=packed, **arguments)


def test_plan_key_follows_the_effective_compilers(inputs, tmp_path, monkeypatch):
    """A wrapper around the same g++ (e.g. one adding -static-libstdc++), or compiler flags in the
    environment, is another toolchain: it must never reuse a build."""
    import shutil

    _tree_dir, _native, _overlays, key = inputs
    plain = key()
    wrapper = tmp_path / "g++-static"
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} "$@" -static-libstdc++\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    wrapped = key()
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("CXXFLAGS", "-O1")
    flagged = key()
    monkeypatch.delenv("CXXFLAGS")
    assert len({plain, wrapped, flagged}) == 3
    assert key() == plain


def test_a_brought_runtime_dir_is_keyed_by_its_content(inputs, tmp_path):
    """`palw build --runtime-dir DIR`: a copy of the package's native/runtime-palw/cuda gets the key the
    default gets (so the default's key is the one it always was), one producer edit another key."""
    import shutil

    from pytest_palw import paths

    _tree_dir, _native, _overlays, key = inputs
    default = key(runtime_dir=None)
    assert default == key(runtime_dir=paths.NATIVE_RUNTIME_DIR)
    copy = tmp_path / "vendor" / "runtime-palw" / "cuda"
    shutil.copytree(paths.NATIVE_RUNTIME_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert key(runtime_dir=copy) == default
    producer = copy / "producer_accumulator.cu"
    producer.write_text(producer.read_text() + "\n// a vendor's edit\n")
    assert key(runtime_dir=copy) != default
    plan = make_plan(variant="cpu", cuda_arch="89;90", pinned_cc=None, source=_tree_dir, build_root=tmp_path,
                     overlays=_overlays, runtime_dir=copy)
    assert plan.native.path == copy.resolve()
    assert f"-DPALW_CUDA_RUNTIME_DIR={copy.resolve()}" in plan.config.cmake_flags(plan.native.path)


def test_a_runtime_dir_without_the_header_is_refused(inputs, tmp_path):
    from pytest_palw.errors import BuildError

    _tree_dir, _native, _overlays, key = inputs
    with pytest.raises(BuildError, match=r"--runtime-dir .* has no palw_cuda_llama_mmvq.h: name a runtime-palw/cuda"):
        key(runtime_dir=tmp_path / "overlays")
    with pytest.raises(BuildError, match=r"--runtime-dir .* is not a directory"):
        key(runtime_dir=tmp_path / "missing")
