"""The build tools: find cmake, ninja, the C/C++ compilers and nvcc, and say who they are."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pytest_palw.cache import sha256_file
from pytest_palw.errors import ToolMissingError

INSTALL_HINTS = {
    "cmake": "pip install 'cmake>=3.24,<4' (or apt-get install cmake)",
    "ninja": "pip install ninja (or apt-get install ninja-build)",
    "cc": "apt-get install build-essential (gcc/g++), or set CC/CXX",
    "c++": "apt-get install build-essential (gcc/g++), or set CC/CXX",
    "nvcc": ("install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) and put its "
             "bin/ on PATH or set CUDA_HOME"),
}


@dataclass(frozen=True)
class Toolchain:
    cmake: Path
    ninja: Path
    cc: Path
    cxx: Path
    nvcc: Path | None = None
    cuda_host_cxx: Path | None = None  # $CUDAHOSTCXX: nvcc's host compiler, when set
    ccache: Path | None = None  # the C/C++ compile launcher, when found (ccache_launcher)

    def versions(self) -> dict[str, str | None]:
        """First line of each tool's ``--version`` (the manifest's ``tools``)."""
        names = {"cmake": self.cmake, "ninja": self.ninja, "cc": self.cc, "cxx": self.cxx,
                 "nvcc": self.nvcc, "cuda_host_cxx": self.cuda_host_cxx, "ccache": self.ccache}
        return {name: tool_version(path) if path else None for name, path in names.items()}

    def compiler_identity(self) -> dict[str, str | None]:
        """What the cache key trusts to stand for the generated code: each compiler's path,
        version and file digest (a wrapper script that adds flags is a different toolchain),
        and the environment variables compilers and CMake read."""
        identity = {"cc": _identity(self.cc), "cxx": _identity(self.cxx)}
        if self.nvcc:
            identity["nvcc"] = _identity(self.nvcc)
            identity["cuda_host_cxx"] = _identity(self.cuda_host_cxx) if self.cuda_host_cxx else None
        identity["environment"] = " ".join(f"{name}={os.environ[name]!r}" for name in COMPILER_ENVIRONMENT
                                           if os.environ.get(name))
        return identity

    def cmake_arguments(self) -> list[str]:
        """Pin the very tools we checked, so CMake cannot pick others from PATH (nor llama.cpp's
        GGML_CCACHE a ccache of its own: the compile launcher is ours or none)."""
        arguments = [f"-DCMAKE_MAKE_PROGRAM={self.ninja}", f"-DCMAKE_C_COMPILER={self.cc}",
                     f"-DCMAKE_CXX_COMPILER={self.cxx}", "-DGGML_CCACHE=OFF"]
        if self.nvcc:
            arguments.append(f"-DCMAKE_CUDA_COMPILER={self.nvcc}")
            if self.cuda_host_cxx:
                arguments.append(f"-DCMAKE_CUDA_HOST_COMPILER={self.cuda_host_cxx}")
        if self.ccache:
            launcher = ";".join(ccache_launcher(self.ccache))
            arguments += [f"-DCMAKE_C_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}"]
        return arguments


CCACHE_SWITCH = "PALW_CCACHE"  # 0: never compile through ccache


def ccache_launcher(ccache: Path) -> list[str]:
    """ccache in front of each C/C++ compile, its objects in the pytest-palw cache, keyed by the
    compiler file's content (not its mtime) and by paths relative to the build: the private and
    the reference builds of one source (mutants, --unpatched) share what they compile alike, and a
    rebuild outside `palw build` (an incremental `ninja -C`) uses the same cache. Not nvcc's."""
    from pytest_palw.paths import cache_dir, cache_root

    return [shutil.which("env") or "/usr/bin/env", f"CCACHE_DIR={cache_dir('ccache')}",
            f"CCACHE_BASEDIR={cache_root()}", "CCACHE_COMPILERCHECK=content", "CCACHE_NOHASHDIR=1",
            str(ccache)]


# Read by the compilers or by CMake's first configure; each one can change the generated code.
COMPILER_ENVIRONMENT = ("CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CUDAFLAGS", "CUDAHOSTCXX",
                        "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "COMPILER_PATH",
                        "LIBRARY_PATH", "GCC_EXEC_PREFIX")


def _identity(path: Path) -> str:
    return f"{path.resolve()} | {file_digest(path.resolve())} | {tool_version(path, full=True)}"


@functools.lru_cache(maxsize=None)
def file_digest(path: Path) -> str:
    """sha256 of the compiler's own file: a wrapper script around the same gcc differs here."""
    try:
        return sha256_file(Path(path))[:16]
    except OSError as error:
        return f"unreadable ({error.strerror})"


@functools.lru_cache(maxsize=None)
def tool_version(path: Path, full: bool = False) -> str:
    try:
        result = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    lines = [line.strip() for line in (result.stdout or result.stderr).splitlines() if line.strip()]
    if full:
        return " / ".join(lines[:6])
    # nvcc's first lines are a banner; its release line is the telling one.
    release = next((line for line in lines if "release" in line), None)
    return release or (lines[0] if lines else "unknown")


def nvcc_path(why: str) -> Path:
    """The CUDA toolkit's nvcc (CUDACXX, PATH, CUDA_HOME, CUDA_PATH, /usr/local/cuda); an
    AssertionError that says ``why`` it is needed when there is none."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = find_tool("nvcc", env_var="CUDACXX", extra=tuple(Path(r) / "bin" for r in roots if r))
    if nvcc is None:
        raise AssertionError(f"nvcc not found (CUDACXX, PATH, CUDA_HOME, /usr/local/cuda): {why}; install the "
                             "CUDA toolkit the runtime was built with, or set CUDACXX")
    return nvcc


def find_tool(name: str, *, env_var: str | None = None, extra: tuple[Path, ...] = ()) -> Path | None:
    """``$env_var``, then PATH, then next to this Python (a venv's pip-installed cmake/ninja)."""
    if env_var and os.environ.get(env_var):
        found = shutil.which(os.environ[env_var])
        if found:
            return Path(found)
    found = shutil.which(name)
    if found:
        return Path(found)
    for directory in (Path(sys.executable).parent, *extra):
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _cuda_dirs() -> tuple[Path, ...]:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return tuple(Path(root) / "bin" for root in roots if root)


def require(name: str, **kwargs) -> Path:
    found = find_tool(name, **kwargs)
    if found is None:
        raise ToolMissingError(f"{name} is not installed (needed to build the runtime): "
                               f"{INSTALL_HINTS[name]}")
    return found


def detect(variant: str) -> Toolchain:
    """Every tool the variant needs, or ToolMissingError naming the first one missing."""
    cmake = require("cmake")
    ninja = require("ninja")
    cc = find_tool("cc", env_var="CC") or find_tool("gcc") or find_tool("clang")
    cxx = find_tool("c++", env_var="CXX") or find_tool("g++") or find_tool("clang++")
    if cc is None:
        raise ToolMissingError(f"no C compiler (cc, gcc, clang) found: {INSTALL_HINTS['cc']}")
    if cxx is None:
        raise ToolMissingError(f"no C++ compiler (c++, g++, clang++) found: {INSTALL_HINTS['c++']}")
    nvcc = require("nvcc", env_var="CUDACXX", extra=_cuda_dirs()) if variant == "cuda" else None
    host = None
    if nvcc and os.environ.get("CUDAHOSTCXX"):
        found = shutil.which(os.environ["CUDAHOSTCXX"])
        if found is None:
            raise ToolMissingError(f"CUDAHOSTCXX={os.environ['CUDAHOSTCXX']} is not an executable: "
                                   "point it at nvcc's host C++ compiler, or unset it")
        host = Path(found)
    ccache = find_tool("ccache") if os.environ.get(CCACHE_SWITCH) != "0" else None
    return Toolchain(cmake, ninja, cc, cxx, nvcc, host, ccache)
