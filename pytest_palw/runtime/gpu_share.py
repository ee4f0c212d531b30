"""How many processes of this machine drive one GPU at once.

Measured on an H200 (benchmarks/bench_contention.sh, one reject case in a loop per process): one
process 19 ms a case, two 20-30 ms each, four ~123 ms each, eight ~250 ms each. Beyond two, the
processes' CUDA contexts are time-sliced and the GPU serves ~32 cases/s instead of ~80, so more
xdist workers made the GPU tier slower. A process therefore holds one of ``count`` machine-wide
slots while it has a live llama context (the context's creation, decode and free are the GPU work
of a case); the model's weights stay loaded outside it. The slots are OS file locks: a process
that dies frees its slot. Within a process the slot is counted, so a case holding two contexts
holds one slot (no process waits for itself).

Only the processes that run cases take slots (the plugin's session); a child they start (the
pin probe, the seed tools) does not, so a holder never waits for its own child.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path


class GpuSlots:
    def __init__(self, directory: Path, count: int, member: int):
        """``member`` (e.g. the xdist worker's number) spreads the processes over the slots: each
        tries its own slot first."""
        if count < 1:
            raise ValueError("GpuSlots needs at least one slot")
        directory.mkdir(parents=True, exist_ok=True)
        own = member % count
        self.paths = [directory / f"slot-{(own + i) % count}.lock" for i in range(count)]  # its own first
        self.count = count
        self._holders = 0
        self._fd: int | None = None
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._fd = self._take()
            self._holders += 1

    def _take(self) -> int:
        """The first free slot, its own first; while none is, try again every 0.1-2 ms (a slot that
        one process keeps long never holds up the others: they take whichever frees)."""
        pause = 1e-4
        while True:
            for path in self.paths:
                fd = _lock(path)
                if fd is not None:
                    return fd
            time.sleep(pause)
            pause = min(pause * 2, 2e-3)

    def release(self) -> None:
        with self._lock:
            if self._holders == 0:
                return
            self._holders -= 1
            if self._holders == 0 and self._fd is not None:
                os.close(self._fd)  # closing the only descriptor drops the lock
                self._fd = None

    @property
    def held(self) -> bool:
        return self._holders > 0


def _lock(path: Path) -> int | None:
    """A descriptor holding ``path``'s exclusive lock, or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def slots_for(count: int, member: int) -> GpuSlots | None:
    """This machine's slots for the visible devices (CUDA_VISIBLE_DEVICES: another set of GPUs
    has its own), or None for ``count`` 0 (no limit)."""
    if count <= 0:
        return None
    from pytest_palw.paths import cache_dir

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_") or "none"
    return GpuSlots(cache_dir("gpu-slots") / f"{visible}-of-{count}", count, member)
