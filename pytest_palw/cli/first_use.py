"""What a certification would otherwise prepare on its first run, prepared by `palw build --model SPEC`.

A first `palw certify` is slower than the next by its first-use work: the model's synthesis (before
pytest starts), this build's cffi binding (which the controller's load probe waits for) and
llama.cpp's test-backend-ops (inside the first GPU case); benchmarks/RESULTS.md has the figures.
`palw build --model SPEC` starts the model (its
synthesis, profile check and sha256, as `palw certify` resolves it) beside the compile, and the two
compiles as soon as the libraries exist, each in a child process, all at once; each prints one line.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

_MODEL = """
import sys
from pytest_palw.preflight.resolve import resolve_model
resolved = resolve_model(sys.argv[1])
print(f"{resolved.path} (sha256 {resolved.sha256[:16]}...)")
"""
_BINDING = """
import sys
from pathlib import Path
from pytest_palw.runtime.binding.runtime_abi import load_runtime_abi
from pytest_palw.runtime.library import RuntimeBuild
module = load_runtime_abi(RuntimeBuild.locate(Path(sys.argv[1])).layout)
print(module.__file__)
"""
_BACKEND_OPS = """
import sys
from pathlib import Path
from pytest_palw.probes.backend_ops import build_binary
from pytest_palw.runtime.library import RuntimeBuild
build = RuntimeBuild.locate(Path(sys.argv[1]))
print(build_binary(build).name)
"""


@dataclass
class Job:
    what: str
    process: subprocess.Popen
    log: object  # the child's stdout and stderr (a file: a progress bar would fill a pipe)
    started: float

    def finish(self) -> bool:
        """Wait; print one line (what, seconds, the child's last line or its error); True if it worked."""
        code = self.process.wait()
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read().replace("\r", "\n").splitlines() if line.strip()]
        self.log.close()
        seconds = time.monotonic() - self.started
        if code == 0:
            print(f"palw: prepared {self.what} in {seconds:.1f} s: {lines[-1] if lines else 'done'}",
                  file=sys.stderr)
            return True
        last = lines[-1] if lines else ""
        cause = next((line for line in reversed(lines) if "Error" in line or "error" in line), last)
        print(f"palw: preparing {self.what} failed (exit {code}): {cause[:400]}", file=sys.stderr)
        return False


def _start(what: str, code: str, *args: str) -> Job:
    log = tempfile.TemporaryFile("w+")
    process = subprocess.Popen([sys.executable, "-c", code, *args], stdout=log, stderr=subprocess.STDOUT, text=True)
    return Job(what, process, log, time.monotonic())


def start_model(spec: str) -> Job:
    """The model ``spec`` names, resolved as `palw certify --model SPEC` resolves it (synthesized into
    the model cache for profile:NAME)."""
    return _start(f"the model {spec}", _MODEL, spec)


def start_compiles(manifest_path: Path, variant: str) -> list[Job]:
    """The cffi binding of this build and, for CUDA, llama.cpp's test-backend-ops against it."""
    jobs = [_start("the cffi binding", _BINDING, str(manifest_path))]
    if variant == "cuda":
        jobs.append(_start("llama.cpp's test-backend-ops", _BACKEND_OPS, str(manifest_path)))
    return jobs


def finish(jobs: list[Job]) -> int:
    """Wait for every job; the number that failed."""
    return sum(not job.finish() for job in jobs)
