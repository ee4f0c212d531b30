"""The content address of a build: one sha256 over everything that decides its outputs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

# Bump when the build recipe changes in a way the inputs below do not show.
KEY_FORMAT = 1


@dataclass(frozen=True)
class KeyInputs:
    source_kind: str  # sdist | tree | palw-source
    source_sha256: str
    seed_patch_sha256: str
    overlays: tuple[tuple[str, str], ...]  # (file name, sha256), in series order
    native_sha256: str  # tree digest of native/runtime-palw/cuda
    variant: str
    cuda_arch: str | None
    pinned_cc: int | None
    trace: bool
    cmake_flags: tuple[str, ...]  # logical flags only: no machine paths
    compilers: tuple[tuple[str, str], ...]  # (role, "path | version"), sorted

    def canonical(self) -> bytes:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields["format"] = KEY_FORMAT
        return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def cache_key(inputs: KeyInputs) -> str:
    return hashlib.sha256(inputs.canonical()).hexdigest()


def build_dir_name(variant: str, key: str) -> str:
    return f"{variant}-{key[:16]}"
