"""sha256 of files, byte strings and directory trees (names + contents)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CHUNK = 1 << 20
# Never part of a tree's identity: VCS metadata and interpreter caches.
IGNORED_NAMES = frozenset({".git", "__pycache__", ".pytest_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
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
    """``{relative path: sha256}``; a symlink counts as its target text, not the target file."""
    root = Path(root)
    digests = {}
    for name in tree_files(root):
        path = root / name
        if path.is_symlink():
            digests[name] = sha256_bytes(b"symlink:" + os.readlink(path).encode())
        else:
            digests[name] = sha256_file(path)
    return digests


def tree_digest(root: Path, file_digests: dict[str, str] | None = None) -> str:
    """One digest over every file name and content under ``root``: renames count too."""
    file_digests = tree_file_digests(root) if file_digests is None else file_digests
    digest = hashlib.sha256()
    for name in sorted(file_digests):
        digest.update(name.encode() + b"\0" + file_digests[name].encode() + b"\n")
    return digest.hexdigest()
