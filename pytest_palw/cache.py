"""The caches' helpers, one copy each: sha256 of files, byte strings, trees and keys; digests
remembered beside a file; one process at a time per cache entry (an OS lock, freed if its holder dies).

Where the caches are is pytest_palw/paths.py's to say (``cache_dir``)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

CHUNK = 1 << 20
_LARGE_FILE = 1 << 30  # hashing this much takes seconds: show progress
# Never part of a tree's identity: VCS metadata and interpreter caches.
IGNORED_NAMES = frozenset({".git", "__pycache__", ".pytest_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return sha256_stream(handle)


def sha256_stream(handle) -> str:
    """sha256 of what is left to read in a binary file object. A regular file's holes (a sparse
    file: the synthetic gate models are 5 GB of which a few MB are written) are hashed as the zeros
    they read as, without reading them: the filesystem says where its data is (SEEK_DATA/SEEK_HOLE),
    and every data byte is read from the file, here and now."""
    digest = hashlib.sha256()
    segments = _data_segments(handle)
    if segments is None:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    fd, zeros = handle.fileno(), bytes(CHUNK)
    for start, end, is_data in segments:
        position = start
        while position < end:
            size = min(CHUNK, end - position)
            if is_data:
                chunk = os.pread(fd, size, position)
                if not chunk:  # the file shrank under us: what is there is what is hashed
                    handle.seek(position)
                    return digest.hexdigest()
                digest.update(chunk)
                position += len(chunk)
            else:
                digest.update(zeros[:size] if size < CHUNK else zeros)
                position += size
    handle.seek(segments[-1][1] if segments else handle.tell())
    return digest.hexdigest()


def _data_segments(handle) -> list[tuple[int, int, bool]] | None:
    """(start, end, is data) from the handle's position to the file's end, or None where the file
    cannot say (no descriptor, not a regular file, no SEEK_DATA): then it is read through."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    try:
        fd = handle.fileno()
        status = os.fstat(fd)
        position = start = handle.tell()
    except (AttributeError, OSError, ValueError):
        return None
    if seek_data is None or seek_hole is None or not stat.S_ISREG(status.st_mode):
        return None
    end, segments = status.st_size, []
    try:
        while position < end:
            try:
                data = min(os.lseek(fd, position, seek_data), end)
            except OSError as error:
                if error.errno != errno.ENXIO:  # ENXIO: no data after position, a hole to the end
                    raise
                data = end
            if data > position:
                segments.append((position, data, False))
            if data >= end:
                break
            hole = min(os.lseek(fd, data, seek_hole), end)
            segments.append((data, hole, True))
            position = hole
    except OSError:
        handle.seek(start)  # read through from where the caller left it
        return None
    return segments


def _remembered_entry(path: Path, kind: str = "sha256") -> Path:
    from pytest_palw.paths import cache_dir

    suffix = "" if kind == "sha256" else f".{kind}"
    return cache_dir("digests") / f"{sha256_bytes(str(path).encode())[:32]}{suffix}.json"


def _stamp(path: Path) -> dict:
    stat = path.stat()
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def recorded(path: Path, kind: str = "sha256"):
    """What was remembered of ``kind`` for this file if it still describes it (same path, size and
    mtime), else None."""
    path = Path(path).resolve()
    try:
        entry = json.loads(_remembered_entry(path, kind).read_text())
        stamp = _stamp(path)
        if {key: entry.get(key) for key in stamp} == stamp:
            return entry[kind]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # absent, unreadable or stale
    return None


def remembered(path: Path, kind: str, compute: Callable[[Path], object]):
    """``compute(path)`` (JSON-able), computed once while the file's size and mtime stay: a 5 GB
    model is read once per host, not once per tool or worker. Remembered in the cache's digests/,
    one entry per file and kind, never beside the file."""
    path = Path(path).resolve()
    known = recorded(path, kind)
    if known is not None:
        return known
    stamp = _stamp(path)
    value = compute(path)
    remember(path, kind, value, stamp)
    return value


def remember(path: Path, kind: str, value, stamp: dict) -> None:
    """Remember ``value`` for the file as ``stamp`` (``_stamp`` before ``value`` was computed) saw it,
    unless the file changed meanwhile. Written whole: a concurrent reader sees the old entry or the new."""
    from pytest_palw.errors import PalwError
    from pytest_palw.files import write_whole

    try:
        if _stamp(path) != stamp:
            return
        write_whole(_remembered_entry(path, kind), json.dumps({**stamp, kind: value}))
    except (OSError, PalwError):
        pass  # a read-only cache still answers, just without remembering


def recorded_sha256(path: Path) -> str | None:
    """The remembered digest if it still describes the file, else None."""
    known = recorded(path)
    return str(known) if known is not None else None


def remembered_sha256(path: Path) -> str:
    """sha256 of a file, hashed once while its size and mtime stay (see ``remembered``)."""
    return str(remembered(path, "sha256", _sha256_with_progress))


class FileDigest:
    """sha256 of a file's bytes, read in this run by a thread beside other work (the controller
    hashes a 5 GB model while pytest collects: hashlib releases the GIL), never taken from a memo;
    remembered after, so a second check of the same file in this run is cheap."""

    def __init__(self, path: Path):
        self.path = Path(path).resolve()
        self._value: str | None = None
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name=f"sha256 {self.path.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            stamp = _stamp(self.path)
            self._value = sha256_file(self.path)
            remember(self.path, "sha256", self._value, stamp)
        except OSError as error:
            self._error = error

    def result(self) -> str:
        """The digest (waits for the thread); PalwError in one line when the file could not be read."""
        self._thread.join()
        if self._value is None:
            from pytest_palw.errors import PalwError

            raise PalwError(f"cannot read {self.path} to hash it ({self._error}): keep the file in place and "
                            "readable while the run lasts")
        return self._value


def _sha256_with_progress(path: Path) -> str:
    size = path.stat().st_size
    progress = None
    if size >= _LARGE_FILE:
        from pytest_palw.progress import Progress

        progress = Progress(f"sha256 {path.name}", total=size >> 20, unit=" MiB")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(16 * CHUNK):
            digest.update(block)
            if progress is not None:
                progress.update(handle.tell() >> 20)
    if progress is not None:
        progress.finish()
    return digest.hexdigest()


def tree_files(root: Path) -> list[str]:
    """Relative POSIX paths of the regular files (and symlinks) under ``root``, sorted."""
    root = Path(root)
    found = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_NAMES)
        for name in filenames:
            if name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES):
                continue
            found.append(Path(directory, name).relative_to(root).as_posix())
    return sorted(found)


def tree_file_digests(root: Path) -> dict[str, str]:
    """``{relative path: sha256}``; a symlink counts as its target text, not the target file, and
    anything else that is not a regular file (a named pipe, a socket, a device) as its kind: it is
    never opened (a pipe opened for reading waits for a writer). Names and link targets count as their
    bytes, whatever their encoding."""
    root = Path(root)
    digests = {}
    for name in tree_files(root):
        path = root / name
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            digests[name] = sha256_bytes(b"symlink:" + os.fsencode(os.readlink(path)))
        elif stat.S_ISREG(mode):
            digests[name] = sha256_file(path)
        else:
            digests[name] = sha256_bytes(b"special:%o" % stat.S_IFMT(mode))
    return digests


def tree_digest(root: Path, file_digests: dict[str, str] | None = None) -> str:
    """One digest over every file name and content under ``root``: renames count too."""
    file_digests = tree_file_digests(root) if file_digests is None else file_digests
    digest = hashlib.sha256()
    for name in sorted(file_digests):
        digest.update(os.fsencode(name) + b"\0" + file_digests[name].encode() + b"\n")
    return digest.hexdigest()


def key_of(*parts: object) -> str:
    """A cache key: 16 hex digits of the sha256 of the parts' repr (bytes, strings, tuples of them)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


# -- one process per cache entry (pytest-xdist workers, two shells) ------------------------------------


@contextmanager
def exclusive(path: Path, *, what: str):
    """Hold ``path``'s lock for the block; says on stderr when it waits for another process."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError as error:
        from pytest_palw.errors import CacheError

        raise CacheError(f"cannot create the lock {path} ({error.strerror or error})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"palw: waiting for another process {what} (lock {path})", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
