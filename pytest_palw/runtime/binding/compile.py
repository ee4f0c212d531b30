"""Compile and import a cffi API-mode extension, cached by the digest of its inputs."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

import cffi

from pytest_palw.cache import exclusive
from pytest_palw.errors import ToolMissingError
from pytest_palw.paths import cache_dir


def _digest(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.read_bytes() if isinstance(part, Path) else repr(part).encode()
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def build_extension(
    prefix: str,
    cdef: str,
    source: str,
    *,
    sources: Sequence[Path | str] = (),
    include_dirs: Sequence[Path] = (),
    library_dirs: Sequence[Path] = (),
    libraries: Sequence[str] = (),
    define_macros: Sequence[tuple[str, str]] = (),
):
    """Build (once) and import the extension; returns the module (``.ffi``, ``.lib``)."""
    sources = [Path(s) for s in sources]
    key = _digest(cdef, source, *sources, [str(p) for p in include_dirs],
                  [str(p) for p in library_dirs], list(libraries), list(define_macros),
                  cffi.__version__, sys.version, sysconfig.get_platform())
    # Included headers count too: the layouts come from them.
    for directory in include_dirs:
        for header in sorted(Path(directory).glob("*.h")):
            key = _digest(key, header)
    name = f"_{prefix}_{key[:16]}"
    target = cache_dir("bindings") / name
    with exclusive(cache_dir("bindings") / f"{name}.lock", what=f"building the cffi extension {name}"):
        built = sorted(target.glob(f"{name}*.so"))
        if not built:
            ffi = cffi.FFI()
            ffi.cdef(cdef)
            ffi.set_source(
                name,
                source,
                source_extension=".cpp",
                sources=[str(s) for s in sources],
                include_dirs=[str(p) for p in include_dirs],
                library_dirs=[str(p) for p in library_dirs],
                runtime_library_dirs=[str(p) for p in library_dirs],
                libraries=list(libraries),
                define_macros=list(define_macros),
                extra_compile_args=["-std=c++17", "-O1", "-w"],
                # Bind the extension's own copies of shared names to itself.
                extra_link_args=["-Wl,-Bsymbolic"],
            )
            # Compiled beside, renamed into place whole: a killed compile leaves no partial .so to find.
            scratch = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
            try:
                ffi.compile(tmpdir=str(scratch), verbose=False)
                shutil.rmtree(target, ignore_errors=True)
                os.replace(scratch, target)
            except Exception as error:  # distutils raises several unrelated types
                raise ToolMissingError(
                    f"compiling the cffi extension {name} failed ({error}); it needs a C++ "
                    f"compiler and the Python headers (python3-dev)") from error
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            built = sorted(target.glob(f"{name}*.so"))
    spec = importlib.util.spec_from_file_location(name, built[0])
    assert spec is not None and spec.loader is not None, f"{built[0]} is no importable extension"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
