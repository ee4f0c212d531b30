"""`palw build --cache-to DIR` and `--cache-from DIR`: a finished build carried to another machine
(a CI gate's cache), so a fresh machine certifies without compiling.

The archive is named by the build's cache key (``palw-build-<variant>-<key>.tar.gz``): only a
plan with the same inputs (source, patches, native runtime, toolchain, arch, pin) ever finds it,
so reusing it changes nothing the key covers. It holds the build directory without its objects
(the libraries, the tools, the patched source tree the runtime's headers are read from) and the
binding's Python package when the build points into the source cache. Restored, it lands in this
machine's build root and source cache, and the manifest's paths are moved there.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from pytest_palw.builder.manifest import MANIFEST_NAME, Manifest
from pytest_palw.errors import BuildError, PalwError
from pytest_palw.files import whole, write_whole
from pytest_palw.paths import cache_dir

META_NAME = "palw-build-archive.json"
SKIPPED_SUFFIXES = (".o", ".a", ".lock", ".tmp")
SKIPPED_DIRS = ("CMakeFiles",)


def archive_path(directory: Path | str, build_dir_name: str) -> Path:
    return Path(directory) / f"palw-build-{build_dir_name}.tar.gz"


def save(manifest: Manifest, directory: Path | str) -> Path:
    """Write the archive of ``manifest``'s build into ``directory`` unless one of its key is there."""
    build_dir = Path(manifest.path).parent
    target = archive_path(directory, build_dir.name)
    if target.is_file():
        print(f"palw: {target} is there already (same key, same inputs): kept", file=sys.stderr)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    sources = cache_dir("sources")
    binding = Path(manifest.binding_python_path) if manifest.binding_python_path else None
    carried_binding = binding if binding is not None and sources in binding.parents else None
    meta = {"key": manifest.key, "build_dir": build_dir.name, "build_root": str(build_dir.parent),
            "sources": str(sources),
            "binding": str(carried_binding.relative_to(sources)) if carried_binding else None}
    with whole(target, fix="free disk space, or name a writable directory with --cache-to") as partial, \
            tarfile.open(partial, "w:gz", compresslevel=3) as archive:  # 9 takes a minute for ~40 MiB
        data = json.dumps(meta, indent=1).encode()
        info = tarfile.TarInfo(META_NAME)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
        archive.add(build_dir, arcname=f"build/{build_dir.name}", filter=_without_objects)
        if carried_binding is not None:
            archive.add(carried_binding, arcname=f"sources/{meta['binding']}", filter=_without_objects)
    print(f"palw: build archive {target} ({target.stat().st_size / 2**20:.0f} MiB)", file=sys.stderr)
    return target


def restore(directory: Path | str, build_dir: Path, key: str) -> bool:
    """Unpack the build of ``key`` from ``directory``'s archive into ``build_dir`` (and its binding in
    the source cache), its manifest's paths moved here; False when the directory has no archive of
    that key.

    Atomic: the whole archive is unpacked into a temporary directory beside the build root and
    checked there (every member, the manifest, each library's sha256, the patched headers); only
    then is it renamed into place. A refused archive (BuildError, one line) leaves the cache as it was."""
    source = archive_path(directory, build_dir.name)
    if not source.is_file():
        print(f"palw: no {source.name} in {directory}: building", file=sys.stderr)
        return False
    sources = cache_dir("sources")
    staging = Path(tempfile.mkdtemp(prefix=f".restore-{build_dir.name}-", dir=build_dir.parent))
    try:
        meta = _unpack(source, staging, build_dir, key)
        staged_build, binding = staging / "build" / build_dir.name, meta.get("binding")
        manifest_path = staged_build / MANIFEST_NAME
        try:
            text = manifest_path.read_text()
        except OSError:
            raise _refused(source, f"it has no build/{build_dir.name}/{MANIFEST_NAME}") from None
        here = _moved(text, meta, build_dir, sources)
        staged = _moved(text, meta, staged_build, staging / "sources")
        write_whole(manifest_path, staged)
        try:
            manifest = Manifest.load(manifest_path)
        except PalwError as error:
            raise _refused(source, str(error)) from None
        damage = manifest.damage() if manifest.key == key else f"its manifest is of key {manifest.key[:16]}"
        if damage is not None:
            raise _refused(source, damage)
        write_whole(manifest_path, here)
        _into_place(staged_build, build_dir)
        if binding and not (sources / binding).exists():
            (sources / binding).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / "sources" / binding, sources / binding)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"palw: restored {build_dir.name} from {source}", file=sys.stderr)
    return True


def _refused(source: Path, why: str) -> BuildError:
    return BuildError(f"the build archive {source} is refused ({why}): nothing of it was restored; remove it and "
                      "build, or write it again with `palw build --cache-to`")


def _unpack(source: Path, staging: Path, build_dir: Path, key: str) -> dict:
    """Every member of the archive into ``staging`` (build/, sources/); its meta. BuildError in one
    line for a truncated or foreign archive, another key, or a member outside build/ and sources/."""
    try:
        with tarfile.open(source, "r:gz") as archive:
            meta = json.load(archive.extractfile(META_NAME))
            if meta.get("key") != key or meta.get("build_dir") != build_dir.name:
                raise BuildError(f"{source} holds build {meta.get('build_dir')} (key {str(meta.get('key'))[:16]}), "
                                 f"not {build_dir.name}: remove it, or point --cache-from at the archives of "
                                 "this checkout's builds")
            for member in archive.getmembers():
                if member.name == META_NAME:
                    continue
                if member.name.partition("/")[0] not in ("build", "sources"):
                    raise _refused(source, f"a member outside build/ and sources/: {member.name}; it was not "
                                           "written by `palw build --cache-to`")
                archive.extract(member, staging, filter="data")
    except (OSError, EOFError, tarfile.TarError, KeyError, ValueError, TypeError, AttributeError) as error:
        raise _refused(source, f"cannot unpack it: {type(error).__name__}: {error}") from None
    return meta


def _moved(text: str, meta: dict, build_dir: Path, sources: Path) -> str:
    """The manifest's text with the origin's paths (build dir, binding) moved to ``build_dir`` and
    ``sources``; as JSON strings: the paths inside the manifest's string values."""
    moves = [(str(Path(meta["build_root"]) / meta["build_dir"]), str(build_dir))]
    if meta.get("binding"):
        moves.append((str(Path(meta["sources"]) / meta["binding"]), str(sources / meta["binding"])))
    for old, new in moves:
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    return text


def _into_place(staged: Path, build_dir: Path) -> None:
    """``staged`` becomes ``build_dir`` in one rename; what was there (an interrupted or damaged
    build of the same key) is moved aside first and removed after."""
    aside = None
    if build_dir.exists():
        aside = build_dir.with_name(f".{build_dir.name}.{os.getpid()}.replaced")
        os.replace(build_dir, aside)
    os.replace(staged, build_dir)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _without_objects(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(member.name).parts
    if member.name.endswith(SKIPPED_SUFFIXES) or any(part in SKIPPED_DIRS for part in parts):
        return None
    return member
