"""Load the model once in a child process before the first case runs.

A runtime that kills the Python process while loading (seen once: a CUDA build made on
the device with a static-libstdc++ toolchain segfaulted in llama_model_load_from_file under
Python while the seed smoke tool ran fine; `palw build` now checks for that, builder/cxx_runtime.py)
cannot be caught in-process: every xdist worker would crash in turn. The probe turns that into
one line that names the cause and the way out. The child runs beside the session's own start
(xdist's workers start and collect meanwhile); no case runs before its verdict.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_palw.errors import RuntimeLibraryError


def child_command(location: Path, model: Path) -> list[str]:
    """The probe's child: this module's main() in a fresh interpreter."""
    return [sys.executable, "-m", "pytest_palw.probes.load_probe", str(location), str(model)]


class LoadProbe:
    """The child, started without waiting: it loads the model while the session goes on (xdist
    starts its workers, pytest collects); ``check()`` waits for it before the first case runs."""

    def __init__(self, location: Path, model: Path, timeout: float = 900, brought: bool = False):
        self.location, self.model, self.timeout, self.brought = location, model, timeout, brought
        self.started = time.monotonic()
        self.process = subprocess.Popen(child_command(location, model), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)

    def check(self) -> None:
        """Raise RuntimeLibraryError if the child was killed by a signal or did not finish in time."""
        left = max(0.0, self.timeout - (time.monotonic() - self.started))
        try:
            self.process.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            raise RuntimeLibraryError(
                f"loading {self.model} with the runtime {self.location} did not finish in "
                f"{self.timeout:g} s (load probe): check that the model is on a local disk and the GPU "
                "is free (nvidia-smi), then rerun") from None
        problem = verdict(self.process.returncode, self.location, self.model, self.brought)
        if problem:
            raise RuntimeLibraryError(problem)


def verdict(returncode: int, location: Path, model: Path, brought: bool = False) -> str | None:
    """The one-line error for a child that died of a signal; None otherwise (other failures are
    reported by the in-process load, with their own cause). ``brought``: a runtime without a
    manifest, which its vendor rebuilds, not `palw build`."""
    if returncode >= 0:
        return None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    fix = ("relink its libraries so that the process holds one C++ runtime (a shared libstdc++.so.6, or a "
           "static one kept private with -Wl,--exclude-libs) and check what else they load (ldd)" if brought
           else "rebuild it with `palw build --force`, which checks that the libraries share one C++ runtime")
    return (f"loading {model} through llama-cpp-python with the runtime {location} kills the process "
            f"({name}); the runtime's C tools may still work, the Python binding cannot: {fix}")


def main(argv: list[str]) -> int:
    from pytest_palw.runtime.library import Runtime, RuntimeBuild

    runtime = Runtime(RuntimeBuild.locate(Path(argv[0])))
    runtime.load_model(Path(argv[1])).free()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
