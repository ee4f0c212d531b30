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
import sys
import tarfile
from pathlib import Path

from pytest_palw.build.manifest import MANIFEST_NAME, Manifest
from pytest_palw.errors import BuildError
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
    partial = target.with_name(target.name + ".partial")
    with tarfile.open(partial, "w:gz", compresslevel=3) as archive:  # 9 takes a minute for ~40 MiB
        data = json.dumps(meta, indent=1).encode()
        info = tarfile.TarInfo(META_NAME)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
        archive.add(build_dir, arcname=f"build/{build_dir.name}", filter=_without_objects)
        if carried_binding is not None:
            archive.add(carried_binding, arcname=f"sources/{meta['binding']}", filter=_without_objects)
    os.replace(partial, target)
    print(f"palw: build archive {target} ({target.stat().st_size / 2**20:.0f} MiB)", file=sys.stderr)
    return target


def restore(directory: Path | str, build_dir: Path, key: str) -> bool:
    """Unpack the build of ``key`` from ``directory``'s archive into ``build_dir`` (and the source
    cache), its manifest's paths moved here; False when the directory has no archive of that key."""
    source = archive_path(directory, build_dir.name)
    if not source.is_file():
        print(f"palw: no {source.name} in {directory}: building", file=sys.stderr)
        return False
    sources = cache_dir("sources")
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
                root, _, rest = member.name.partition("/")
                destination = {"build": build_dir.parent, "sources": sources}.get(root)
                if destination is None:
                    raise BuildError(f"{source} has a member outside build/ and sources/ ({member.name}): "
                                     "it was not written by `palw build --cache-to`; remove it")
                member.name = rest
                archive.extract(member, destination, filter="data")
    except (OSError, tarfile.TarError, KeyError, ValueError) as error:
        raise BuildError(f"cannot unpack the build archive {source} ({error}): remove it and build, or "
                         "write it again with `palw build --cache-to`") from None
    manifest_path = build_dir / MANIFEST_NAME
    text = manifest_path.read_text()
    moves = [(str(Path(meta["build_root"]) / build_dir.name), str(build_dir))]
    if meta.get("binding"):
        moves.append((str(Path(meta["sources"]) / meta["binding"]), str(sources / meta["binding"])))
    for old, new in moves:  # as JSON strings: the paths inside the manifest's string values
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    manifest_path.write_text(text)
    print(f"palw: restored {build_dir.name} from {source}", file=sys.stderr)
    return True


def _without_objects(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(member.name).parts
    if member.name.endswith(SKIPPED_SUFFIXES) or any(part in SKIPPED_DIRS for part in parts):
        return None
    return member
