"""`palw build --runtime-dir DIR`: a vendor's runtime-palw/cuda compiled in, keyed by its content."""

from __future__ import annotations

import shutil

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
