"""The semantic template of an approved launch, field by field as the seed smoke's approve
callbacks build it (approve_callback, approve_callback_v2 in tools/palw-mmvq-smoke).

One home for the caller side of a trace (caller.py) and for the launches the native tests and the
producer fault cases hand to the ABI: a shape, then the MMVQ or the attention semantics, then the
ids and the kernel binding.
"""

from __future__ import annotations

from pytest_palw.runtime.discovery import STAGE_PV, STAGE_QK, STAGE_SOFTMAX
from pytest_palw.topology import AttentionGeometry

MMVQ_BLOCK = (32, 4, 1)  # mul_mat_vec_q is __launch_bounds__(128): 4 warps of 32
BINDING_ATTRIBUTES = ("sm_arch", "binary_version", "ptx_version", "num_regs", "max_threads_per_block",
                      "static_shared_memory_bytes", "local_memory_bytes")
IDENTITY_PARTS = ("producer_variant_id", "work_entry_point_id", "capture_implementation_id")


def attention_dimensions(stage: int, a: AttentionGeometry) -> tuple[int, int, int, int, int, int, int]:
    """The patch's launch geometry of an attention stage (mmvf.cu, softmax.cu): grid x, y, z,
    block x, y, z, dynamic shared memory bytes."""
    return {STAGE_QK: (a.kv_cells, a.query_heads, 1, 64, 1, 1, 128),
            STAGE_SOFTMAX: (1, a.query_heads, 1, a.kv_cells, 1, 1, (a.kv_cells + 32) * 4),
            STAGE_PV: (a.head_dim, a.query_heads, 1, 128, 1, 1, 128)}[stage]


def start(ffi, lib, launch, index: int, *, m: int, n: int, k: int, batch: int, output_rows: int,
          output_columns: int, quantization: int, kind: int, phase: int, causal: int = 0,
          decode_step: int = 0, layer_id: int = 0, query_tokens: int = 0, key_value_tokens: int = 0,
          tile_rows: int = 1):
    """Zero ``launch`` (palw_cuda_producer_launch_v3 *), set its nonce and base fields (the tile is
    ``tile_rows`` x output_columns); the semantic template, to be completed by ``mmvq`` or
    ``attention``."""
    size = ffi.sizeof("palw_cuda_producer_launch_v3")
    ffi.memmove(launch, bytes(size), size)
    launch.launch_nonce = index + 1
    semantic = launch.semantic_template
    base = semantic.base.base
    base.kernel_sequence = index
    base.decode_step = decode_step
    base.m, base.n, base.k, base.batch = m, n, k, batch
    base.query_tokens, base.key_value_tokens = query_tokens, key_value_tokens
    base.layer_id = layer_id
    base.tile_rows, base.tile_columns = tile_rows, output_columns
    base.output_rows, base.output_columns = output_rows, output_columns
    base.schema_version = lib.PALW_CUDA_TRACE_SCHEMA_VERSION_V3
    base.kind, base.phase = kind, phase
    base.dtype = lib.PALW_CUDA_TRACE_DTYPE_FP32
    base.quantization = quantization
    base.causal = causal
    semantic.covered_schedule_index = index
    return semantic


def _origin(semantic, origin: int, stage: int, dtype: int, scheme: int, segments: int) -> None:
    """Where the sketched values come from: declared origin, accumulator stage and dtype, sketch
    scheme, reduction segments."""
    (semantic.base.declared_origin, semantic.base.accumulator_stage, semantic.base.accumulator_dtype,
     semantic.base.sketch_scheme, semantic.base.reduction_segment_count) = origin, stage, dtype, scheme, segments


def mmvq(lib, semantic, output_columns: int) -> None:
    """An MMVQ launch: the producer's full-K accumulator, one sublaunch, one block per column."""
    _origin(semantic, lib.PALW_CUDA_TRACE_ORIGIN_PRODUCER_ACCUMULATOR,
            lib.PALW_CUDA_TRACE_ACCUMULATOR_STAGE_FULL_K_PRE_EPILOGUE, lib.PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_FP32,
            lib.PALW_CUDA_TRACE_SKETCH_SCALAR_ACCUMULATOR_F32_V1, 1)
    semantic.sublaunch_count = 1
    semantic.grid_x, semantic.grid_y, semantic.grid_z = output_columns, 1, 1
    semantic.block_x, semantic.block_y, semantic.block_z = MMVQ_BLOCK


def attention(lib, semantic, stage: int, owner_index: int, heads: tuple[int, int, int, int, int],
              dimensions: tuple[int, ...]) -> None:
    """One stage of an eager attention group (QK, softmax, PV at consecutive schedule indices,
    owned by the softmax): the final output tile, sublaunch ``stage - 1`` of 3. ``heads`` is
    (query heads, key-value heads, head dim, logical batch, physical key-value tokens)."""
    _origin(semantic, lib.PALW_CUDA_TRACE_ORIGIN_FINAL_OUTPUT, lib.PALW_CUDA_TRACE_ACCUMULATOR_STAGE_NONE,
            lib.PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_NONE, lib.PALW_CUDA_TRACE_SKETCH_FINAL_OUTPUT_TILE_F32_V1, 0)
    semantic.layer_present = 1
    semantic.attention_group_present = 1
    semantic.attention_stage = stage
    semantic.grouping_version = lib.PALW_CUDA_TRACE_GROUPING_VERSION_V1
    semantic.sublaunch_index = stage - 1
    semantic.sublaunch_count = 3
    semantic.attention_owner_schedule_index = owner_index
    (semantic.query_heads, semantic.key_value_heads, semantic.head_dim, semantic.logical_batch,
     semantic.physical_key_value_tokens) = heads
    (semantic.grid_x, semantic.grid_y, semantic.grid_z, semantic.block_x, semantic.block_y,
     semantic.block_z, semantic.dynamic_shared_memory_bytes) = dimensions


def ids(ffi, semantic, identity: dict[str, bytes], operation: bytes, plan: bytes, layout: bytes,
        group: bytes | None = None) -> None:
    """The 32-byte ids: the kernel's identity (``IDENTITY_PARTS``), the operation instance, the
    decomposition plan, the physical layout and, for attention, the group instance."""
    ffi.memmove(semantic.base.producer_variant_id, identity["producer_variant_id"], 32)
    ffi.memmove(semantic.work_entry_point_id, identity["work_entry_point_id"], 32)
    ffi.memmove(semantic.capture_implementation_id, identity["capture_implementation_id"], 32)
    ffi.memmove(semantic.operation_instance_id, operation, 32)
    ffi.memmove(semantic.decomposition_plan_id, plan, 32)
    ffi.memmove(semantic.physical_layout_id, layout, 32)
    if group is not None:
        ffi.memmove(semantic.attention_group_instance_id, group, 32)


def identity_of(ffi, identity) -> dict[str, bytes]:
    """A kernel info's actual_identity as ``ids`` takes it."""
    return {part: bytes(ffi.buffer(getattr(identity, part), 32)) for part in IDENTITY_PARTS}


def bind_kernel(ffi, launch, attributes, digest: bytes) -> None:
    """The kernel binding: the kernel's attributes (an object with ``BINDING_ATTRIBUTES``, e.g. a
    kernel info) and the digest of the binary it runs from."""
    binding = launch.kernel_binding
    for name in BINDING_ATTRIBUTES:
        setattr(binding, name, getattr(attributes, name))
    ffi.memmove(binding.kernel_binary_digest, digest, 32)
