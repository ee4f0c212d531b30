"""What one build is asked for (variant, CUDA arch, pinned cc) and the CMake flags and targets that follow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_palw.builder.cxx_runtime import LINKER_FLAGS
from pytest_palw.errors import BuildError

VARIANTS = ("cpu", "cuda")
DEFAULT_CUDA_ARCH = "89;90"
# The header every trace build includes; the CUDA build also compiles these sources.
RUNTIME_HEADER = "palw_cuda_llama_mmvq.h"
RUNTIME_SUBDIR = "runtime-palw/cuda"  # a build's own copy of the producer it compiles (api.runtime_copy)
CUDA_RUNTIME_SOURCES = ("producer_accumulator.cu", "producer_contract.cpp", "record_codec.cpp")

# The same for every build: shared libs, portable code, nothing we do not need.
COMMON_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    # One C++ runtime per process, whatever CXX links (cxx_runtime.py); LDFLAGS still applies.
    f"-DCMAKE_SHARED_LINKER_FLAGS_INIT={LINKER_FLAGS}",
    f"-DCMAKE_MODULE_LINKER_FLAGS_INIT={LINKER_FLAGS}",
)
CPU_TARGETS = ("llama", "ggml", "llama-palw-observer")
CUDA_TARGETS = CPU_TARGETS + ("llama-palw-mmvq-smoke",)
UNPATCHED_TARGETS = ("llama", "ggml")  # upstream has no PALW tools


@dataclass(frozen=True)
class BuildConfig:
    variant: str = "cpu"
    cuda_arch: str = DEFAULT_CUDA_ARCH
    pinned_cc: int | None = None
    trace: bool = True
    patched: bool = True  # False: the upstream tree, a reference for A/B checks

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise BuildError(f"unknown variant {self.variant!r}: use --variant cpu or --variant cuda")
        if not self.patched and (self.trace or self.pinned_cc is not None):
            raise BuildError("an --unpatched build has no PALW trace and no pin: drop --pinned-cc")

    @property
    def cuda(self) -> bool:
        return self.variant == "cuda"

    @property
    def targets(self) -> tuple[str, ...]:
        if not self.patched:
            return UNPATCHED_TARGETS
        return CUDA_TARGETS if self.cuda else CPU_TARGETS

    def logical_flags(self) -> list[str]:
        """The flags that decide what gets built: no machine paths, so they can enter the cache key."""
        flags = list(COMMON_FLAGS)
        if self.patched:  # upstream CMake does not know the option
            flags.append(f"-DGGML_CUDA_PALW_TRACE={'ON' if self.trace else 'OFF'}")
        if self.cuda:
            # GGML_CUDA_GRAPHS keeps llama.cpp's default.
            flags += ["-DGGML_CUDA=ON", "-DGGML_CUDA_FA=OFF",
                      f"-DCMAKE_CUDA_ARCHITECTURES={self.cuda_arch}"]
        if self.pinned_cc is not None:
            flags.append(f"-DPALW_CUDA_PINNED_CC={self.pinned_cc}")
        return flags

    def cmake_flags(self, runtime_dir: Path) -> list[str]:
        """Everything CMake gets besides tool paths and -S/-B."""
        flags = self.logical_flags()
        if self.trace:
            flags.append(f"-DPALW_CUDA_RUNTIME_DIR={runtime_dir}")
        return flags

    def key_fields(self) -> dict:
        return {"variant": self.variant, "cuda_arch": self.cuda_arch if self.cuda else None,
                "pinned_cc": self.pinned_cc, "trace": self.trace}


def trace_available(runtime_dir: Path) -> bool:
    """The PALW trace compiles in once the native runtime's header exists."""
    return (Path(runtime_dir) / RUNTIME_HEADER).is_file()


def missing_cuda_sources(runtime_dir: Path) -> list[str]:
    return [name for name in (RUNTIME_HEADER, *CUDA_RUNTIME_SOURCES)
            if not (Path(runtime_dir) / name).is_file()]


PINNED_CC_VARIABLE = "PALW_CUDA_PINNED_CC"


def check_pinned_cc_supported(tree: Path) -> None:
    """--pinned-cc means nothing unless an overlay taught CMake the variable; say so instead of ignoring it."""
    tree = Path(tree)
    for cmake_file in [*tree.rglob("CMakeLists.txt"), *tree.rglob("*.cmake")]:
        try:
            if PINNED_CC_VARIABLE in cmake_file.read_text(errors="replace"):
                return
        except OSError:
            continue
    raise BuildError(f"--pinned-cc needs the overlay that adds {PINNED_CC_VARIABLE} (none of the "
                     "patched CMake files mentions it): add it to patches/overlays/series, or drop "
                     "--pinned-cc")
