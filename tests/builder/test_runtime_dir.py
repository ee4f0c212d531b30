"""`palw build --runtime-dir DIR`: a vendor's runtime-palw/cuda compiled in, keyed by its content."""

from __future__ import annotations

import shutil

import pytest

from pytest_palw import paths
from pytest_palw.certificate.facts import runtime_statement


def test_a_copy_of_the_package_runtime_reuses_the_default_build(cpu_build, tmp_path, run_palw):
    """The default build's key is unchanged (cpu_build is found by it), and a copy of
    native/runtime-palw/cuda gets that key: the same build, certified as the default."""
    copy = tmp_path / "runtime-palw" / "cuda"
    shutil.copytree(paths.NATIVE_RUNTIME_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_palw("build", "--runtime-dir", copy, "--print-manifest", "--no-binding-install")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(cpu_build.path)
    assert "cache hit" in result.stderr
    statement = runtime_statement({"variant": "cpu", "inputs": cpu_build.inputs})
    assert statement["producer"] == {"path": cpu_build.inputs["native"]["path"],
                                     "sha256": cpu_build.inputs["native"]["sha256"]}


def test_a_missing_runtime_dir_is_one_line(tmp_path, run_palw):
    result = run_palw("build", "--runtime-dir", tmp_path / "nowhere")
    assert result.returncode == 6  # BuildError
    assert "Traceback" not in result.stderr
    assert f"--runtime-dir {tmp_path / 'nowhere'} is not a directory" in result.stderr
    unpatched = run_palw("build", "--unpatched", "--runtime-dir", tmp_path)
    assert unpatched.returncode != 0 and "compiles no PALW runtime" in unpatched.stderr


def _planned(tmp_path):
    """A plan's two facts the copy reads: the producer as keyed, and the build's directory."""
    from types import SimpleNamespace

    from pytest_palw.builder.plan import native_runtime

    producer = tmp_path / "vendor" / "runtime-palw" / "cuda"
    shutil.copytree(paths.NATIVE_RUNTIME_DIR, producer, ignore=shutil.ignore_patterns("__pycache__"))
    return producer, SimpleNamespace(build_dir=tmp_path / "builds" / "cpu-0123", native=native_runtime(producer))


def test_the_build_compiles_its_own_copy_of_the_producer(tmp_path):
    """At the same place relative to every build of the cache (ccache then serves a build of another
    checkout), with the content the key was taken from."""
    from pytest_palw.builder.api import runtime_copy
    from pytest_palw.builder.config import RUNTIME_SUBDIR
    from pytest_palw.builder.plan import native_runtime

    producer, plan = _planned(tmp_path)
    (plan.build_dir / RUNTIME_SUBDIR).mkdir(parents=True)
    (plan.build_dir / RUNTIME_SUBDIR / "left-over.h").write_text("from an interrupted build")
    copy = runtime_copy(producer, plan.build_dir, plan.native.sha256)
    assert copy == plan.build_dir / RUNTIME_SUBDIR
    assert native_runtime(copy).sha256 == plan.native.sha256 == native_runtime(producer).sha256


def test_a_producer_edited_after_planning_stops_the_build(tmp_path):
    from pytest_palw.builder.api import runtime_copy
    from pytest_palw.builder.config import RUNTIME_HEADER, RUNTIME_SUBDIR
    from pytest_palw.errors import BuildError

    producer, plan = _planned(tmp_path)
    header = producer / RUNTIME_HEADER
    header.write_text(header.read_text() + "\n// edited after the key was taken\n")
    with pytest.raises(BuildError) as stopped:
        runtime_copy(producer, plan.build_dir, plan.native.sha256)
    assert "\n" not in str(stopped.value) and str(producer) in str(stopped.value)
    assert not (plan.build_dir / RUNTIME_SUBDIR).exists()


def test_a_copy_that_cannot_be_written_is_one_line_and_leaves_nothing(tmp_path):
    """The copy's place unwritable (here a file where its folder goes; a full disk fails the same
    copy with ENOSPC): a BuildError naming the place and the fix, no partial copy left."""
    from pytest_palw.builder.api import runtime_copy
    from pytest_palw.builder.plan import native_runtime
    from pytest_palw.errors import BuildError

    build_dir = tmp_path / "cpu-0123"
    build_dir.mkdir()
    (build_dir / "runtime-palw").write_text("a file where the copy's folder goes\n")
    with pytest.raises(BuildError) as raised:
        runtime_copy(paths.NATIVE_RUNTIME_DIR, build_dir, native_runtime(paths.NATIVE_RUNTIME_DIR).sha256)
    message = str(raised.value)
    assert "\n" not in message and str(build_dir / "runtime-palw") in message and "palw build" in message
    assert sorted(path.name for path in build_dir.iterdir()) == ["runtime-palw"]
