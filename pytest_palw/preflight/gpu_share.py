"""How many processes of this machine drive one GPU at once.

Beyond a few processes, their CUDA contexts are time-sliced and a GPU serves fewer cases per second
than with two (benchmarks/bench_contention.sh; figures in benchmarks/RESULTS.md), so more xdist
workers made the GPU tier slower. A process therefore holds one of ``count`` machine-wide
slots while it has a live llama context (the context's creation, decode and free are the GPU work
of a case); the model's weights stay loaded outside it. The slots are OS file locks: a process
that dies frees its slot. Within a process the slot is counted (one object per slot directory), so
a case holding two contexts holds one slot and no process waits for itself.

Only the processes that run cases take slots (the plugin's session); a child they start (the
pin probe, the seed tools) does not, so a holder never waits for its own child. A wait that lasts
is said once (who holds the slots) and ends with an error after ``WAIT_LIMIT_S``.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
from pathlib import Path

from pytest_palw.errors import RuntimeLibraryError

WAIT_LIMIT_S = 900.0
SAY_AFTER_S = 60.0


class GpuSlots:
    def __init__(self, directory: Path, count: int, member: int, wait_limit_s: float = WAIT_LIMIT_S):
        """``member`` (e.g. the xdist worker's number) spreads the processes over the slots: each
        tries its own slot first."""
        if count < 1:
            raise ValueError("GpuSlots needs at least one slot")
        directory.mkdir(parents=True, exist_ok=True)
        own = member % count
        self.paths = [directory / f"slot-{(own + i) % count}.lock" for i in range(count)]  # its own first
        self.count, self.wait_limit_s = count, wait_limit_s
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
        pause, start, said = 1e-4, time.monotonic(), False
        while True:
            for path in self.paths:
                fd = _lock(path)
                if fd is not None:
                    return fd
            waited = time.monotonic() - start
            if waited > self.wait_limit_s:
                raise RuntimeLibraryError(
                    f"waited {waited:.0f} s for one of {self.count} GPU slots ({self.paths[0].parent}), held by "
                    f"{self.holders()}: end the run that holds them, or pass --palw-gpu-slots 0")
            if waited > SAY_AFTER_S and not said:
                print(f"palw: waiting {waited:.0f} s for a GPU slot, held by {self.holders()}", file=sys.stderr)
                said = True
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

    def holders(self) -> str:
        """The pids the slot files name (each holder writes its own)."""
        pids = []
        for path in self.paths:
            try:
                pids.append(path.read_text().strip() or "?")
            except OSError:
                pids.append("?")
        return "pid " + ", ".join(pids)

    @property
    def held(self) -> bool:
        return self._holders > 0


def _lock(path: Path) -> int | None:
    """A descriptor holding ``path``'s exclusive lock (the file then names this pid), or None when
    another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


_SLOTS: dict[tuple[Path, int], GpuSlots] = {}


def slots_for(count: int, member: int) -> GpuSlots | None:
    """This machine's slots for the devices this process sees (another set of GPUs has its own), one
    object per process and set; None for ``count`` 0 (no limit)."""
    if count <= 0:
        return None
    from pytest_palw.devices import visible_devices
    from pytest_palw.paths import cache_dir

    devices = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(str(d.index) for d in visible_devices())
    directory = cache_dir("gpu-slots") / (devices.replace(",", "_") or "none")
    key = (directory, count)
    if key not in _SLOTS:
        _SLOTS[key] = GpuSlots(directory, count, member)
    return _SLOTS[key]
