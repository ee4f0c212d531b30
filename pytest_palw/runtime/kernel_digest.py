"""The kernel digest the caller hands the producer in every approved launch: the sha256 of the
libggml-cuda this process mapped, or what --palw-kernel-digest asserts, or a placeholder without CUDA.
What each kind proves is the certificate's to say (certificate/facts.py)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_palw.cache import sha256_stream
from pytest_palw.errors import PalwError, RuntimeLibraryError

if TYPE_CHECKING:
    from pytest_palw.runtime.library import Runtime

CPU_PLACEHOLDER_DIGEST = bytes(range(1, 33))  # no CUDA library: the records are never traced
@dataclass(frozen=True)
class KernelDigest:
    digest: bytes
    source: str
    origin: str  # "mapped", "option" or "placeholder": what it stands for (certificate/facts.py)


def parse_kernel_digest(chosen: str | None) -> bytes | None:
    """--palw-kernel-digest as bytes, or PalwError in one line (checked at session start)."""
    if not chosen:
        return None
    try:
        digest = bytes.fromhex(chosen)
    except ValueError:
        digest = b""
    if len(digest) != 32 or not any(digest):
        raise PalwError(f"--palw-kernel-digest {chosen[:80]!r} is not one nonzero sha256 in 64 hex "
                        "digits: pass e.g. the output of `sha256sum libggml-cuda.so`, or omit it")
    return digest


@dataclass(frozen=True)
class Mapping:
    """One file mapped into this process (a line of /proc/self/maps)."""

    path: Path
    addresses: str  # "start-end", the name of its /proc/self/map_files entry
    inode: int


def mapped_library(prefix: str) -> Mapping | None:
    """The first library named ``prefix*`` that this process has mapped."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and Path(fields[5].strip()).name.startswith(prefix):
                    return Mapping(Path(fields[5].strip()), fields[0], int(fields[4]))
    except (OSError, ValueError):
        return None
    return None


def mapped_under(directory: Path) -> list[Mapping]:
    """Each file under ``directory`` this process has mapped (the runtime's libraries), once each."""
    directory = Path(directory).resolve()
    found: dict[Path, Mapping] = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    path = Path(fields[5].strip())
                    if directory in path.parents and path not in found:
                        found[path] = Mapping(path, fields[0], int(fields[4]))
    except (OSError, ValueError):
        return []
    return list(found.values())


class MappedDigests:
    """sha256 of every runtime library this process mapped, read in this run from the mapped files
    (as the kernel digest is), by a thread started when the runtime is loaded: the certificate's
    library digests are the bytes that ran, not the ones a manifest recorded."""

    def __init__(self, lib_dir: Path):
        self.lib_dir = lib_dir
        self._digests: dict[str, str] = {}
        self._thread = threading.Thread(target=self._run, name="sha256 of the mapped libraries", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for mapping in mapped_under(self.lib_dir):
            try:
                self._digests[mapping.path.name] = mapped_sha256(mapping)
            except RuntimeLibraryError as error:
                self._digests[mapping.path.name] = f"unreadable: {error}"

    def result(self) -> dict[str, str]:
        self._thread.join()
        return dict(sorted(self._digests.items()))


def mapped_sha256(mapping: Mapping) -> str:
    """sha256 of the bytes of the mapped file, read in this run: through /proc/self/map_files (the
    very file mapped), else through its path while that is still the same inode."""
    for candidate in (Path("/proc/self/map_files") / mapping.addresses, mapping.path):
        try:
            with open(candidate, "rb") as handle:
                if os.fstat(handle.fileno()).st_ino == mapping.inode:
                    return sha256_stream(handle)
        except OSError:
            continue
    raise RuntimeLibraryError(f"{mapping.path}, mapped in this process, can no longer be read (replaced or "
                              "removed on disk since it was loaded): rerun, or pass --palw-kernel-digest")


def kernel_digest(runtime: "Runtime", chosen: str | None = None) -> KernelDigest:
    """--palw-kernel-digest, else the sha256 of the libggml-cuda this process actually mapped."""
    parsed = parse_kernel_digest(chosen)
    if parsed is not None:
        return KernelDigest(parsed, "--palw-kernel-digest", "option")
    if not runtime.has_cuda_trace:
        return KernelDigest(CPU_PLACEHOLDER_DIGEST, "placeholder: no CUDA library in this runtime", "placeholder")
    mapped = mapped_library("libggml-cuda.so")
    if mapped is None:
        raise RuntimeLibraryError("the runtime has a CUDA trace backend but no libggml-cuda.so is "
                                  "mapped in this process: pass --palw-kernel-digest")
    return KernelDigest(bytes.fromhex(mapped_sha256(mapped)),
                        f"sha256 of {mapped.path}, mapped in this process, computed in this run", "mapped")
