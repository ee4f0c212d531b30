"""Which runtime-palw/cuda a cached build's consumers read (its ABI header for the binding): the tree the
library was compiled from, checked by the digest the manifest records, never another checkout's edited
copy."""

from __future__ import annotations

import os
import shutil

from pytest_palw.builder.config import RUNTIME_SUBDIR
from pytest_palw.builder.plan import native_runtime
from pytest_palw.paths import NATIVE_RUNTIME_DIR
from pytest_palw.runtime.library import recorded_runtime_dir


def _build(tmp_path):
    """A build of clone A (its manifest records A's producer), with the build's own copy beside it."""
    digest = native_runtime(NATIVE_RUNTIME_DIR).sha256
    clone = tmp_path / "clone-a" / "native" / "runtime-palw" / "cuda"
    build_dir = tmp_path / "builds" / "cpu-key"
    shutil.copytree(NATIVE_RUNTIME_DIR, clone)
    shutil.copytree(NATIVE_RUNTIME_DIR, build_dir / RUNTIME_SUBDIR)
    return {"path": str(clone), "sha256": digest}, clone, build_dir


def test_the_build_s_own_copy_is_read(tmp_path):
    native, _, build_dir = _build(tmp_path)
    assert recorded_runtime_dir(native, build_dir) == build_dir / RUNTIME_SUBDIR


def test_another_checkout_edited_after_the_build_is_not_read(tmp_path):
    """Clone A's header edited after its build (mtime and all): the build's copy, as compiled, is read."""
    native, clone, build_dir = _build(tmp_path)
    header = clone / "palw_cuda_llama_mmvq.h"
    header.write_text(header.read_text() + "\n#define PALW_EDITED_AFTER_THE_BUILD 1\n")
    assert recorded_runtime_dir(native, build_dir) == build_dir / RUNTIME_SUBDIR
    shutil.rmtree(build_dir / RUNTIME_SUBDIR)  # a build made before builds kept a copy: this install's, same digest
    assert recorded_runtime_dir(native, build_dir) == NATIVE_RUNTIME_DIR.resolve()


def test_a_changed_copy_in_the_build_is_not_read(tmp_path):
    native, clone, build_dir = _build(tmp_path)
    (build_dir / RUNTIME_SUBDIR / "extra.h").write_text("/* added */\n")
    assert recorded_runtime_dir(native, build_dir) == clone


def test_with_nothing_that_matches_the_recorded_path_stays(tmp_path):
    """Nothing with the recorded digest: the recorded path, and what reads it says what is wrong."""
    native, clone, build_dir = _build(tmp_path)
    native = {**native, "sha256": "0" * 64}
    assert recorded_runtime_dir(native, build_dir) == clone
    shutil.rmtree(clone)
    assert recorded_runtime_dir(native, build_dir) == clone


def test_a_pipe_in_the_build_s_copy_is_a_change_not_a_hang(tmp_path):
    """A named pipe added to the build's copy: the copy no longer has the recorded digest (it is not
    read: reading one waits forever), so the recorded tree is read."""
    native, clone, build_dir = _build(tmp_path)
    os.mkfifo(build_dir / RUNTIME_SUBDIR / "extra.h")
    assert recorded_runtime_dir(native, build_dir) == clone


def test_a_copy_that_cannot_be_read_is_passed_over(tmp_path, monkeypatch):
    """An OSError while hashing a candidate (a file unreadable to this user, removed meanwhile) passes
    it over, as a digest that does not match would, instead of stopping the session with a traceback."""
    from pytest_palw.builder import plan

    native, clone, build_dir = _build(tmp_path)
    hashed = plan.native_runtime

    def unreadable_copy(directory=None):
        if directory == build_dir / RUNTIME_SUBDIR:
            raise PermissionError(13, "Permission denied", str(directory / "record_codec.cpp"))
        return hashed(directory)

    monkeypatch.setattr(plan, "native_runtime", unreadable_copy)
    assert recorded_runtime_dir(native, build_dir) == clone
