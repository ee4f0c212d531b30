"""One build per key at a time, across processes (pytest-xdist workers, two shells)."""

from __future__ import annotations

import fcntl
import sys
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(path: Path, *, what: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"palw: waiting for another process {what} (lock {path})", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
