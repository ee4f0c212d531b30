"""What conformance/test_producer_faults.py and its harness (pytest_palw/probes/fault_probe.py) call by
name exists, checked on any host.

Those cases run only on a GPU, once per device session: a misspelt constant, struct, field or
symbol must fail here, in CI, instead. Types and constants are checked against the host ABI (the
same header through cffi), the ggml symbols against the runtime binding's declarations and a CPU
build, the producer's exported functions against the header and the CUDA sources, and the probe
kernel's entry points against its source; with nvcc at hand the probe and the producer are also
compiled and their host-only paths called through the very cffi types the cases use.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from pytest_palw.builder.toolchain import nvcc_path
from pytest_palw.paths import CONFORMANCE_DIR, NATIVE_RUNTIME_DIR, SEED_PATCH
from pytest_palw.probes import fault_probe
from pytest_palw.runtime.binding.cdef import defined_functions
from pytest_palw.runtime.binding.hostabi import HEADER, declared_functions
from pytest_palw.runtime.binding.runtime_abi import GGML_CDEF

MODULE = CONFORMANCE_DIR / "test_producer_faults.py"
HARNESS = Path(fault_probe.__file__)
FFI_CALLS = {"new", "cast", "sizeof", "typeof", "from_buffer"}


@pytest.fixture(scope="module")
def cases():
    spec = importlib.util.spec_from_file_location("palw_producer_fault_cases", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tree():
    """The cases and their harness as one tree: what either calls by name."""
    return ast.Module(body=[node for path in (MODULE, HARNESS) for node in ast.parse(path.read_text()).body],
                      type_ignores=[])


def _owner(node) -> str | None:
    """``lib`` for ``lib.X`` and ``self.lib.X`` / ``bench.lib.X``; likewise ffi, api."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _attributes(tree, owner: str) -> set[str]:
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _owner(node.value) == owner}


def _ffi_type_strings(tree) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FFI_CALLS
                and _owner(node.func.value) == "ffi" and node.args):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
            elif isinstance(first, ast.JoinedStr):
                pytest.fail(f"line {node.lineno}: an f-string ffi type cannot be checked here; name the type")
    return found


def _llama_palw_functions() -> set[str]:
    pattern = r"^\+LLAMA_API\s+palw_cuda_trace_status\s+(llama_palw_\w+)\s*\("
    return set(re.findall(pattern, SEED_PATCH.read_text(), re.M))


def test_every_lib_name_is_declared(cases, tree, abi):
    names = _attributes(tree, "lib")
    ggml = set(re.findall(r"\b(ggml_\w+)\s*\(", GGML_CDEF))
    missing = sorted(n for n in names if not (hasattr(abi.lib, n) or n in ggml or n in _llama_palw_functions()))
    assert missing == [], f"lib names the cases use but no declaration has: {missing}"
    bits = [f"PALW_CUDA_PRODUCER_FAULT_{name}" for name in fault_probe.FAULT_BITS]
    assert [b for b in bits if not hasattr(abi.lib, b)] == []
    for _mode, fault_bits, status in cases.CAPTURE_FAULTS.values():
        assert all(bit in fault_probe.FAULT_BITS for bit in fault_bits)
        assert hasattr(abi.lib, f"PALW_CUDA_TRACE_{status}")


def test_every_ffi_type_parses(tree, abi):
    types = (_ffi_type_strings(tree) | set(fault_probe.PROBE_FUNCTIONS.values())
             | set(fault_probe.GGML_FUNCTIONS.values()))
    types.add(fault_probe.CAPTURE_INFO_PROC[1])
    failed = {}
    for text in sorted(types):
        try:
            abi.ffi.typeof(text)
        except Exception as error:  # cffi raises several types for an unknown name
            failed[text] = str(error)
    assert failed == {}


def test_every_backend_api_field_exists(tree, abi):
    fields = {name for name, _ in abi.ffi.typeof("palw_cuda_llama_mmvq_backend_api_v1").fields}
    used = _attributes(tree, "api")
    assert used and used <= fields, f"api fields the cases call that the table lacks: {sorted(used - fields)}"


def test_capture_info_proc_is_a_documented_proc():
    name, kind = fault_probe.CAPTURE_INFO_PROC
    assert f'#define PALW_CUDA_LLAMA_GROUPED_CAPTURE_INFO_PROC_V1 "{name}"' in HEADER.read_text()
    assert f"typedef palw_cuda_trace_status (*{kind})(" in HEADER.read_text()


def test_producer_functions_are_declared_defined_and_typed(abi):
    names = set(fault_probe.PRODUCER_FUNCTIONS.values())
    assert names <= declared_functions(), f"not declared by {HEADER.name}: {sorted(names - declared_functions())}"
    cuda_source = NATIVE_RUNTIME_DIR / "producer_accumulator.cu"
    assert defined_functions([cuda_source], names) == names, f"not all defined in {cuda_source.name}"
    for name in names:
        signature = fault_probe.header_function_type(HEADER.read_text(), name)
        assert abi.ffi.typeof(signature).kind == "function", signature


def test_ggml_functions_are_declared_by_ggml_backend():
    from pytest_palw.builder import api

    manifest = api.find_manifest(variant="cpu")
    if manifest is None:
        pytest.skip("no CPU runtime built here: run `palw build` to check the ggml symbols the fault cases use")
    from pytest_palw.runtime.library import RuntimeBuild

    build = RuntimeBuild.locate(manifest.path)
    declarations = (build.source_dir / "ggml" / "include" / "ggml-backend.h").read_text()
    # Read, not loaded: a second ggml in this process could disturb the session's runtime.
    exported = subprocess.run(["nm", "-D", "--defined-only", str(build.lib_dir / "libggml-base.so")],
                              capture_output=True, text=True, check=True).stdout
    for name in fault_probe.GGML_FUNCTIONS:
        assert re.search(rf"GGML_API\s+[\w\s\*]+\b{name}\s*\(", declarations), f"ggml-backend.h lacks {name}"
        assert re.search(rf" T {name}$", exported, re.M), f"libggml-base.so exports no {name}"


def test_probe_functions_are_in_the_probe_source():
    """Each entry point the cases type is exported by the probe source with as many parameters."""
    exported = {name: parameters for name, parameters in
                re.findall(r"PROBE_API\s+[\w\s\*]+?\b(palw_probe_\w+)\s*\(([^)]*)\)", fault_probe.PROBE_SOURCE)}
    assert set(exported) == set(fault_probe.PROBE_FUNCTIONS)

    def arity(parameters: str) -> int:
        return 0 if parameters.strip() in ("", "void") else parameters.count(",") + 1

    for name, signature in fault_probe.PROBE_FUNCTIONS.items():
        assert arity(signature.split("(*)(", 1)[1].rstrip(")")) == arity(exported[name]), name


def test_templates_pass_the_native_launch_validators(abi):
    """The templates the GPU cases approve are well-formed by the runtime's own contract, and the
    one they break is refused for the reason the refusal case expects."""
    ffi, lib = abi.ffi, abi.lib
    binding = ffi.new("palw_cuda_producer_kernel_binding_v3 *")
    binding.sm_arch, binding.binary_version, binding.ptx_version = 90, 90, 90
    binding.num_regs, binding.max_threads_per_block = 32, 1024
    identity = ffi.new("palw_cuda_producer_actual_identity_v3 *")
    seeds = {"producer_variant_id": 0xA0, "work_entry_point_id": 0x50, "capture_implementation_id": 0xC0}
    for part, seed in seeds.items():
        ffi.memmove(getattr(identity, part), bytes(seed ^ i for i in range(32)), 32)
    from native_templates import GROUPED_CAPTURE_ID

    required = ffi.new("uint64_t *")
    for index in range(3):
        launch = fault_probe.capture_launch(ffi, lib, index, identity, binding)
        assert lib.palw_cuda_producer_validate_launch_v3(launch, required) == lib.PALW_CUDA_TRACE_OK
        assert required[0] == 1
        grouped_identity = fault_probe.grouped_identity(ffi, GROUPED_CAPTURE_ID)
        grouped = fault_probe.grouped_launch(ffi, lib, index, grouped_identity, binding)
        status = lib.palw_cuda_producer_validate_grouped_final_output_launch_v3(grouped, required)
        assert status == lib.PALW_CUDA_TRACE_OK
    malformed = fault_probe.capture_launch(ffi, lib, 0, identity, binding)
    malformed.semantic_template.base.base.schema_version = 2
    assert lib.palw_cuda_producer_validate_launch_v3(malformed, required) == lib.PALW_CUDA_TRACE_INVALID_ARGUMENT
    dims = fault_probe.toy_dimensions(ffi)
    t = fault_probe.capture_launch(ffi, lib, 0, identity, binding).semantic_template
    assert (t.grid_x, t.grid_y, t.grid_z, t.block_x) == (dims.grid_x, dims.grid_y, dims.grid_z, dims.block_x)
    assert dims.grid_x * dims.block_x >= fault_probe.TOY_ROWS * fault_probe.TOY_COLUMNS, "the toy grid misses elements"


def test_toy_values_cover_the_special_floats():
    import numpy as np

    values = fault_probe.toy_values()
    assert values.shape == (fault_probe.TOY_ROWS, fault_probe.TOY_COLUMNS) and values.dtype == np.float32
    flat = values.reshape(-1)
    assert flat.view(np.uint32)[3] == 0x7FA00001 and np.signbit(flat[4]) and np.isinf(flat[5]) and 0 < flat[6] < 1e-38


def test_probe_and_producer_link_through_the_cases_types(abi, tmp_path):
    """Compile the probe as the cases do and the producer as libggml-cuda does; call the host-only
    paths through the cases' cffi types (no GPU needed: they refuse before any CUDA call)."""
    try:
        nvcc = nvcc_path("the probe compiles with the CUDA toolkit")
    except AssertionError as missing:
        pytest.skip(f"{missing}")
    ffi = abi.ffi
    ctypes.CDLL(str(fault_probe.build_probe(NATIVE_RUNTIME_DIR, 90, nvcc)))  # the toolkit's libcudart
    cudarts = fault_probe.mapped_libraries("libcudart")
    assert len(cudarts) == 1, cudarts
    # As on the GPU: linked to the libcudart already mapped, it brings no second CUDA runtime.
    probe = ctypes.CDLL(str(fault_probe.build_probe(NATIVE_RUNTIME_DIR, 90, nvcc, cudart=next(iter(cudarts)))))
    assert fault_probe.mapped_libraries("libcudart") == cudarts
    functions = {name: fault_probe.c_function(ffi, probe, name, signature)
                 for name, signature in fault_probe.PROBE_FUNCTIONS.items()}
    assert functions["palw_probe_capture_entry"]() != ffi.NULL
    assert functions["palw_probe_other_entry"]() not in (ffi.NULL, functions["palw_probe_capture_entry"]())
    identity = ffi.new("palw_cuda_producer_actual_identity_v3 *")
    functions["palw_probe_identity"](identity)
    assert bytes(identity.producer_variant_id)[:2] == bytes([0xA0, 0xA1])
    library = tmp_path / "libproducer.so"
    sources = [str(NATIVE_RUNTIME_DIR / name)
               for name in ("producer_accumulator.cu", "producer_contract.cpp", "record_codec.cpp")]
    result = subprocess.run([str(nvcc), "-std=c++17", "-O1", "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared",
                             "-gencode=arch=compute_90,code=sm_90", "-I", str(NATIVE_RUNTIME_DIR), *sources,
                             "-o", str(library)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    exported = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    producer = ctypes.CDLL(str(library))
    call = {short: fault_probe.c_function(ffi, producer, name,
                                          fault_probe.header_function_type(HEADER.read_text(), name))
            for short, name in fault_probe.PRODUCER_FUNCTIONS.items()}
    for name in fault_probe.PRODUCER_FUNCTIONS.values():
        assert re.search(rf" T {name}$", exported, re.M), f"{name} is not exported by a default nvcc build"
    invalid = abi.lib.PALW_CUDA_TRACE_INVALID_ARGUMENT
    view = ffi.new("palw_cuda_producer_device_view_v3 *")
    view.abi_version = 7
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    records = ffi.new("palw_cuda_trace_record_v3[]", 1)
    arguments = fault_probe.ToyArguments(ffi, ffi.NULL, fault_probe.EXACT)
    assert call["prepare"](ffi.NULL, ffi.NULL, launch, functions["palw_probe_capture_entry"](),
                           fault_probe.toy_dimensions(ffi), 20, 19, view) == invalid
    assert view.abi_version == 0, "prepare did not clear the view it refused"
    assert call["launch"](ffi.NULL, ffi.NULL, functions["palw_probe_capture_entry"](), arguments.pointers) == invalid
    assert call["enqueue"](ffi.NULL, ffi.NULL, launch, functions["palw_probe_other_entry"](),
                           fault_probe.work_dimensions(ffi), ffi.NULL, 256, identity) == invalid
    assert call["finalize"](ffi.NULL, ffi.NULL, records, 1) == invalid
