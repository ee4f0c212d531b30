"""The PALW ABI on the host alone: header validators, codec and launch contract.

Needs no runtime build: the extension compiles the header plus the two host-only
sources of native/ (record_codec.cpp, producer_contract.cpp). Used by the CPU
tests of the native code and as the C side of the codec cross-check.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from pytest_palw.builder.config import RUNTIME_HEADER
from pytest_palw.paths import NATIVE_RUNTIME_DIR
from pytest_palw.runtime.binding.cdef import defined_functions, header_cdef
from pytest_palw.runtime.binding.compile import build_extension

# $PALW_HOST_ABI_DIR: a (mutated) copy of runtime-palw/cuda for `palw mutants --tier cpu`; it
# changes this host module only, never what `palw build` compiles.
HOST_ABI_DIR = Path(os.environ.get("PALW_HOST_ABI_DIR") or NATIVE_RUNTIME_DIR)
HEADER = HOST_ABI_DIR / RUNTIME_HEADER
HOST_SOURCES = [HOST_ABI_DIR / "record_codec.cpp", HOST_ABI_DIR / "producer_contract.cpp"]
FIRST_DECLARATION = "typedef enum palw_cuda_trace_status"


def declared_functions() -> set[str]:
    """Every non-inline function the header declares."""
    text = HEADER.read_text()
    names = set(re.findall(r"^\w[\w\s\*]*?\b(palw_\w+)\s*\(", text, re.M))
    return {n for n in names if not re.search(rf"static inline[^;{{]*\b{n}\s*\(", text)}


@functools.lru_cache(maxsize=None)
def load_host_abi():
    """The compiled host ABI module: ``.ffi`` (types, layouts) and ``.lib`` (functions, constants)."""
    sources = [s for s in HOST_SOURCES if s.exists()]
    linkable = defined_functions(sources, declared_functions())
    cdef = header_cdef(HEADER, FIRST_DECLARATION, linkable)
    return build_extension(
        "palw_hostabi",
        cdef,
        f'#include "{RUNTIME_HEADER}"\n',
        sources=sources,
        include_dirs=[HOST_ABI_DIR],
    )
