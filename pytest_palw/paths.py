"""Where the project's assets and the user's caches live."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PATCHES_DIR = PROJECT_ROOT / "patches"
SEED_PATCH = PATCHES_DIR / "llama.cpp-palw-full.patch"
OVERLAYS_DIR = PATCHES_DIR / "overlays"
NATIVE_DIR = PROJECT_ROOT / "native"
# The directory the seed patch calls runtime-palw/cuda (PALW_CUDA_RUNTIME_DIR).
NATIVE_RUNTIME_DIR = NATIVE_DIR / "runtime-palw" / "cuda"
FIXTURES_DIR = PROJECT_ROOT / "fixtures"
CONFORMANCE_DIR = PROJECT_ROOT / "conformance"


def cache_root() -> Path:
    """``$PALW_CACHE_DIR`` or the platform's user cache dir for pytest-palw."""
    override = os.environ.get("PALW_CACHE_DIR")
    root = Path(override) if override else Path(platformdirs.user_cache_dir("pytest-palw"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_dir(kind: str) -> Path:
    """A named sub-cache (``sources``, ``builds``, ``models``, ``bindings``)."""
    path = cache_root() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path
