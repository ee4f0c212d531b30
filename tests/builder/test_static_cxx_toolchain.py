"""A toolchain that links libstdc++ statically into every output (as the H200 image's /opt/gcc
wrappers do) must still give one process one C++ runtime, or be refused in one line.

Python happened not to crash on such a CPU build, so loading proves nothing: these tests check
the structure (cxx_runtime.py), on a small library and on a whole `palw build`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_palw.builder import cxx_runtime
from pytest_palw.errors import BuildError

SOURCE = """#include <iostream>
#include <string>
extern "C" int hello(long x) { std::cout << x << std::endl; return (int) std::to_string(x).size(); }
"""


def _static_wrapper(path: Path, compiler: Path, launcher: str = "") -> Path:
    """``compiler "$@" -static-libstdc++`` for every link. A compile (``-c``: the flag only acts
    when linking) runs the compiler as it is, through ``launcher`` (ccache) when given: its object
    is the plain build's, so the whole build below compiles nothing anew and links everything anew."""
    path.write_text(f'#!/bin/sh\ncase " $* " in *" -c "*) exec {launcher} {compiler} "$@" ;; esac\n'
                    f'exec {compiler} "$@" -static-libstdc++\n')
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def static_cxx(tmp_path_factory) -> Path:
    """The wrapper measured in the issue: g++ "$@" -static-libstdc++."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++ (apt-get install g++)")
    return _static_wrapper(tmp_path_factory.mktemp("toolchain") / "g++", Path(gxx))


def _library(tmp_path: Path, cxx, *flags: str) -> Path:
    source = tmp_path / "hello.cpp"
    source.write_text(SOURCE)
    output = tmp_path / f"libhello{len(flags)}.so"
    subprocess.run([str(cxx), "-shared", "-fPIC", str(source), "-o", str(output), *flags], check=True)
    return output


def test_static_libstdcxx_library_fails_the_check(tmp_path, static_cxx):
    library = _library(tmp_path, static_cxx)
    check = cxx_runtime.check_library(library, cxx_runtime.runtime_symbols("g++"))
    assert not check.needs_libstdcxx and check.runtime_exports > 100 and not check.ok
    report = cxx_runtime.check_libraries(tmp_path, "g++")
    with pytest.raises(BuildError) as refused:
        cxx_runtime.require_one_runtime(report, str(static_cxx))
    message = str(refused.value)
    assert "\n" not in message and library.name in message and "CXX=" in message


def test_exclude_libs_keeps_the_static_copy_private(tmp_path, static_cxx):
    library = _library(tmp_path, static_cxx, cxx_runtime.LINKER_FLAGS)
    check = cxx_runtime.check_library(library, cxx_runtime.runtime_symbols("g++"))
    assert not check.needs_libstdcxx and check.runtime_exports == 0 and check.ok


def test_shared_libstdcxx_library_passes(tmp_path):
    check = cxx_runtime.check_library(_library(tmp_path, "g++"), cxx_runtime.runtime_symbols("g++"))
    assert check.needs_libstdcxx and check.ok


def test_whole_build_with_the_static_wrapper(tmp_path, sdist_source):
    """`palw build` with CXX/CC set to static-libstdc++ wrappers (a build of its own: the effective
    compiler is in the key, test_cache_key) passes the structure check and decodes `tiny` in Python."""
    from pytest_palw.builder import api, toolchain
    from pytest_palw.fixtures.models.catalog import ensure_model

    plain = toolchain.detect("cpu")  # the CPU build's compilers and ccache: its objects are reused
    launcher = " ".join(shlex.quote(part) for part in toolchain.ccache_launcher(plain.ccache)) if plain.ccache else ""
    directory = tmp_path / "toolchain"
    directory.mkdir()
    env = {"CXX": str(_static_wrapper(directory / "g++", plain.cxx, launcher)),
           "CC": str(_static_wrapper(directory / "gcc", plain.cc, launcher)),
           toolchain.CCACHE_SWITCH: "0"}  # the wrappers launch ccache for compiles themselves
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        manifest = api.build("cpu", install_binding=False)
    finally:
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)
    report = manifest.cxx_runtime
    libraries = report["libraries"]
    assert {"libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so"} <= set(libraries)
    assert report["ok"] and all(not facts["needs_libstdcxx"] for facts in libraries.values()), report
    assert all(facts["runtime_exports"] == 0 for facts in libraries.values()), report
    probe = Path(__file__).parents[1] / "fixtures" / "models" / "llama_decode_probe.py"
    result = subprocess.run(
        [sys.executable, str(probe), str(manifest.lib_dir), "2", str(ensure_model("tiny"))],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PALW_TEST_BINDING_PATH": manifest.binding_python_path or ""})
    assert result.returncode == 0, result.stderr[-2000:]
    decoded = json.loads(result.stdout)[0]
    assert decoded["loaded"] and decoded["decode_status"] == 0 and decoded["logits_finite"]
    assert len(decoded["tokens"]) == 2
