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
                                            "add_library(p SHARED p.c)\n"
                                            "target_include_directories(p PRIVATE ${PALW_CUDA_RUNTIME_DIR})\n")
    (project / "p.c").write_text('#include "producer.h"\nint p(void) { return PRODUCER; }\n')
    checkout = tmp_path / "old-checkout" / "cuda"  # the producer tree of the checkout that configured it
    checkout.mkdir(parents=True)
    (checkout / "producer.h").write_text("#define PRODUCER 1\n")
    cmake, ninja = _tools_copy(tmp_path / "venv")
    build = tmp_path / "build"
    subprocess.run([cmake, "-S", project, "-B", build, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
                    f"-DPALW_CUDA_RUNTIME_DIR={checkout}"], check=True, capture_output=True)
    assert recorded_tools(build) == {"CMAKE_COMMAND": str(cmake), "CMAKE_MAKE_PROGRAM": str(ninja),
                                     "PALW_CUDA_RUNTIME_DIR": str(checkout)}
    rebuild(build, ["p"])
    assert configure_here(build, checkout) is None  # its tools are there: nothing to do

    # The venv and the checkout that configured it are gone; this one's producer tree has the same files.
    here = tmp_path / "this-checkout" / "cuda"
    shutil.copytree(checkout, here)
    shutil.rmtree(tmp_path / "venv")
    shutil.rmtree(tmp_path / "old-checkout")
    (project / "CMakeLists.txt").write_text((project / "CMakeLists.txt").read_text() + "# edited\n")
    (project / "p.c").write_text('#include "producer.h"\nint p(void) { return PRODUCER + 1; }\n')  # a mutant
    said = configure_here(build, here)
    assert said is not None and str(cmake) in said and str(here) in said
    current = recorded_tools(build)
    assert Path(current["CMAKE_COMMAND"]).is_file() and Path(current["CMAKE_MAKE_PROGRAM"]).is_file(), current
    assert current["PALW_CUDA_RUNTIME_DIR"] == str(here)
    rebuild(build, ["p"])  # ninja re-runs cmake (the edited CMakeLists) with the tools that exist
    assert (build / "libp.so").stat().st_mtime >= (project / "p.c").stat().st_mtime


def test_the_private_build_compiles_its_own_producer_copy(tmp_path):
    """A build made before builds kept their copy of runtime-palw/cuda gets one (this package's, its key's
    tree), whole; a build whose copy is intact keeps it: configure_here then finds nothing moved in a new
    checkout. A copy that differs from the key's tree (a byte flipped, its mtime kept; a file added) is
    made again, never compiled into the runtime the mutants are judged on."""
    import os
    from types import SimpleNamespace

    from pytest_palw.builder.config import RUNTIME_HEADER, RUNTIME_SUBDIR
    from pytest_palw.builder.plan import native_runtime
    from pytest_palw.mutants.engine import own_runtime_dir
    from pytest_palw.paths import NATIVE_RUNTIME_DIR

    key = native_runtime(NATIVE_RUNTIME_DIR).sha256
    build = SimpleNamespace(manifest_path=tmp_path / "cpu-0123" / "palw-manifest.json")
    copy = own_runtime_dir(build)
    assert copy == tmp_path / "cpu-0123" / RUNTIME_SUBDIR
    assert native_runtime(copy).sha256 == key
    assert [path.name for path in copy.parent.iterdir()] == ["cuda"]  # no partial copy left beside it
    inode = copy.stat().st_ino
    assert own_runtime_dir(build) == copy and copy.stat().st_ino == inode  # intact: kept as it is

    header = copy / RUNTIME_HEADER
    stat = header.stat()
    data = bytearray(header.read_bytes())
    data[len(data) // 2] ^= 0xFF
    header.write_bytes(bytes(data))
    os.utime(header, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert native_runtime(copy).sha256 != key
    assert own_runtime_dir(build) == copy and native_runtime(copy).sha256 == key

    (copy / "extra.h").write_text("// not the key's\n")
    assert own_runtime_dir(build) == copy and not (copy / "extra.h").exists()
    assert native_runtime(copy).sha256 == key
    assert [path.name for path in copy.parent.iterdir()] == ["cuda"]
