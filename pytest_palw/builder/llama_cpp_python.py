"""The llama-cpp-python 0.3.34 binding: pip-installed without its native build, else used from the sdist."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

from pytest_palw.builder.source import SDIST_NAME, SDIST_VERSION

# The binding's own CMake build would compile a second, unpatched llama.cpp: switch it off.
NO_NATIVE_BUILD = "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"


def installed_version() -> str | None:
    """The installed llama-cpp-python version, read from metadata (importing it would load a libllama)."""
    try:
        return importlib.metadata.version(SDIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        return None


def ensure_binding(sdist: Path | None, *, skip: bool = False) -> dict:
    """Install the binding into this Python if needed; returns the manifest's ``binding`` record."""
    version = installed_version()
    if version == SDIST_VERSION:
        return {"status": "already-installed", "version": version}
    if skip:
        return {"status": "skipped", "installed_version": version,
                "detail": "--no-binding-install; the suite imports llama_cpp from binding_python_path"}
    if sdist is None:
        return {"status": "not-installed", "installed_version": version,
                "detail": "no sdist to install from (--source tree/archive); using binding_python_path"}
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--retries", "1", str(sdist)]
    env = dict(os.environ, CMAKE_ARGS=NO_NATIVE_BUILD)
    print(f"palw: installing {SDIST_NAME}=={SDIST_VERSION} (pure Python, no native build)",
          file=sys.stderr)
    result = subprocess.run(command, env=env, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL)
    if result.returncode == 0 and installed_version() == SDIST_VERSION:
        return {"status": "installed", "version": SDIST_VERSION, "python": sys.executable}
    reason = _pip_reason(result.stdout + "\n" + result.stderr)
    print(f"palw: warning: could not pip install {SDIST_NAME} ({reason}); the suite will import "
          "llama_cpp from the sdist copy instead", file=sys.stderr)
    return {"status": "install-failed", "installed_version": version, "detail": reason}


def _pip_reason(output: str) -> str:
    """pip's first ERROR line says why; its closing 'note:' lines never do."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    # The build-requirement install's own "ERROR: No matching distribution..." beats pip's
    # outer "error: subprocess-exited-with-error".
    for prefix in ("ERROR:", "error:"):
        errors = [line for line in lines if line.startswith(prefix)]
        if errors:
            return errors[0]
    plain = [line for line in lines if not line.lower().startswith(("note:", "hint:"))]
    return plain[-1] if plain else "no output"
