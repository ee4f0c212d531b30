"""The llama.cpp source: the verified llama-cpp-python 0.3.34 sdist, a local tree, or a `palw source` archive.

Two phases, so that a warm build touches nothing but digests: ``locate_source`` names the
source and its digest (cheap; it may download the sdist once), ``materialize`` makes the
tree exist on disk (extracting into the cache, once per digest).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_palw.cache import exclusive, sha256_file, tree_digest
from pytest_palw.errors import SourceError
from pytest_palw.paths import cache_dir
from pytest_palw.progress import Progress

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.34"
SDIST_SHA256 = "d849d286d808284f1d3ec1bd6875572430d29d1f9574a010232caa4e9cef0e35"
SDIST_FILENAME = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_PREFIX = f"llama_cpp_python-{SDIST_VERSION}/"
SDIST_TREE = SDIST_PREFIX + "vendor/llama.cpp/"
SDIST_BINDING = SDIST_PREFIX + "llama_cpp/"

MARKER_NAME = "PALW_SOURCE.json"
MARKER_SCHEMA = "pytest-palw.source"
ARCHIVE_ROOT = "palw-source"  # the one top-level directory of a `palw source` archive
TREE_DIR, BINDING_DIR = "llama.cpp", "python"  # layout of every materialized source
COMPLETE_FLAG = ".complete"

NO_NETWORK_FIX = ("pass --source FILE made by `palw source --output FILE` on a machine with "
                  "network")


@dataclass(frozen=True)
class SourceRef:
    """A source named but not necessarily on disk yet.

    kind: ``sdist`` (the tarball), ``tree`` (an unpatched llama.cpp directory),
    ``palw-source`` (an archive or directory made by `palw source`, already patched).
    """

    kind: str
    path: Path
    sha256: str  # sdist/archive file digest, or the tree digest of a directory
    marker: dict | None = None

    @property
    def patched(self) -> bool:
        return self.kind == "palw-source"

    def describe(self) -> dict:
        """The manifest's ``inputs.sdist`` or ``inputs.source`` entry."""
        if self.kind == "sdist":
            return {"name": SDIST_NAME, "version": SDIST_VERSION, "sha256": self.sha256,
                    "path": str(self.path)}
        entry = {"kind": self.kind, "path": str(self.path), "sha256": self.sha256}
        if self.marker:
            entry["sdist_sha256"] = self.marker.get("sdist", {}).get("sha256")
        return entry


@dataclass(frozen=True)
class SourceTree:
    """A source on disk: the llama.cpp tree and, when known, the dir holding ``llama_cpp/``."""

    ref: SourceRef
    tree: Path
    binding_python_path: Path | None


# -- the sdist ---------------------------------------------------------------------------

def cached_sdist() -> Path | None:
    """The cached tarball if present (verified later); never touches the network."""
    path = cache_dir("sources") / SDIST_FILENAME
    return path if path.is_file() else None


def verify_sdist(path: Path, *, cached: bool) -> str:
    actual = sha256_file(path)
    if actual != SDIST_SHA256:
        fix = ("delete it and rerun `palw build` to download it again" if cached
               else "pass the genuine file from PyPI, or omit --source to download it")
        raise SourceError(f"{path} is not the {SDIST_NAME} {SDIST_VERSION} sdist: sha256 is "
                          f"{actual}, expected {SDIST_SHA256}; {fix}")
    return actual


def download_sdist() -> Path:
    """``pip download`` the sdist into the cache (pip's own output shows the download bar)."""
    sources = cache_dir("sources")
    with tempfile.TemporaryDirectory(dir=sources, prefix="download-") as scratch:
        # --no-binary names only this package: with ":all:" pip would also build the
        # sdist's build requirements (cmake!) from source just to read its metadata.
        command = [sys.executable, "-m", "pip", "download", "--no-deps",
                   "--no-binary", SDIST_NAME, f"{SDIST_NAME}=={SDIST_VERSION}", "-d", scratch]
        print(f"palw: downloading {SDIST_NAME}=={SDIST_VERSION} from PyPI", file=sys.stderr)
        try:
            # pip's stdout goes to our stderr: stdout stays clean for --print-manifest.
            result = subprocess.run(command, stdout=sys.stderr.fileno(), stdin=subprocess.DEVNULL)
        except (OSError, ValueError):
            result = subprocess.run(command, capture_output=True, text=True)
            sys.stderr.write(result.stdout + result.stderr)
        downloaded = Path(scratch) / SDIST_FILENAME
        if result.returncode != 0 or not downloaded.is_file():
            raise SourceError(f"cannot download {SDIST_NAME}=={SDIST_VERSION} from PyPI (no "
                              f"network?); pip exited with {result.returncode}: {NO_NETWORK_FIX}")
        verify_sdist(downloaded, cached=False)
        target = sources / SDIST_FILENAME
        os.replace(downloaded, target)  # only a verified tarball ever lands in the cache
    return target


def ensure_sdist() -> Path:
    """The verified cached sdist, downloading it on first use only (one process downloads)."""
    path = cached_sdist()
    if path is None:
        with exclusive(cache_dir("sources") / f"{SDIST_FILENAME}.lock", what="downloading the sdist"):
            path = cached_sdist() or download_sdist()
    verify_sdist(path, cached=True)
    return path


# -- naming a source -----------------------------------------------------------------------

def read_archive_marker(path: Path) -> dict | None:
    """The marker of a `palw source` archive (its first member), or None for any other tarball."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            first = archive.next()
            if first is None or first.name != f"{ARCHIVE_ROOT}/{MARKER_NAME}":
                return None
            return json.loads(archive.extractfile(first).read())
    except (tarfile.TarError, OSError, EOFError, ValueError):
        return None


def is_llama_cpp_tree(path: Path) -> bool:
    return all((path / name).is_file() for name in
               ("CMakeLists.txt", "include/llama.h", "ggml/CMakeLists.txt", "src/llama.cpp"))


def locate_source(source: Path | str | None, *, download: bool = True) -> SourceRef | None:
    """Name the source and its digest. ``None`` source means the PyPI sdist.

    With ``download=False`` a missing sdist gives None instead of a download.
    """
    if source is None:
        path = ensure_sdist() if download else cached_sdist()
        if path is None:
            return None
        return SourceRef("sdist", path, SDIST_SHA256 if download else verify_sdist(path, cached=True))
    path = Path(source).expanduser().resolve()
    if path.is_file():
        return _locate_file(path)
    if path.is_dir():
        return _locate_directory(path)
    raise SourceError(f"--source {source} does not exist: pass an unpatched llama.cpp directory, "
                      f"the {SDIST_FILENAME} sdist, or a file made by `palw source --output FILE`")


def _locate_file(path: Path) -> SourceRef:
    digest = sha256_file(path)
    if digest == SDIST_SHA256:
        return SourceRef("sdist", path, digest)
    marker = read_archive_marker(path)
    if marker is not None:
        _check_marker(marker, path)
        return SourceRef("palw-source", path, digest, marker)
    raise SourceError(f"--source {path} is neither the {SDIST_NAME} {SDIST_VERSION} sdist (sha256 "
                      f"is {digest}, expected {SDIST_SHA256}) nor a `palw source` archive; pass "
                      "the genuine sdist from PyPI or a file made by `palw source --output FILE`")


def _locate_directory(path: Path) -> SourceRef:
    marker_path = path / MARKER_NAME
    if marker_path.is_file() and is_llama_cpp_tree(path / TREE_DIR):
        marker = json.loads(marker_path.read_text())
        _check_marker(marker, path)
        return SourceRef("palw-source", path, tree_digest(path / TREE_DIR), marker)
    tree = _tree_in(path)
    if tree is None:
        raise SourceError(f"--source {path} is not a llama.cpp tree (no CMakeLists.txt, "
                          "include/llama.h, ggml/ and src/llama.cpp): pass the root of an "
                          "unpatched llama.cpp checkout or of an extracted sdist")
    return SourceRef("tree", path, tree_digest(tree))


def _tree_in(path: Path) -> Path | None:
    """The llama.cpp tree of a directory: the directory itself or an extracted sdist's vendor copy."""
    for candidate in (path, path / "vendor" / "llama.cpp"):
        if is_llama_cpp_tree(candidate):
            return candidate
    return None


def _check_marker(marker: dict, path: Path) -> None:
    if marker.get("schema") != MARKER_SCHEMA or marker.get("version") != 1:
        raise SourceError(f"{path} has a {MARKER_NAME} this pytest-palw does not read "
                          f"(schema {marker.get('schema')!r} v{marker.get('version')!r}): "
                          "remake it with `palw source --output FILE`")


# -- putting a source on disk ------------------------------------------------------------------

def materialize(ref: SourceRef) -> SourceTree:
    """The source's llama.cpp tree on disk (extracted into the cache once per digest)."""
    if ref.kind == "sdist":
        root = _extract_once(ref, f"sdist-{ref.sha256[:16]}", _extract_sdist)
        return SourceTree(ref, root / TREE_DIR, root / BINDING_DIR)
    if ref.kind == "palw-source" and ref.path.is_file():
        root = _extract_once(ref, f"palw-source-{ref.sha256[:16]}", _extract_archive)
        return SourceTree(ref, root / TREE_DIR, root / BINDING_DIR)
    if ref.kind == "palw-source":
        return SourceTree(ref, ref.path / TREE_DIR, _binding_in(ref.path / BINDING_DIR))
    tree = _tree_in(ref.path)
    # A vendored tree inside an extracted sdist has the binding two levels up.
    binding = _binding_in(tree.parent.parent) if tree != ref.path else _binding_in(ref.path)
    return SourceTree(ref, tree, binding)


def _binding_in(directory: Path) -> Path | None:
    return directory if (directory / "llama_cpp" / "__init__.py").is_file() else None


def _extract_once(ref: SourceRef, name: str, extract) -> Path:
    root = cache_dir("sources") / name
    if (root / COMPLETE_FLAG).is_file():
        return root
    with exclusive(root.with_name(name + ".lock"), what=f"extracting {ref.path.name}"):
        if not (root / COMPLETE_FLAG).is_file():
            _extract_into(ref, root, extract)
    return root


def _extract_into(ref: SourceRef, root: Path, extract) -> None:
    scratch = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}-"))
    try:
        extract(ref, scratch)
        (scratch / COMPLETE_FLAG).write_text(ref.sha256 + "\n")
        shutil.rmtree(root, ignore_errors=True)  # a half-written one from an interrupted run
        os.replace(scratch, root)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _extract_members(archive_path: Path, destination: Path, keep) -> None:
    """Extract the members ``keep(name)`` maps to a new relative name (None = skip)."""
    with tarfile.open(archive_path, "r:gz") as archive:
        members = []
        for member in archive.getmembers():
            renamed = keep(member.name)
            if renamed:
                members.append(member.replace(name=renamed) if hasattr(member, "replace")
                               else _renamed(member, renamed))
        with Progress(f"extract {archive_path.name}", total=len(members)) as progress:
            for done, member in enumerate(members, 1):
                archive.extract(member, destination, **_filter())
                if done % 200 == 0:
                    progress.update(done)
            progress.done = len(members)


def _renamed(member: tarfile.TarInfo, name: str) -> tarfile.TarInfo:
    import copy
    clone = copy.copy(member)
    clone.name = name
    return clone


def _filter() -> dict:
    # The "data" filter refuses absolute paths, links out of the tree and device files.
    return {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _extract_sdist(ref: SourceRef, destination: Path) -> None:
    def keep(name: str) -> str | None:
        if name.startswith(SDIST_TREE) and name != SDIST_TREE + ".git":
            # vendor/llama.cpp/.git is a submodule gitlink; it makes `git apply` fail.
            return TREE_DIR + "/" + name[len(SDIST_TREE):]
        if name.startswith(SDIST_BINDING):
            return BINDING_DIR + "/llama_cpp/" + name[len(SDIST_BINDING):]
        return None

    _extract_members(ref.path, destination, keep)
    if not is_llama_cpp_tree(destination / TREE_DIR):
        raise SourceError(f"{ref.path} holds no vendor/llama.cpp tree: delete it and rerun "
                          "`palw build` to download it again")


def _extract_archive(ref: SourceRef, destination: Path) -> None:
    prefix = ARCHIVE_ROOT + "/"
    _extract_members(ref.path, destination,
                     lambda name: name[len(prefix):] if name.startswith(prefix) else None)
    expected = (ref.marker or {}).get("tree_sha256")
    actual = tree_digest(destination / TREE_DIR)
    if expected != actual:
        raise SourceError(f"{ref.path} is damaged: its llama.cpp tree digests to {actual}, the "
                          f"archive's {MARKER_NAME} says {expected}; remake it with "
                          "`palw source --output FILE`")
