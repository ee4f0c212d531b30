"""The producer fault cases' harness (conformance/test_producer_faults.py): a foreign capture kernel
driven through the runtime's own producer.

A device fault needs a kernel that captures wrongly; the runtime's one capturing kernel
(mul_mat_vec_q) is internal and the bridge checks it on the host, so the probe library
(PROBE_SOURCE) is the native self-test's toy capture kernel (native/tests/toy_capture_kernel.cuh)
compiled with the CUDA toolkit's nvcc against the device hook the runtime was built with (digests
checked against its manifest), once per (hook, nvcc, arch) and cached. ``Bench`` creates, inspects
and destroys producer contexts through the backend API table the patch exports
(``palw_cuda_llama_mmvq_get_backend_api_v1``) and calls the producer functions libggml-cuda exports
(native/SPEC.md section 1) on the legacy stream, typed from their prototypes in the runtime's header;
the launch templates are the self-test's toy_launch and attention_launch.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from pytest_palw.builder.config import RUNTIME_HEADER
from pytest_palw.builder.toolchain import nvcc_path, tool_version
from pytest_palw.cache import key_of, sha256_file
from pytest_palw.paths import NATIVE_RUNTIME_DIR, TOY_CAPTURE_KERNEL, cache_dir
from pytest_palw.probes.compile import compile_once
from pytest_palw.runtime import templates
from pytest_palw.runtime.names import status_name
from pytest_palw.topology import PINNED_ATTENTION

HEADER = RUNTIME_HEADER
HOOK = "palw_cuda_producer_trace.cuh"

# Exported by libggml-cuda, typed from their prototypes in the runtime's header.
PRODUCER_FUNCTIONS = {
    "prepare": "palw_cuda_producer_trace_prepare_v3",
    "launch": "palw_cuda_producer_trace_launch_v3",
    "enqueue": "palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3",
    "finalize": "palw_cuda_producer_trace_finalize_v3",
}
# libggml-base (ggml-backend.h): a CUDA backend of its own for the backend API's calls.
GGML_FUNCTIONS = {
    "ggml_backend_dev_init": "void * (*)(void * device, const char * params)",
    "ggml_backend_free": "void (*)(void * backend)",
}
# The CUDA registry's proc for the grouped collector's identity (the attention template's capture id).
CAPTURE_INFO_PROC = ("palw_cuda_llama_grouped_capture_info_v1", "palw_cuda_llama_grouped_capture_info_backend_v1")
# The probe library's entry points (PROBE_SOURCE), typed with the header's structs.
PROBE_FUNCTIONS = {
    "palw_probe_capture_entry": "const void * (*)(void)",
    "palw_probe_other_entry": "const void * (*)(void)",
    "palw_probe_identity": "void (*)(palw_cuda_producer_actual_identity_v3 *)",
    "palw_probe_binding": "int (*)(const void *, uint32_t, palw_cuda_producer_kernel_binding_v3 *)",
    "palw_probe_upload": "int (*)(const void *, uint64_t, void **)",
    "palw_probe_free": "int (*)(void *)",
    "palw_probe_sticky_error": "int (*)(void)",
}
FAULT_BITS = ("CAPTURE_OUT_OF_RANGE", "DUPLICATE_CAPTURE", "MISSING_CAPTURE", "IDENTITY_MISMATCH",
              "CAPACITY_OVERFLOW", "CUDA_ERROR")

# The self-test's toy launch: 3 x 70 elements (a partial bitmap word), 2 blocks of 128 threads.
TOY_ROWS, TOY_COLUMNS, TOY_THREADS = 3, 70, 128
TOY_BLOCKS = (TOY_ROWS * TOY_COLUMNS + TOY_THREADS - 1) // TOY_THREADS
TOY_PADDING = 15  # arguments 4..18: MMVQ's 20-argument shape
HEADS, GROUPED_COLUMNS, WORK_THREADS = PINNED_ATTENTION.query_heads, 256, 256
# Capture modes of the probe kernel, as its source numbers them (enum toy_capture_mode).
CAPTURE_MODES = dict(re.findall(r"\bCAPTURE_(\w+) = (\d+)", TOY_CAPTURE_KERNEL.read_text()))
EXACT, DUPLICATE, OUT_OF_RANGE, MISSING, WRONG_IDENTITY, OVERRUN = (
    int(CAPTURE_MODES[name]) for name in ("EXACT", "DUPLICATE", "OUT_OF_RANGE", "MISSING", "WRONG_IDENTITY",
                                          "OVERRUN"))
SENTINEL = 0xAB

PROBE_SOURCE = r"""
// The producer fault cases' foreign kernel: the self-test's toy capture kernel
// (native/tests/toy_capture_kernel.cuh), compiled against the runtime's own device hook.
#include "toy_capture_kernel.cuh"

#define PROBE_API extern "C" __attribute__((visibility("default")))

// Another entry point: launching it is not the prepared launch.
__global__ void palw_probe_other_kernel(float * output) {
    if (output != nullptr && threadIdx.x == 0u) {
        output[0] = 0.0f;
    }
}

PROBE_API const void * palw_probe_capture_entry(void) {
    return reinterpret_cast<const void *>(&toy_capture_kernel);
}

PROBE_API const void * palw_probe_other_entry(void) {
    return reinterpret_cast<const void *>(&palw_probe_other_kernel);
}

PROBE_API void palw_probe_identity(palw_cuda_producer_actual_identity_v3 * out) {
    *out = toy_identity();
}

// The approve callback's job: the entry point's real attributes on the runtime's sm_arch.
PROBE_API int palw_probe_binding(const void * entry_point, uint32_t sm_arch,
                                 palw_cuda_producer_kernel_binding_v3 * out) {
    return static_cast<int>(toy_kernel_binding(entry_point, sm_arch, out));
}

PROBE_API int palw_probe_upload(const void * host, uint64_t bytes, void ** out_device) {
    *out_device = nullptr;
    cudaError_t error = cudaMalloc(out_device, bytes);
    if (error == cudaSuccess) {
        error = cudaMemcpy(*out_device, host, bytes, cudaMemcpyHostToDevice);
    }
    return static_cast<int>(error);
}

PROBE_API int palw_probe_free(void * device) {
    return static_cast<int>(cudaFree(device));
}

// 0 when nothing queued failed and no CUDA error is pending or sticky.
PROBE_API int palw_probe_sticky_error(void) {
    const cudaError_t synchronized = cudaDeviceSynchronize();
    const cudaError_t last = cudaGetLastError();
    return static_cast<int>(synchronized != cudaSuccess ? synchronized : last);
}
"""


# -- the ABI's one home: prototypes come from the header ------------------------------------------

def header_function_type(header_text: str, name: str) -> str:
    """``name``'s prototype in the header as a cffi function-pointer type."""
    code = " ".join(re.sub(r"/\*.*?\*/|//[^\n]*", " ", header_text, flags=re.S).split())
    match = re.search(rf"(?:^|[;}}])\s*([^;{{}}#()]*?)\b{name}\s*\(([^;{{}}]*)\)\s*;", code)
    if match is None:
        raise AssertionError(f"{HEADER} declares no {name}: the producer ABI changed; update "
                             "pytest_palw/probes/fault_probe.py")
    return f"{match.group(1).strip()} (*)({match.group(2).strip()})"


def c_function(ffi, library: ctypes.CDLL, name: str, signature: str):
    """An exported C function of ``library``, callable through cffi with ``signature``."""
    try:
        address = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
    except AttributeError:
        raise AssertionError(f"{library._name} exports no {name}: the producer cases drive the producer of the "
                             "library under test through its exported entry points (native/SPEC.md section 1), "
                             "and this library hides it, so they cannot claim its behaviour; export the producer "
                             "functions or rebuild with `palw build --variant cuda`") from None
    return ffi.cast(signature, address)


def fault_names(lib, bits: int) -> list[str]:
    names = [name for name in FAULT_BITS if bits & getattr(lib, f"PALW_CUDA_PRODUCER_FAULT_{name}")]
    known = sum(getattr(lib, f"PALW_CUDA_PRODUCER_FAULT_{name}") for name in FAULT_BITS)
    return names + ([hex(bits & ~known)] if bits & ~known else [])


# -- launch templates (the self-test's toy_launch and attention_launch) ----------------------------

def fill_id(seed: int) -> bytes:
    return bytes((seed + 7 * i + 1) & 0xFF for i in range(32))


def toy_dimensions(ffi, block_x: int = TOY_THREADS):
    d = ffi.new("palw_cuda_producer_launch_dimensions_v1 *")
    d.grid_x, d.grid_y, d.grid_z = TOY_BLOCKS, 1, 1
    d.block_x, d.block_y, d.block_z = block_x, 1, 1
    return d


def work_dimensions(ffi, columns: int = GROUPED_COLUMNS):
    d = ffi.new("palw_cuda_producer_launch_dimensions_v1 *")
    d.grid_x, d.grid_y, d.grid_z = min((columns + WORK_THREADS - 1) // WORK_THREADS, 1024), HEADS, 1
    d.block_x, d.block_y, d.block_z = WORK_THREADS, 1, 1
    return d


def _set_geometry(t, d) -> None:
    t.grid_x, t.grid_y, t.grid_z = d.grid_x, d.grid_y, d.grid_z
    t.block_x, t.block_y, t.block_z = d.block_x, d.block_y, d.block_z


def capture_launch(ffi, lib, index: int, identity, binding):
    """An MMVQ-class template (SCALAR_ACCUMULATOR_F32_V1) of the toy capture kernel."""
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    t = templates.start(ffi, lib, launch, index, m=TOY_COLUMNS, n=TOY_ROWS, k=256, batch=1,
                        output_rows=TOY_ROWS, output_columns=TOY_COLUMNS,
                        quantization=lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K, kind=lib.PALW_CUDA_TRACE_GEMM,
                        phase=lib.PALW_CUDA_TRACE_PREFILL, tile_rows=TOY_ROWS)
    templates.mmvq(lib, t, TOY_COLUMNS)
    _set_geometry(t, toy_dimensions(ffi))  # the toy kernel's own launch, not mul_mat_vec_q's
    templates.ids(ffi, t, templates.identity_of(ffi, identity), operation=fill_id(index),
                  plan=fill_id(0x31), layout=fill_id(index + 0x40))
    templates.bind_kernel(ffi, launch, binding, fill_id(0x5E))
    return launch


def grouped_identity(ffi, capture_id: bytes):
    """The attention stage's identity: any work kernel, captured by the grouped collector."""
    identity = ffi.new("palw_cuda_producer_actual_identity_v3 *")
    ffi.memmove(identity.producer_variant_id, fill_id(0x11), 32)
    ffi.memmove(identity.work_entry_point_id, fill_id(0x22), 32)
    ffi.memmove(identity.capture_implementation_id, capture_id, 32)
    return identity


def grouped_launch(ffi, lib, index: int, identity, binding, columns: int = GROUPED_COLUMNS):
    """A softmax-stage template (FINAL_OUTPUT_TILE_F32_V1) over a 32 x columns tile, owning its group."""
    a = PINNED_ATTENTION
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    t = templates.start(ffi, lib, launch, index, m=columns, n=1, k=1, batch=HEADS, output_rows=HEADS,
                        output_columns=columns, quantization=lib.PALW_CUDA_TRACE_QUANTIZATION_NONE,
                        kind=lib.PALW_CUDA_TRACE_ATTENTION, phase=lib.PALW_CUDA_TRACE_PREFILL, causal=1,
                        query_tokens=1, key_value_tokens=1, tile_rows=HEADS)
    d = work_dimensions(ffi, columns)
    templates.attention(lib, t, lib.PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX, index,
                        (HEADS, a.key_value_heads, a.head_dim, 1, columns),
                        (d.grid_x, d.grid_y, d.grid_z, d.block_x, d.block_y, d.block_z, 0))
    templates.ids(ffi, t, templates.identity_of(ffi, identity), operation=fill_id(index + 0x80),
                  plan=fill_id(index + 0xA0), layout=fill_id(index + 0xB0), group=fill_id(index + 0x90))
    templates.bind_kernel(ffi, launch, binding, fill_id(0x5E))
    return launch


def toy_values() -> np.ndarray:
    """The self-test's values: a payload NaN, -0, +inf and a denormal among ordinary floats."""
    index = np.arange(TOY_ROWS * TOY_COLUMNS)
    values = np.ldexp(index.astype(np.float32) - np.float32(100.5), index % 7 - 3).astype(np.float32)
    values.view(np.uint32)[3] = 0x7FA00001
    values[4], values[5], values[6] = -0.0, np.inf, np.float32(1e-45)
    return values.reshape(TOY_ROWS, TOY_COLUMNS)


class ToyArguments:
    """The 20 argument slots of one toy launch; slot 19 is the placeholder view."""

    def __init__(self, ffi, values, mode: int):
        self._slots = [ffi.new("float **", values), ffi.new("uint32_t *", TOY_ROWS),
                       ffi.new("uint32_t *", TOY_COLUMNS), ffi.new("uint32_t *", mode)]
        self._padding = ffi.new("uint32_t[]", TOY_PADDING)
        self.placeholder = ffi.new("palw_cuda_producer_device_view_v3 *")
        self.pointers = ffi.new("void *[]", 20)
        for i, slot in enumerate(self._slots):
            self.pointers[i] = slot
        for i in range(TOY_PADDING):
            self.pointers[4 + i] = self._padding + i
        self.pointers[19] = self.placeholder


# -- the probe library: built once per (runtime hook, nvcc, arch) -----------------------------------

def hook_dir(build) -> Path:
    """Where the header and device hook the runtime was built with are (digests per manifest; for a
    brought runtime, as --palw-runtime-headers or --palw-hook-sha256 named it: brought.device_hook)."""
    if build.origin == "brought":
        hook = build.observed.get("device_hook") or {}
        if not hook.get("dir"):
            raise AssertionError(hook.get("why") or "a brought runtime names no device hook header")
        return Path(hook["dir"])
    recorded = build.manifest.get("inputs", {}).get("native", {}).get("files", {})
    for directory in (Path(build.runtime_dir), NATIVE_RUNTIME_DIR):
        files = [directory / HEADER, directory / HOOK]
        if all(f.is_file() for f in files) and all(
                recorded.get(f.name) in (None, sha256_file(f)) for f in files):
            return directory
    raise AssertionError(f"neither {build.runtime_dir} nor {NATIVE_RUNTIME_DIR} holds the {HEADER} and {HOOK} "
                         "this runtime was built with (manifest digests): check out the commit the runtime "
                         "was built from, or rebuild it with `palw build --variant cuda`")


def build_probe(hook: Path, sm_arch: int, nvcc: Path | None = None, cudart: str | None = None) -> Path:
    """Compile PROBE_SOURCE against ``hook`` for ``sm_arch``, linked to the shared libcudart
    ``cudart`` (the runtime's, so both register with one CUDA runtime) or the toolkit's; cached."""
    nvcc = nvcc or nvcc_path("the producer fault cases compile a toy capture kernel against the runtime's "
                             "device hook")
    command = [str(nvcc), "-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC",
               f"-gencode=arch=compute_{sm_arch},code=sm_{sm_arch}", "-I", str(hook),
               "-I", str(TOY_CAPTURE_KERNEL.parent)]
    if cudart:
        command += ["-cudart", "none", "-Xlinker", "--no-as-needed", "-Xlinker", cudart]
    else:
        command += ["-cudart", "shared"]
    if os.environ.get("CUDAHOSTCXX"):
        command += ["-ccbin", os.environ["CUDAHOSTCXX"]]
    key = key_of(PROBE_SOURCE, TOY_CAPTURE_KERNEL.read_bytes(), (hook / HEADER).read_bytes(),
                 (hook / HOOK).read_bytes(), command, tool_version(nvcc))
    return compile_once(cache_dir("probes") / f"palw-fault-probe-{key}.so", command, what="building the fault probe",
                        source=(PROBE_SOURCE, ".cu"),
                        failure=lambda stderr: f"nvcc could not build the fault probe ({stderr.strip()[-1500:]}): "
                                               f"check the toolkit ({tool_version(nvcc)}) supports sm_{sm_arch}")


def mapped_libraries(stem: str) -> set[str]:
    """The files named ``stem``.so[.N...] this process has mapped (real paths)."""
    pattern = re.compile(rf"(?:^|/){re.escape(stem)}\.so(?:\.\d+)*$")
    with open("/proc/self/maps") as maps:
        return {os.path.realpath(line.split()[-1]) for line in maps if pattern.search(line.split()[-1])}


def loaded_library(stem: str, lib_dir: Path) -> ctypes.CDLL:
    """The runtime's own copy of ``stem``.so: the one mapped already, else the build's."""
    mapped = mapped_libraries(stem)
    assert len(mapped) <= 1, f"two copies of {stem}.so are loaded ({sorted(mapped)}): run one runtime per process"
    return ctypes.CDLL(mapped.pop() if mapped else str(lib_dir / f"{stem}.so"))


# -- the bench: the runtime's producer, the probe kernel, device buffers -----------------------------

class Bench:
    """The runtime's producer (backend API table + exported calls) driving the probe kernel."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.ffi, self.lib = runtime.ffi, runtime.lib
        self.contexts: list = []  # created, not yet destroyed
        self._buffers: list = []
        self.backend: Any = None
        self.probe: Any = None

    def open(self) -> None:
        runtime, ffi, lib = self.runtime, self.ffi, self.lib
        self.api = runtime.backend_api()
        assert self.api is not None and lib.palw_cuda_llama_mmvq_backend_api_is_compatible_v1(self.api), (
            "the CUDA registry's palw_cuda_llama_mmvq_get_backend_api_v1 table is missing or incompatible: "
            "the runtime is not a PALW CUDA trace build; rebuild with `palw build --variant cuda`")
        lib_dir, hook = Path(runtime.build.lib_dir), hook_dir(runtime.build)
        header = (hook / HEADER).read_text()
        self._ggml_cuda = loaded_library("libggml-cuda", lib_dir)
        self._ggml_base = loaded_library("libggml-base", lib_dir)
        self.call = {short: c_function(ffi, self._ggml_cuda, name, header_function_type(header, name))
                     for short, name in PRODUCER_FUNCTIONS.items()}
        ggml = {name: c_function(ffi, self._ggml_base, name, signature) for name, signature in GGML_FUNCTIONS.items()}
        self._backend_free = ggml["ggml_backend_free"]
        devices = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]
        cuda = [d for d in devices if ffi.string(lib.ggml_backend_dev_name(d)).startswith(b"CUDA")]
        assert cuda, "no CUDA device is registered with ggml: the GPU tier needs a CUDA runtime and a GPU"
        self.backend = ggml["ggml_backend_dev_init"](cuda[0], ffi.NULL)
        assert self.backend != ffi.NULL, "ggml_backend_dev_init could not create a CUDA backend on this device"
        proc = lib.ggml_backend_reg_get_proc_address(runtime.palw_backend_reg(), CAPTURE_INFO_PROC[0].encode())
        assert proc != ffi.NULL, f"the CUDA registry has no {CAPTURE_INFO_PROC[0]} proc: not a PALW trace build"
        self.capture_info = ffi.new("palw_cuda_producer_grouped_capture_info_v3 *")
        status = ffi.cast(CAPTURE_INFO_PROC[1], proc)(self.backend, self.capture_info)
        assert status_name(lib, status) == "OK", f"{CAPTURE_INFO_PROC[0]} returned {status_name(lib, status)}"
        self._load_probe(hook)
        # which library's producer the cases called, and the hook the probe kernel compiled against
        self.producer = {"library": os.path.realpath(self._ggml_cuda._name),
                         "sha256": sha256_file(Path(os.path.realpath(self._ggml_cuda._name))),
                         "device_hook": {"dir": str(hook), "sha256": sha256_file(hook / HOOK)}}

    def _load_probe(self, hook: Path) -> None:
        ffi = self.ffi
        runtime_cudarts = mapped_libraries("libcudart")
        assert len(runtime_cudarts) == 1, (
            f"the runtime maps {len(runtime_cudarts)} shared libcudart ({sorted(runtime_cudarts)}; none: a "
            "GGML_STATIC build?): a foreign kernel can join only one shared CUDA runtime; build the runtime "
            "with the shared cudart")
        self._probe = ctypes.CDLL(str(build_probe(hook, int(self.capture_info.sm_arch),
                                                  cudart=next(iter(runtime_cudarts)))))
        loaded = mapped_libraries("libcudart")
        assert loaded == runtime_cudarts, (
            f"the probe brought another CUDA runtime ({sorted(loaded - runtime_cudarts)}) than the runtime's "
            f"({sorted(runtime_cudarts)}): link the probe to the runtime's libcudart")
        self.probe = {name.removeprefix("palw_probe_"): c_function(ffi, self._probe, name, signature)
                      for name, signature in PROBE_FUNCTIONS.items()}
        self.capture_entry = self.probe["capture_entry"]()
        self.other_entry = self.probe["other_entry"]()
        self.identity = ffi.new("palw_cuda_producer_actual_identity_v3 *")
        self.probe["identity"](self.identity)
        self.capture_binding = self._binding(self.capture_entry)
        self.other_binding = self._binding(self.other_entry)
        self.values = toy_values()
        self.values_device = self.upload(self.values)
        self.grouped_output = self.upload(np.zeros((HEADS, GROUPED_COLUMNS), dtype=np.float32))
        capture_id = bytes(ffi.buffer(self.capture_info.capture_implementation_id, 32))
        self.grouped_identity = grouped_identity(ffi, capture_id)
        # The runtime's own cudaFuncGetAttributes must know the probe kernel (one CUDA runtime).
        context = self.create(1)
        status = self.prepare(context, self.capture_launch(0))
        self.destroy_cleanly(context)
        assert status == "OK", (f"the runtime's prepare refused the probe kernel ({status}; CUDA_ERROR: its CUDA "
                                "runtime does not know the kernel): build the probe with the runtime's toolkit")

    def _binding(self, entry):
        binding = self.ffi.new("palw_cuda_producer_kernel_binding_v3 *")
        error = self.probe["binding"](entry, self.capture_info.sm_arch, binding)
        assert error == 0, f"cudaFuncGetAttributes of a probe kernel failed (cudaError {error})"
        return binding

    def upload(self, array: np.ndarray):
        data = np.ascontiguousarray(array, dtype=np.float32)
        out = self.ffi.new("void **")
        error = self.probe["upload"](self.ffi.from_buffer(data), data.nbytes, out)
        assert error == 0, f"cudaMalloc/cudaMemcpy of {data.nbytes} bytes failed (cudaError {error})"
        self._buffers.append(out[0])
        return self.ffi.cast("float *", out[0])

    # -- templates -----------------------------------------------------------------------------
    def capture_launch(self, index: int):
        return capture_launch(self.ffi, self.lib, index, self.identity, self.capture_binding)

    def grouped_launch(self, index: int):
        return grouped_launch(self.ffi, self.lib, index, self.grouped_identity, self.other_binding)

    # -- the producer: create / inspect / destroy through the backend API -----------------------
    def create(self, capacity: int):
        out = self.ffi.new("palw_cuda_producer_trace_context_v3 **")
        status = self.api.producer_create(self.backend, capacity, out)
        assert status_name(self.lib, status) == "OK" and out[0] != self.ffi.NULL, (
            f"producer_create({capacity}) returned {status_name(self.lib, status)}")
        self.contexts.append(out[0])
        return out[0]

    def state(self, context) -> dict:
        api = self.api
        return {"count": int(api.producer_count(context)), "committed": int(api.producer_committed_count(context)),
                "faults": fault_names(self.lib, int(api.producer_faults(context))),
                "poisoned": int(api.producer_poisoned(context))}

    def destroy_cleanly(self, context) -> None:
        self.contexts.remove(context)
        self.api.producer_destroy(self.backend, context)
        error = self.probe["sticky_error"]()
        assert error == 0, f"a CUDA error is left after producer_destroy (cudaError {error})"

    # -- the producer: the exported calls, on the legacy stream ---------------------------------
    def _status(self, value) -> str:
        return status_name(self.lib, value)

    def prepare(self, context, launch, view=None, dimensions=None, argument_count: int = 20,
                view_index: int = 19, entry=None) -> str:
        ffi = self.ffi
        view = view if view is not None else ffi.new("palw_cuda_producer_device_view_v3 *")
        return self._status(self.call["prepare"](
            context, ffi.NULL, launch, entry if entry is not None else self.capture_entry,
            dimensions if dimensions is not None else toy_dimensions(ffi), argument_count, view_index, view))

    def launch(self, context, arguments: ToyArguments, entry=None) -> str:
        return self._status(self.call["launch"](
            context, self.ffi.NULL, entry if entry is not None else self.capture_entry, arguments.pointers))

    def run(self, context, launch, mode: int) -> str:
        """prepare + launch of the toy capture kernel: OK or the first refusal."""
        status = self.prepare(context, launch)
        return status if status != "OK" else self.launch(context, ToyArguments(self.ffi, self.values_device, mode))

    def enqueue(self, context, launch) -> str:
        return self._status(self.call["enqueue"](
            context, self.ffi.NULL, launch, self.other_entry, work_dimensions(self.ffi), self.grouped_output,
            GROUPED_COLUMNS, self.grouped_identity))

    def finalize(self, context, records, capacity: int) -> str:
        return self._status(self.call["finalize"](context, self.ffi.NULL, records, capacity))

    # -- host records -----------------------------------------------------------------------------
    def sentinel_records(self, count: int):
        records = self.ffi.new("palw_cuda_trace_record_v3[]", count)
        self.ffi.memmove(records, bytes([SENTINEL]) * self.ffi.sizeof(records), self.ffi.sizeof(records))
        return records

    def untouched(self, records, start: int = 0) -> bool:
        size = self.ffi.sizeof("palw_cuda_trace_record_v3")
        return set(bytes(self.ffi.buffer(records))[start * size:]) == {SENTINEL}

    def encoded(self, record) -> bytes:
        size = self.lib.PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3
        out = self.ffi.new("uint8_t[]", size)
        status = self.api.encode_record(record, out, size)
        assert self._status(status) == "OK", f"encode_record returned {self._status(status)}"
        return bytes(self.ffi.buffer(out, size))

    def expected_record(self, launch, lanes: list[int]) -> bytes:
        """The launch's template with ``lanes`` as its sketch, canonically encoded."""
        ffi = self.ffi
        record = ffi.new("palw_cuda_trace_record_v3 *")
        ffi.memmove(record, ffi.addressof(launch.semantic_template), ffi.sizeof(record[0]))
        for lane, value in enumerate(lanes):
            record.base.base.sketch[lane] = value
        return self.encoded(record)

    def close(self) -> None:
        for context in list(self.contexts):
            self.contexts.remove(context)
            self.api.producer_destroy(self.backend, context)
        for buffer in self._buffers:
            self.probe["free"](buffer)
        self._buffers.clear()
        if self.backend is not None and self.backend != self.ffi.NULL:
            self._backend_free(self.backend)
