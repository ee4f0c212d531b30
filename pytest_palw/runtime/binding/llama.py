"""llama-cpp-python 0.3.34 as the standard-API binding, pointed at the patched libllama.

The binding loads ``$LLAMA_CPP_LIB_PATH/libllama.so`` at import, so the path must be
set before the first import, and one process can serve one runtime only.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from pytest_palw.builder.source import SDIST_NAME, SDIST_VERSION
from pytest_palw.errors import RuntimeLibraryError


def load_llama_cpp(lib_dir: Path, fallback_python_path: Path | None = None):
    """Import ``llama_cpp`` bound to ``lib_dir``; returns its low-level module ``llama_cpp.llama_cpp``."""
    lib_dir = Path(lib_dir).resolve()
    loaded = sys.modules.get("llama_cpp.llama_cpp")
    if loaded is not None:
        bound = Path(loaded._lib._name).resolve().parent
        if bound != lib_dir:
            raise RuntimeLibraryError(
                f"llama_cpp is already bound to {bound} in this process, not {lib_dir}: "
                "run one runtime per pytest process")
        return loaded
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
    try:
        package = importlib.import_module("llama_cpp")
    except ModuleNotFoundError:
        if fallback_python_path is None or not (Path(fallback_python_path) / "llama_cpp").is_dir():
            raise RuntimeLibraryError(
                f"{SDIST_NAME} is not installed and the runtime manifest names no copy: run "
                f"`palw build` (it installs {SDIST_NAME}=={SDIST_VERSION} without a native build)") from None
        sys.path.insert(0, str(fallback_python_path))
        package = importlib.import_module("llama_cpp")
    except (OSError, RuntimeError, FileNotFoundError) as error:
        raise RuntimeLibraryError(f"cannot load {lib_dir}/libllama.so ({error}): rebuild with "
                                  "`palw build` or fix --palw-lib") from error
    except AttributeError as error:  # the binding resolves every llama.h symbol at import
        raise RuntimeLibraryError(
            f"{lib_dir}/libllama.so is not the libllama {SDIST_NAME} {SDIST_VERSION} binds "
            f"({error}): point --palw-lib at a `palw build` output") from error
    if getattr(package, "__version__", None) != SDIST_VERSION:
        raise RuntimeLibraryError(
            f"{SDIST_NAME} {package.__version__} is installed, the patched runtime needs "
            f"{SDIST_VERSION} (its ctypes layouts match that llama.h): "
            f"pip install {SDIST_NAME}=={SDIST_VERSION} with CMAKE_ARGS=-DLLAMA_BUILD=OFF")
    return importlib.import_module("llama_cpp.llama_cpp")
