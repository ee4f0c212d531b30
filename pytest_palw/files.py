"""Every file the tool writes is written whole or not at all: into a temporary file beside it, then
renamed into place with ``os.replace`` (one step on POSIX). A reader sees the old file or the new
one, never half of one; a write that fails (a full disk, a read-only directory) leaves no temporary
and raises ``FileWriteError`` in one line that names the file and the fix."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pytest_palw.errors import PalwError


class FileWriteError(PalwError):
    """A file could not be written (disk full, read-only, a directory in its place)."""

    exit_code = 2


def temporary_beside(path: Path) -> Path:
    """The temporary name ``path`` is written under first (hidden, this process's own)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


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
