"""The PALW ABI on a built runtime: one cffi API-mode extension linked to its libllama.

Layouts come from the compiler: the cdef is generated from the real headers
(palw_cuda_llama_mmvq.h, the PALW block of the patched llama.h) and the few
ggml fields the suite reads are declared partially (``...``), so cffi asks the
compiler for their offsets. The standard llama API stays with llama-cpp-python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pytest_palw.builder.config import RUNTIME_HEADER
from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.runtime.binding.cdef import defined_functions, header_cdef
from pytest_palw.runtime.binding.compile import build_extension
from pytest_palw.runtime.binding.hostabi import FIRST_DECLARATION, HOST_SOURCES, declared_functions

# Only the members the suite reads; the compiler fills in the rest of the layout.
GGML_CDEF = """
enum ggml_type { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, ... };
enum ggml_op { GGML_OP_NONE, GGML_OP_MUL_MAT, GGML_OP_MUL_MAT_ID, GGML_OP_SOFT_MAX, ... };
struct ggml_tensor {
    enum ggml_type type;
    int64_t ne[4];
    size_t nb[4];
    enum ggml_op op;
    int32_t op_params[...];
    struct ggml_tensor * src[...];
    struct ggml_tensor * view_src;
    void * data;
    char name[...];
    ...;
};
typedef struct ggml_backend_reg * ggml_backend_reg_t;
typedef struct ggml_backend_device * ggml_backend_dev_t;
size_t ggml_backend_dev_count(void);
ggml_backend_dev_t ggml_backend_dev_get(size_t index);
const char * ggml_backend_dev_name(ggml_backend_dev_t device);
const char * ggml_backend_dev_description(ggml_backend_dev_t device);
void ggml_backend_dev_memory(ggml_backend_dev_t device, size_t * free, size_t * total);
bool ggml_is_quantized(enum ggml_type type);
const char * ggml_type_name(enum ggml_type type);
const char * ggml_op_name(enum ggml_op op);
size_t ggml_nbytes(const struct ggml_tensor * tensor);
int64_t ggml_nelements(const struct ggml_tensor * tensor);
bool ggml_is_contiguous(const struct ggml_tensor * tensor);
void ggml_backend_tensor_get(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
size_t ggml_backend_reg_count(void);
ggml_backend_reg_t ggml_backend_reg_get(size_t index);
const char * ggml_backend_reg_name(ggml_backend_reg_t reg);
void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name);
"""

# Callbacks implemented in Python (pytest_palw.runtime.callbacks); C sees plain function pointers.
# The trace's own callbacks are C (trace_caller.cpp); Python is called at most once a trace, by
# the one launch a caller changes.
CALLBACKS_CDEF = """
extern "Python" {
    bool palw_py_eval(struct ggml_tensor * tensor, bool ask, void * user_data);
    int palw_py_change(void * user_data, palw_cuda_producer_launch_v3 * launch);
}
"""

# The caller side of a trace, compiled into the extension (its header is its cdef).
CALLER_HEADER = Path(__file__).with_name("trace_caller.h")
CALLER_SOURCE = Path(__file__).with_name("trace_caller.cpp")
CALLER_FIRST_DECLARATION = "typedef struct palw_trace_caller_candidate"

SOURCE = """
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
#include "trace_caller.h"
"""


@dataclass(frozen=True)
class RuntimeLayout:
    """Where a built runtime keeps what the extension compiles and links against."""

    lib_dir: Path
    source_dir: Path
    runtime_dir: Path

    @property
    def include_dirs(self) -> list[Path]:
        return [self.source_dir / "include", self.source_dir / "ggml" / "include", self.runtime_dir]


def palw_llama_declarations(llama_h: Path) -> str:
    """The ``llama_palw_*`` prototypes of the patched llama.h, as cdef text."""
    text = llama_h.read_text()
    declarations = re.findall(r"LLAMA_API\s+(palw_cuda_trace_status\s+llama_palw_\w+\s*\([^;]*\);)", text)
    if not declarations:
        raise RuntimeLibraryError(
            f"{llama_h} declares no llama_palw_* functions: the source is not the PALW-patched "
            "tree; rebuild with `palw build`")
    return "struct llama_context;\n" + "\n".join(" ".join(d.split()) for d in declarations) + "\n"


def caller_functions() -> set[str]:
    """The functions trace_caller.h declares (all defined in trace_caller.cpp)."""
    return set(re.findall(r"\b(palw_trace_caller_\w+)\s*\(", CALLER_HEADER.read_text()))


def load_runtime_abi(layout: RuntimeLayout):
    """Compile (once per runtime) and import the extension; returns the module (.ffi, .lib)."""
    libllama = layout.lib_dir / "libllama.so"
    if not libllama.exists():
        raise RuntimeLibraryError(f"{libllama} not found: point --palw-lib at a `palw build` output "
                                  "directory or run `palw build`")
    sources = [s for s in HOST_SOURCES if s.exists()]
    linkable = defined_functions(sources, declared_functions())
    header = layout.runtime_dir / RUNTIME_HEADER
    cdef = (header_cdef(header, FIRST_DECLARATION, linkable) + GGML_CDEF
            + palw_llama_declarations(layout.source_dir / "include" / "llama.h")
            + header_cdef(CALLER_HEADER, CALLER_FIRST_DECLARATION, caller_functions()) + CALLBACKS_CDEF)
    return build_extension(
        "palw_runtime",
        cdef,
        SOURCE,
        sources=[*sources, CALLER_SOURCE],
        include_dirs=[*layout.include_dirs, CALLER_HEADER.parent],
        library_dirs=[layout.lib_dir],
        libraries=["llama", "ggml", "ggml-base"],
        define_macros=[("GGML_CUDA_PALW_TRACE", "1"), ("PALW_CUDA_TRACE_NO_CUDA_HEADERS", "1")],
    )
