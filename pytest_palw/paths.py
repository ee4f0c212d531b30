"""Where the project's assets and the user's caches live: the one place that says so.

Each asset directory is a package of the distribution, mapped from the repository's top-level
directory by pyproject.toml (``[tool.setuptools.package-dir]``):

================================  ================  ===========================================
asset                             in the checkout   installed from a wheel (site-packages/...)
================================  ================  ===========================================
the conformance suite             ``conformance/``  ``pytest_palw/conformance/``
seed patch, ``overlays/``         ``patches/``      ``pytest_palw/patches/``
native runtime, ``SPEC.md``       ``native/``       ``pytest_palw/native/``
recipes, launch table, goldens    ``fixtures/``     ``pytest_palw/fixtures/``
================================  ================  ===========================================

An asset is found where Python imports its package from: a wheel installs it inside
``pytest_palw``, an editable install maps it to the checkout. When the package is not importable
under that name (an editable install made before the mapping existed, ``native``/``patches``
in some editable modes), the checkout's top-level directory is the answer.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import platformdirs

PACKAGE_DIR = Path(__file__).resolve().parent
# The checkout root of an editable install; in a wheel install the directory holding the
# pytest_palw package (site-packages), where no asset is: use the *_DIR names below.
PROJECT_ROOT = PACKAGE_DIR.parent


def _asset_dir(package: str, checkout_name: str) -> Path:
    """The directory of ``pytest_palw.<package>`` as installed, else ``<checkout>/<checkout_name>``."""
    try:  # finds, never imports the package itself (only pytest_palw, already importing)
        spec = importlib.util.find_spec(f"{__package__}.{package}")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if Path(location).is_dir():
            return Path(location).resolve()
    return PROJECT_ROOT / checkout_name


CONFORMANCE_DIR = _asset_dir("conformance", "conformance")
PATCHES_DIR = _asset_dir("patches", "patches")
SEED_PATCH = PATCHES_DIR / "llama.cpp-palw-full.patch"
OVERLAYS_DIR = PATCHES_DIR / "overlays"
NATIVE_DIR = _asset_dir("native", "native")
# The directory the seed patch calls runtime-palw/cuda (PALW_CUDA_RUNTIME_DIR).
NATIVE_RUNTIME_DIR = NATIVE_DIR / "runtime-palw" / "cuda"
# The foreign kernel the producer fault cases compile (the device self-test's too).
TOY_CAPTURE_KERNEL = NATIVE_DIR / "tests" / "toy_capture_kernel.cuh"
FIXTURES_DIR = _asset_dir("fixtures", "fixtures")


def cache_root() -> Path:
    """``$PALW_CACHE_DIR`` or the platform's user cache dir for pytest-palw."""
    override = os.environ.get("PALW_CACHE_DIR")
    root = Path(override) if override else Path(platformdirs.user_cache_dir("pytest-palw"))
    _directory(root)
    return root


def cache_dir(kind: str) -> Path:
    """A named sub-cache (``sources``, ``builds``, ``models``, ``bindings``)."""
    return _directory(cache_root() / kind)


def _directory(path: Path) -> Path:
    """``path`` made a directory, or CacheError in one line (naming PALW_CACHE_DIR and the fix)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        from pytest_palw.errors import CacheError

        raise CacheError(f"cannot use {path} as a cache directory ({error.strerror or error})") from None
    return path


@functools.cache
def resolved(filename: str) -> Path:
    """``filename`` resolved, once per process (code objects' files, asked for per case)."""
    return Path(filename).resolve()
