"""`palw source`: a pruned, already-patched source archive for machines without network.

The archive is reproducible (sorted members, fixed times and owners, no gzip timestamp),
so the same inputs give the same bytes and the same build cache key everywhere.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_palw import __version__
from pytest_palw.builder.patching import apply_patch_set, copy_tree, current_patch_set
from pytest_palw.builder.pruning import prune
from pytest_palw.builder.source import (
    ARCHIVE_ROOT,
    BINDING_DIR,
    MARKER_NAME,
    MARKER_SCHEMA,
    TREE_DIR,
    SourceRef,
    locate_source,
    materialize,
)
from pytest_palw.cache import tree_digest, tree_files
from pytest_palw.errors import SourceError
from pytest_palw.files import whole
from pytest_palw.paths import cache_dir

FIXED_MTIME = 0  # the epoch: archive bytes must not depend on when or where they were made
SIZE_LIMIT = 10 * 1000 * 1000


@dataclass(frozen=True)
class ArchiveReport:
    path: Path
    size: int
    files: int
    pruned: list[str]
    marker: dict


def make_source_archive(output: Path | str, *, source=None, overlays=None) -> ArchiveReport:
    """Patch the source, prune it and write ``output`` (tar.gz) with its PALW_SOURCE.json marker."""
    output = Path(output).expanduser().resolve()
    patch_set = current_patch_set(overlays)
    ref = locate_source(source)
    if ref.patched:
        raise SourceError(f"{ref.path} is already a `palw source` archive: pass it to "
                          "`palw build --source` directly, or pass the sdist/unpatched tree here")
    tree = materialize(ref)
    with tempfile.TemporaryDirectory(dir=cache_dir("sources"), prefix="palw-source-") as scratch:
        work = Path(scratch) / TREE_DIR
        print(f"palw: patching a copy of {tree.tree}", file=sys.stderr)
        copy_tree(tree.tree, work)
        apply_patch_set(work, patch_set)
        pruned = prune(work)
        marker = {"schema": MARKER_SCHEMA, "version": 1, "pytest_palw": __version__,
                  **_origin(ref), **patch_set.marker_digests(),
                  "tree_sha256": tree_digest(work), "pruned": pruned}
        files = write_archive(output, marker, work, tree.binding_python_path)
    size = output.stat().st_size
    if size > SIZE_LIMIT:
        print(f"palw: warning: {output} is {size / 1e6:.1f} MB, over the {SIZE_LIMIT / 1e6:.0f} MB "
              "budget: review pytest_palw/builder/pruning.py", file=sys.stderr)
    return ArchiveReport(output, size, files, pruned, marker)


def _origin(ref: SourceRef) -> dict:
    if ref.kind == "sdist":
        entry = ref.describe()
        entry.pop("path")
        return {"sdist": entry}
    return {"source": {"kind": ref.kind, "sha256": ref.sha256}}


def write_archive(output: Path, marker: dict, tree: Path, binding_parent: Path | None) -> int:
    """Marker first (so a reader finds it without unpacking), then the tree, then the binding."""
    members = [(f"{TREE_DIR}/{name}", tree / name) for name in tree_files(tree)]
    if binding_parent is not None:
        binding = Path(binding_parent)
        members += [(f"{BINDING_DIR}/{name}", binding / name) for name in tree_files(binding)
                    if name.startswith("llama_cpp/")]
    with whole(output, fix="free disk space, or name a writable --output") as temporary, \
            open(temporary, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=FIXED_MTIME, compresslevel=9) as packed, \
            tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as archive:
        data = json.dumps(marker, indent=2, sort_keys=True).encode() + b"\n"
        archive.addfile(_info(f"{ARCHIVE_ROOT}/{MARKER_NAME}", len(data), 0o644), io.BytesIO(data))
        for name, path in members:
            _add(archive, f"{ARCHIVE_ROOT}/{name}", path)
    return len(members) + 1


def _info(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add(archive: tarfile.TarFile, name: str, path: Path) -> None:
    if path.is_symlink():
        info = _info(name, 0, 0o777)
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
        archive.addfile(info)
        return
    executable = os.access(path, os.X_OK)
    with open(path, "rb") as handle:
        archive.addfile(_info(name, path.stat().st_size, 0o755 if executable else 0o644), handle)
