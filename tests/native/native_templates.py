"""Launch templates and field helpers for the native host tests.

Templates are built field by field the way the seed smoke's approve callbacks
(approve_callback, approve_callback_v2 in tools/palw-mmvq-smoke) build them, so
the launch validators are checked against exactly what the real caller approves.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from pytest_palw.binding.hostabi import HEADER

QK, SOFTMAX, PV = 1, 2, 3


def header_id_macro(name: str) -> bytes:
    """A 32-byte id macro of the header (a byte list cffi cannot expose as a constant)."""
    match = re.search(rf"#define {name}\s*\\?\s*((?:0x[0-9a-fA-F]{{2}},?\s*\\?\s*)+)", HEADER.read_text())
    assert match, f"{name} not found in {HEADER}"
    value = bytes(int(b, 16) for b in re.findall(r"0x([0-9a-fA-F]{2})", match.group(1)))
    assert len(value) == 32
    return value


GROUPED_CAPTURE_ID = header_id_macro("PALW_CUDA_PRODUCER_GROUPED_CAPTURE_ID_BYTES_V1")


def diagnostic_id(*parts: object) -> bytes:
    """A deterministic nonzero 32-byte id (the smoke derives its ids by hashing too)."""
    return hashlib.sha256(repr(parts).encode()).digest()


def set_field(ffi, cdata, path: str, value) -> None:
    """Assign ``value`` to a dotted field path; ids take bytes, ``name[i]`` indexes arrays."""
    *parents, leaf = path.split(".")
    target = cdata
    for part in parents:
        target = getattr(target, part)
    if match := re.fullmatch(r"(\w+)\[(\d+)\]", leaf):
        getattr(target, match.group(1))[int(match.group(2))] = value
    elif isinstance(value, bytes):
        ffi.memmove(getattr(target, leaf), value, len(value))
    else:
        setattr(target, leaf, value)


def get_field(cdata, path: str):
    for part in path.split("."):
        cdata = getattr(cdata, part)
    return cdata


@dataclass(frozen=True)
class Templates:
    """Factories for approved launches (palw_cuda_producer_launch_v3 *)."""

    abi: object

    def _binding(self, launch, max_threads: int, digest_tag: str) -> None:
        binding = launch.kernel_binding
        self.abi.ffi.memmove(binding.kernel_binary_digest, diagnostic_id("cubin", digest_tag), 32)
        binding.sm_arch = 90
        binding.binary_version = 90
        binding.ptx_version = 90
        binding.num_regs = 40
        binding.max_threads_per_block = max_threads
        binding.static_shared_memory_bytes = 0
        binding.local_memory_bytes = 0

    def mmvq(self, index: int = 0, quantization: int | None = None, m: int = 4096,
             k: int = 4096, *, mixed: bool = True):
        """An MMVQ launch as approve_callback (mixed=False) or approve_callback_v2 builds it."""
        lib, ffi = self.abi.lib, self.abi.ffi
        quantization = lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K if quantization is None else quantization
        launch = ffi.new("palw_cuda_producer_launch_v3 *")
        launch.launch_nonce = index + 1
        semantic = launch.semantic_template
        base = semantic.base.base
        base.kernel_sequence = index
        base.decode_step = 0
        base.m, base.n, base.k, base.batch = m, 1, k, 1
        base.layer_id = 0
        base.tile_rows, base.tile_columns = 1, m
        base.output_rows, base.output_columns = 1, m
        base.schema_version = lib.PALW_CUDA_TRACE_SCHEMA_VERSION_V3
        base.kind = lib.PALW_CUDA_TRACE_GEMM
        base.phase = lib.PALW_CUDA_TRACE_PREFILL
        base.dtype = lib.PALW_CUDA_TRACE_DTYPE_FP32
        base.quantization = quantization
        base.causal = 0
        semantic.base.declared_origin = lib.PALW_CUDA_TRACE_ORIGIN_PRODUCER_ACCUMULATOR
        semantic.base.accumulator_stage = lib.PALW_CUDA_TRACE_ACCUMULATOR_STAGE_FULL_K_PRE_EPILOGUE
        semantic.base.accumulator_dtype = lib.PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_FP32
        semantic.base.sketch_scheme = lib.PALW_CUDA_TRACE_SKETCH_SCALAR_ACCUMULATOR_F32_V1
        semantic.base.reduction_segment_count = 1
        semantic.covered_schedule_index = index
        semantic.sublaunch_count = 1
        semantic.grid_x, semantic.grid_y, semantic.grid_z = m, 1, 1
        semantic.block_x, semantic.block_y, semantic.block_z = 32, 4, 1
        ffi.memmove(semantic.base.producer_variant_id, diagnostic_id("variant", quantization), 32)
        ffi.memmove(semantic.work_entry_point_id, diagnostic_id("work", quantization), 32)
        ffi.memmove(semantic.capture_implementation_id, diagnostic_id("mmvq capture"), 32)
        ffi.memmove(semantic.operation_instance_id, diagnostic_id("operation", index), 32)
        plan = diagnostic_id("plan", index) if mixed else diagnostic_id("direct_plan")
        ffi.memmove(semantic.decomposition_plan_id, plan, 32)
        ffi.memmove(semantic.physical_layout_id, diagnostic_id("layout", index), 32)
        # mul_mat_vec_q is __launch_bounds__(128): 4 warps of 32.
        self._binding(launch, 128, f"mmvq{quantization}")
        return launch

    def attention(self, stage: int, softmax_index: int = 26, layer: int = 2):
        """One stage of an eager attention group as approve_callback_v2 builds it.

        The group is QK, softmax, PV at consecutive schedule indices around ``softmax_index``.
        """
        lib, ffi = self.abi.lib, self.abi.ffi
        index = softmax_index + (stage - SOFTMAX)
        m, k = {QK: (256, 128), SOFTMAX: (256, 1), PV: (128, 256)}[stage]
        grid_x, block_x, shared = {QK: (256, 64, 128), SOFTMAX: (1, 256, 1152), PV: (128, 128, 128)}[stage]
        launch = ffi.new("palw_cuda_producer_launch_v3 *")
        launch.launch_nonce = index + 1
        semantic = launch.semantic_template
        base = semantic.base.base
        base.kernel_sequence = index
        base.decode_step = 0
        base.m, base.n, base.k, base.batch = m, 1, k, 32
        base.query_tokens, base.key_value_tokens = 1, 1
        base.layer_id = layer
        base.tile_rows, base.tile_columns = 32, m
        base.output_rows, base.output_columns = 32, m
        base.schema_version = lib.PALW_CUDA_TRACE_SCHEMA_VERSION_V3
        base.kind = lib.PALW_CUDA_TRACE_ATTENTION if stage == SOFTMAX else lib.PALW_CUDA_TRACE_GEMM
        base.phase = lib.PALW_CUDA_TRACE_PREFILL
        base.dtype = lib.PALW_CUDA_TRACE_DTYPE_FP32
        base.quantization = lib.PALW_CUDA_TRACE_QUANTIZATION_NONE
        base.causal = 1
        semantic.covered_schedule_index = index
        semantic.base.declared_origin = lib.PALW_CUDA_TRACE_ORIGIN_FINAL_OUTPUT
        semantic.base.accumulator_stage = lib.PALW_CUDA_TRACE_ACCUMULATOR_STAGE_NONE
        semantic.base.accumulator_dtype = lib.PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_NONE
        semantic.base.sketch_scheme = lib.PALW_CUDA_TRACE_SKETCH_FINAL_OUTPUT_TILE_F32_V1
        semantic.base.reduction_segment_count = 0
        semantic.layer_present = 1
        semantic.attention_group_present = 1
        semantic.attention_stage = stage
        semantic.grouping_version = lib.PALW_CUDA_TRACE_GROUPING_VERSION_V1
        semantic.sublaunch_index = stage - 1
        semantic.sublaunch_count = 3
        semantic.attention_owner_schedule_index = softmax_index
        semantic.query_heads, semantic.key_value_heads = 32, 8
        semantic.head_dim, semantic.logical_batch = 128, 1
        semantic.physical_key_value_tokens = 256
        semantic.grid_x, semantic.grid_y, semantic.grid_z = grid_x, 32, 1
        semantic.block_x, semantic.block_y, semantic.block_z = block_x, 1, 1
        semantic.dynamic_shared_memory_bytes = shared
        ffi.memmove(semantic.base.producer_variant_id, diagnostic_id("variant", stage), 32)
        ffi.memmove(semantic.work_entry_point_id, diagnostic_id("work", stage), 32)
        ffi.memmove(semantic.capture_implementation_id, GROUPED_CAPTURE_ID, 32)
        ffi.memmove(semantic.operation_instance_id, diagnostic_id("operation", index), 32)
        ffi.memmove(semantic.attention_group_instance_id, diagnostic_id("group", softmax_index), 32)
        ffi.memmove(semantic.decomposition_plan_id, diagnostic_id("attention_plan", softmax_index), 32)
        ffi.memmove(semantic.physical_layout_id, diagnostic_id("layout", index), 32)
        self._binding(launch, 1024, f"attention{stage}")
        return launch
