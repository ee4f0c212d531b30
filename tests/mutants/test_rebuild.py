"""The in-place rebuild of a mutated build (mutants/engine.py) survives the tools that configured it
going away: a build tree records its cmake and ninja by absolute path, and a cached private build
outlives the virtual environment (or checkout) whose cmake made it. Seen in CI: a cache hit whose
cmake was in a deleted worktree's venv made every patched-tree mutant fail with "[code=127]"."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_palw.mutants.engine import configure_here, rebuild, recorded_tools


def _tools_copy(into: Path) -> tuple[Path, Path]:
    """A cmake (its data tree: cmake resolves its own path, so a link would not do) and a ninja of
    their own, as a virtual environment holds them."""
    found = shutil.which("cmake") or pytest.fail("cmake is a test dependency")
    ninja = Path(shutil.which("ninja") or pytest.fail("ninja is a test dependency")).resolve()
    script = into.parent / "where.cmake"  # the binary itself (pip's `cmake` on PATH is a Python script)
    script.write_text('message("${CMAKE_COMMAND}")\n')
    cmake = Path(subprocess.run([found, "-P", script], capture_output=True, text=True, check=True).stderr.strip())
    data = cmake.parent.parent  # .../bin/cmake -> the tree with bin/ and share/
    try:
        shutil.copytree(data, into / "cmake", copy_function=os.link, ignore=shutil.ignore_patterns("doc"))
    except OSError:  # another filesystem: copy
        shutil.rmtree(into / "cmake", ignore_errors=True)
        shutil.copytree(data, into / "cmake", ignore=shutil.ignore_patterns("doc"))
    shutil.copy2(ninja, into / "ninja")
    return into / "cmake" / "bin" / "cmake", into / "ninja"


def test_a_build_whose_cmake_and_ninja_are_gone_is_reconfigured_and_rebuilt(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\nproject(p C)\n"
                                            "add_library(p SHARED p.c)\n")
    (project / "p.c").write_text("int p(void) { return 1; }\n")
    cmake, ninja = _tools_copy(tmp_path / "venv")
    build = tmp_path / "build"
    subprocess.run([cmake, "-S", project, "-B", build, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"],
                   check=True, capture_output=True)
    assert recorded_tools(build) == {"CMAKE_COMMAND": str(cmake), "CMAKE_MAKE_PROGRAM": str(ninja)}
    rebuild(build, ["p"])
    assert configure_here(build) is None  # its tools are there: nothing to do

    shutil.rmtree(tmp_path / "venv")  # the venv that configured it is gone
    (project / "CMakeLists.txt").write_text((project / "CMakeLists.txt").read_text() + "# edited\n")
    (project / "p.c").write_text("int p(void) { return 2; }\n")  # a mutant's edit
    said = configure_here(build)
    assert said is not None and str(cmake) in said
    current = recorded_tools(build)
    assert all(Path(path).is_file() for path in current.values()), current
    rebuild(build, ["p"])  # ninja re-runs cmake (the edited CMakeLists) with the tools that exist
    assert (build / "libp.so").stat().st_mtime >= (project / "p.c").stat().st_mtime
