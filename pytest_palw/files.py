"""Every file the tool writes is written whole or not at all: into a temporary file beside it, then
renamed into place with ``os.replace`` (one step on POSIX). A reader sees the old file or the new
one, never half of one; a write that fails (a full disk, a read-only directory) leaves no temporary
and raises ``FileWriteError`` in one line that names the file and the fix. A writer killed with
SIGKILL runs no cleanup: its temporary stays until a later write of the same file sweeps it, once it
has been untouched for ``STALE_AFTER_S`` (a younger one may be a live writer's, on this host or
another sharing the cache)."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pytest_palw.errors import PalwError


class FileWriteError(PalwError):
    """A file could not be written (disk full, read-only, a directory in its place)."""

    exit_code = 2


STALE_AFTER_S = 3600.0


def temporary_beside(path: Path) -> Path:
    """The temporary name ``path`` is written under first (hidden, this process's own)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def sweep_stale(path: Path) -> None:
    """Remove the temporaries of ``path`` (``.NAME.PID.tmp``) untouched for ``STALE_AFTER_S``: what
    killed writers left. Best effort: a sweep that fails leaves them."""
    prefix, cutoff = f".{path.name}.", time.time() - STALE_AFTER_S
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp") and name[len(prefix):-4].isdigit()):
            continue
        try:
            stale = path.parent / name
            if stale.stat().st_mtime < cutoff:
                stale.unlink()
        except OSError:
            pass


@contextmanager
def whole(path: Path | str, *, fix: str = "free disk space or write elsewhere") -> Iterator[Path]:
    """``with whole(path) as temporary:`` write ``temporary`` in the block; on leaving it, it
    replaces ``path`` in one step. An exception in the block or in the rename removes the temporary
    and leaves ``path`` as it was; an OSError becomes a FileWriteError naming ``path`` and ``fix``."""
    path = Path(path)
    temporary = temporary_beside(path)
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "a directory is in its place", str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        yield temporary
        os.replace(temporary, path)
        sweep_stale(path)
    except OSError as error:
        raise FileWriteError(f"cannot write {path} ({error.strerror or error}): {fix}") from None
    finally:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass


def write_whole(path: Path | str, data: bytes | str, *, fix: str = "free disk space or write elsewhere") -> Path:
    """``path`` holds ``data`` (str as UTF-8), written whole or not at all (see ``whole``)."""
    path = Path(path)
    with whole(path, fix=fix) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
    return path
