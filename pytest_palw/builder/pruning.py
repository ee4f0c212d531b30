"""What a `palw source` archive leaves out of the patched llama.cpp tree, and why that is safe.

The rule: prune only directories CMake never enters (or files it never names) with the
flags in ``config.COMMON_FLAGS`` for either variant. tools/CMakeLists.txt adds every
tool directory when LLAMA_BUILD_TOOLS=ON, so tool sources stay even though we build only
llama-palw-observer; only the server/UI/CLI (LLAMA_BUILD_SERVER=OFF) and rpc (GGML_RPC
off) tools go. The cpu build of the pruned tree and the cuda configure were checked.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# ggml_add_backend(X) enters ggml/src/ggml-x only when GGML_X is ON; we enable CPU and CUDA.
UNUSED_BACKENDS = ("blas", "cann", "et", "hexagon", "hip", "metal", "musa", "opencl", "openvino",
                   "rpc", "sycl", "virtgpu", "vulkan", "webgpu", "zdnn", "zendnn")

PRUNED: dict[str, str] = {
    "models": "vocab GGUFs for llama.cpp's tests (LLAMA_BUILD_TESTS=OFF)",
    "tests": "LLAMA_BUILD_TESTS=OFF (but for KEPT)",
    "examples": "LLAMA_BUILD_EXAMPLES=OFF",
    "pocs": "added only with LLAMA_BUILD_EXAMPLES",
    "app": "LLAMA_BUILD_APP=OFF",
    "benches": "never added by CMake",
    "docs": "documentation",
    "media": "images for the README",
    "gguf-py": "Python package (we use the pinned gguf wheel)",
    "scripts": "maintainer scripts",
    "conversion": "Python model converters",
    "convert_hf_to_gguf.py": "Python model converter",
    "convert_hf_to_gguf_update.py": "Python model converter",
    "convert_llama_ggml_to_gguf.py": "Python model converter",
    "convert_lora_to_gguf.py": "Python model converter",
    "requirements": "Python requirements of the converters",
    "requirements.txt": "Python requirements of the converters",
    "grammars": "sample GBNF grammars, read at run time only",
    "ci": "upstream CI scripts",
    ".github": "upstream CI",
    ".devops": "upstream container recipes",
    ".gemini": "assistant configuration",
    ".pi": "assistant configuration",
    "tools/ui": "added only with LLAMA_BUILD_SERVER",
    "tools/server": "added only with LLAMA_BUILD_SERVER",
    "tools/cli": "added only with LLAMA_BUILD_SERVER",
    "tools/rpc": "added only with GGML_RPC",
    "tools/mtmd/tests": "mtmd test scripts, not named by CMake",
    "tools/mtmd/test-1.jpeg": "sample media, not named by CMake",
    "tools/mtmd/test-2.mp3": "sample media, not named by CMake",
    "tools/mtmd/test-3.mp4": "sample media, not named by CMake",
    **{f"ggml/src/ggml-{name}": f"GGML_{name.upper()} is OFF" for name in UNUSED_BACKENDS},
}


# Files inside a PRUNED directory that stay: CMake never builds them with our flags, the suite does.
KEPT: dict[str, str] = {
    "tests/test-backend-ops.cpp": "llama.cpp's backend op test, built by conformance/test_backend_ops.py "
                                  "against the runtime's ggml: the numerics oracle of a GPU certification",
}


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def prune(tree: Path) -> list[str]:
    """Delete the PRUNED paths present in ``tree`` (a directory with KEPT files keeps just those);
    returns those removed, sorted."""
    removed = []
    for relative in sorted(PRUNED):
        path = Path(tree) / relative
        kept = {Path(tree) / k for k in KEPT if k.startswith(relative + "/")}
        if kept and path.is_dir():
            for child in path.iterdir():
                if child not in kept:
                    _remove(child)
        elif path.exists() or path.is_symlink():
            _remove(path)
        else:
            continue
        removed.append(relative)
    return removed
