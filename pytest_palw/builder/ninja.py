"""Run CMake and Ninja with their output in a log file, ninja's ``[n/N]`` lines on a progress bar."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import deque
from pathlib import Path

from pytest_palw.errors import BuildError
from pytest_palw.progress import Progress

TAIL_LINES = 40
_STATUS = re.compile(r"^\[(?P<done>\d+)/(?P<total>\d+)\]\s*(?P<what>.*)$")


def parse_status(line: str) -> tuple[int, int, str] | None:
    """``"[12/203] Building CXX object x.o"`` -> ``(12, 203, "Building CXX object x.o")``."""
    match = _STATUS.match(line.strip())
    if not match:
        return None
    return int(match["done"]), int(match["total"]), match["what"]


def log_tail(log: Path, lines: int = TAIL_LINES) -> list[str]:
    with open(log, errors="replace") as handle:
        return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]


def run_logged(command: list[str], log: Path, *, step: str, cwd: Path | None = None,
               env: dict | None = None, progress_label: str | None = None) -> None:
    """Run ``command`` with all output to ``log``; a failure shows the log's tail and raises BuildError."""
    log.parent.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ if env is None else env)
    environment.setdefault("NINJA_STATUS", "[%f/%t] ")  # the form parse_status reads
    # Configure has no [n/N] lines: a single "started" line says what is happening.
    progress = Progress(progress_label) if progress_label else None
    if progress is None:
        print(f"palw: {step} (log: {log})", file=sys.stderr)
    with open(log, "w") as sink:
        sink.write("$ " + " ".join(command) + "\n")
        sink.flush()
        process = subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                   errors="replace", bufsize=1)
        try:
            for line in process.stdout:
                sink.write(line)
                status = parse_status(line) if progress else None
                if status:
                    done, total, what = status
                    progress.update(done, total, note=_short(what))
            code = process.wait()
        except BaseException:
            process.kill()
            process.wait()
            raise
    if progress:
        progress.finish("done" if code == 0 else f"failed (exit {code})")
    if code != 0:
        tail = log_tail(log)
        print(f"--- last {len(tail)} lines of {log} ---", file=sys.stderr)
        print("\n".join(tail), file=sys.stderr)
        print("---", file=sys.stderr)
        raise BuildError(f"{step} failed (exit {code}); the log's tail is above, the full log is "
                         f"{log}: fix the cause, then rerun `palw build` (--force starts clean)")


def _short(what: str, width: int = 60) -> str:
    """The last path component of ninja's description: enough to see it moving."""
    name = what.rsplit("/", 1)[-1]
    return name if len(name) <= width else "..." + name[-width:]
