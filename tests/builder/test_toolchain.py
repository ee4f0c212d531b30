"""Missing build tools are named with the way to install them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_palw.builder import toolchain
from pytest_palw.errors import ToolMissingError


def _without(*names):
    real = toolchain.find_tool

    def find(name, **kwargs):
        return None if name in names else real(name, **kwargs)

    return find


@pytest.mark.parametrize("missing, variant, hint", [
    (("cmake",), "cpu", "pip install 'cmake"),
    (("ninja",), "cpu", "pip install ninja"),
    (("cc", "gcc", "clang"), "cpu", "build-essential"),
    (("nvcc",), "cuda", "CUDA toolkit"),
])
def test_missing_tool_is_named_with_its_fix(monkeypatch, missing, variant, hint):
    monkeypatch.setattr(toolchain, "find_tool", _without(*missing))
    with pytest.raises(ToolMissingError) as failure:
        toolchain.detect(variant)
    message = str(failure.value)
    assert hint in message and "\n" not in message
    assert any(name in message for name in missing)


def test_cpu_toolchain_here_is_complete():
    tools = toolchain.detect("cpu")
    assert tools.nvcc is None
    identity = tools.compiler_identity()
    assert set(identity) == {"cc", "cxx", "environment"}
    assert all(value.count(" | ") == 2 for name, value in identity.items() if name != "environment")
    assert f"-DCMAKE_MAKE_PROGRAM={tools.ninja}" in tools.cmake_arguments()


def test_ccache_found_compiles_through_it_into_the_palw_cache(monkeypatch, private_cache):
    real = toolchain.find_tool
    monkeypatch.setattr(toolchain, "find_tool",
                        lambda name, **kwargs: Path("/opt/bin/ccache") if name == "ccache" else real(name, **kwargs))
    monkeypatch.delenv(toolchain.CCACHE_SWITCH, raising=False)
    tools = toolchain.detect("cpu")
    launcher = (f"{shutil.which('env')};CCACHE_DIR={private_cache / 'ccache'};CCACHE_BASEDIR={private_cache};"
                "CCACHE_COMPILERCHECK=content;CCACHE_NOHASHDIR=1;/opt/bin/ccache")
    arguments = tools.cmake_arguments()
    assert f"-DCMAKE_C_COMPILER_LAUNCHER={launcher}" in arguments
    assert f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}" in arguments
    assert not any("CUDA_COMPILER_LAUNCHER" in argument for argument in arguments)
    monkeypatch.setenv(toolchain.CCACHE_SWITCH, "0")
    off = toolchain.detect("cpu").cmake_arguments()
    assert not any("LAUNCHER" in argument for argument in off)
    # llama.cpp's CMake would put a ccache it finds on PATH in front of every compile itself.
    assert "-DGGML_CCACHE=OFF" in off and "-DGGML_CCACHE=OFF" in arguments


def test_no_ccache_no_launcher(monkeypatch):
    monkeypatch.setattr(toolchain, "find_tool", _without("ccache"))
    tools = toolchain.detect("cpu")
    assert tools.ccache is None and tools.versions()["ccache"] is None
    assert not any("LAUNCHER" in argument for argument in tools.cmake_arguments())
