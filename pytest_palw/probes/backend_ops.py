"""llama.cpp's own ``test-backend-ops``, from the runtime's patched tree, against the runtime's ggml.

The runtime under test computes with the patched ggml-cuda, the trace compiled in. Its numerics'
peer oracle is upstream's op test: each case runs on the CUDA backend and on the CPU backend of the
same ggml, and the outputs must agree within the test's own tolerance (NMSE). The test's source is
the tree's ``tests/test-backend-ops.cpp`` (`palw source` keeps it, pruning.KEPT), compiled once per
(source, runtime libraries, compiler) against the build's public ggml headers and linked to its
lib dir; nothing of ours is in the binary.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pytest_palw.builder.toolchain import find_tool, tool_version
from pytest_palw.cache import key_of, sha256_file
from pytest_palw.paths import cache_dir
from pytest_palw.probes.compile import compile_once

SOURCE = "tests/test-backend-ops.cpp"
LIBRARIES = ("libggml.so", "libggml-base.so")
_CASE = re.compile(r"^  ([A-Z_0-9]+)\((.*)\): (.*)$")
_BACKEND = re.compile(r"^Backend \d+/\d+: (\S+)", re.MULTILINE)
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def _verdict(rest: str) -> str:
    """A case line's verdict: OK, FAIL, not supported or skipped (the large-tensor skip)."""
    for verdict in ("OK", "FAIL"):
        if rest.rstrip().endswith(verdict):
            return verdict
    return "not supported" if rest.startswith("not supported") else "skipped"


@dataclass
class BackendOpsRun:
    command: list[str]
    returncode: int
    backends: list[str]
    cases: dict[str, int] = field(default_factory=dict)  # verdict -> count
    failed: list[str] = field(default_factory=list)
    one_column: int = 0  # cases that passed with n=1 (the one-token decode's matrix-vector shape)
    tail: str = ""

    @property
    def tested(self) -> int:
        return self.cases.get("OK", 0) + self.cases.get("FAIL", 0)

    def as_dict(self) -> dict:
        return {"command": " ".join(self.command), "returncode": self.returncode, "backends": self.backends,
                "cases": self.cases, "one_column_passed": self.one_column, "failed": self.failed[:20]}


def build_binary(build) -> Path:
    """``test-backend-ops`` of the runtime build's tree (a RuntimeBuild), linked to its ggml; cached."""
    source_dir, lib_dir = Path(build.source_dir), Path(build.lib_dir)
    include_dir = source_dir / "ggml" / "include"
    source = source_dir / SOURCE
    if not source.is_file():
        raise AssertionError(f"{source} is missing: the runtime was built from a tree without llama.cpp's "
                             "test-backend-ops.cpp (an old `palw source` archive pruned it); rebuild from the "
                             "sdist or a current `palw source` archive")
    cxx = find_tool("c++", env_var="CXX")
    if cxx is None:
        raise AssertionError("no C++ compiler (CXX, c++) to build llama.cpp's test-backend-ops: install the "
                             "compiler the runtime was built with, or set CXX")
    command = [str(cxx), "-std=c++17", "-O2", "-I", str(include_dir), str(source), "-L", str(lib_dir),
               "-lggml", "-lggml-base", f"-Wl,-rpath,{lib_dir}", "-pthread"]
    libraries = [sha256_file(lib_dir / name) for name in LIBRARIES]
    key = key_of(source.read_bytes(), command, libraries, tool_version(cxx))
    return compile_once(cache_dir("probes") / f"test-backend-ops-{key}", command,
                        what="building llama.cpp's test-backend-ops",
                        failure=lambda stderr: f"{cxx.name} could not build test-backend-ops:\n{stderr[-2000:]}")


def run(binary: Path, backend: str, ops: str, params: str | None, timeout: int = 600) -> BackendOpsRun:
    """``test-backend-ops test -b backend -o ops [-p params]``: every case's verdict, counted."""
    command = [str(binary), "test", "-b", backend, "-o", ops, *(["-p", params] if params else [])]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"test-backend-ops {ops} {params or ''} ran past {timeout} s: the backend hangs or "
                             "the filter selects too many cases; run the command by hand to see which") from None
    output = _COLOUR.sub("", result.stdout + result.stderr)
    outcome = BackendOpsRun([Path(command[0]).name, *command[1:]], result.returncode,
                            _BACKEND.findall(output), tail=output[-3000:])
    for match in filter(None, map(_CASE.match, output.splitlines())):
        op, variables, verdict = match.group(1), match.group(2), _verdict(match.group(3))
        outcome.cases[verdict] = outcome.cases.get(verdict, 0) + 1
        if verdict == "FAIL":
            outcome.failed.append(f"{op}({variables})")
        elif verdict == "OK" and ",n=1," in f",{variables},":
            outcome.one_column += 1
    return outcome
