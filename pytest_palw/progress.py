"""Progress for long steps, on stderr: a live bar on a terminal, sparse lines otherwise."""

from __future__ import annotations

import sys
import time


class Progress:
    """``with Progress("build", total=203) as p: p.update(n)`` draws ``build [####  ] 120/203``."""

    def __init__(self, label: str, total: int | None = None, unit: str = "", stream=None):
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream or sys.stderr
        self.done = 0
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_emit = 0.0
        self._last_fraction = -1.0

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.finish()

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        self.done = done
        if total is not None:
            self.total = total
        now = time.monotonic()
        fraction = done / self.total if self.total else 0.0
        # Off a terminal (CI logs) emit at most every 10 % or 5 s, never a flood.
        if not self._tty and fraction - self._last_fraction < 0.1 and now - self._last_emit < 5:
            return
        self._last_emit, self._last_fraction = now, fraction
        self._emit(note)

    def _emit(self, note: str) -> None:
        if self.total:
            width = 30
            filled = int(width * min(self.done, self.total) / self.total)
            bar = "#" * filled + "-" * (width - filled)
            text = f"{self.label} [{bar}] {self.done}/{self.total}{self.unit}"
        else:
            text = f"{self.label} {self.done}{self.unit}"
        if note:
            text += f"  {note}"
        if self._tty:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, note: str = "done") -> None:
        self._emit(note)
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()
