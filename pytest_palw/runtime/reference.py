"""The reference run: an untraced decode in which every graph node is its own scheduler split.

Asking for every node leaves no room for kernel fusion or CUDA graphs, and each
candidate's output is read back right after it is computed (before its buffer is
reused). This is the "identical scheduling" the trace runs under (the trace
disables fusion and CUDA graphs), so a device sketch can be checked against the
host sketch of the same output, and traced logits against untraced ones bit for bit.

On a CPU runtime the same run, plus the llama bridge's association rules and the
smoke's approve logic, yields the CPU reference trace (records without a producer).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from pytest_palw.runtime.caller import TraceCaller
from pytest_palw.runtime.codec import encode_stream, fingerprint
from pytest_palw.runtime.discovery import (
    STAGE_NONE,
    STAGE_PV,
    STAGE_QK,
    STAGE_SOFTMAX,
    Discovery,
)
from pytest_palw.runtime.run import attention_association, encode_each, new_association
from pytest_palw.runtime.sketch import sketch, tile_from_buffer
from pytest_palw.runtime.templates import attention_dimensions
from pytest_palw.topology import AttentionGeometry

CPU_REFERENCE_DOMAIN = "pytest-palw.cpu_reference.v1"


@dataclass(repr=False)
class ReferenceRun(Discovery):
    tiles: list[np.ndarray] = field(default_factory=list)
    associations: list = field(default_factory=list)  # cffi association_v2 per candidate
    build_associations: bool = False
    decode_status: int | None = None  # of the one decode (reference_run)
    logits: np.ndarray | None = None

    def on_eval(self, tensor, ask: bool) -> bool:
        if ask:
            before = len(self.candidates)
            Discovery.on_eval(self, tensor, True)
            self._pending = tensor if len(self.candidates) > before else None
            return True  # every node is its own split
        if getattr(self, "_pending", None) is not None and tensor == self._pending:
            candidate = self.candidates[-1]
            self.tiles.append(self._read_tile(tensor, candidate))
            if self.build_associations:
                self.associations.append(association_v2(self.runtime, tensor, candidate))
        return True

    def _read_tile(self, tensor, candidate) -> np.ndarray:
        lib, ffi = self._lib, self._ffi
        size = lib.ggml_nbytes(tensor)
        buffer = ffi.new("char[]", size)
        lib.ggml_backend_tensor_get(tensor, buffer, 0, size)
        row_stride = int(tensor.nb[1]) // 4
        if candidate.attention_stage != STAGE_NONE:
            row_stride = int(tensor.nb[2]) // 4  # heads are rows; the patch checks nb[1] == nb[2]
        return tile_from_buffer(ffi.buffer(buffer, size)[:], candidate.output_rows,
                                candidate.output_columns, row_stride)

    def sketches(self) -> list[list[int]]:
        return [sketch(tile) for tile in self.tiles]


def reference_run(model, token: int, build_associations: bool = False) -> ReferenceRun:
    with _decoded(model, token, build_associations) as run:
        return run


@contextmanager
def _decoded(model, token: int, build_associations: bool):
    """The reference decode, its context kept open: the associations' operation tokens are the
    graph's tensors, which live only as long as the context (approve reads their names)."""
    run = ReferenceRun(runtime=model.runtime, attention=model.profile.attention,
                       build_associations=build_associations)
    with model.context(eval_owner=run) as context:
        run.decode_status = context.decode(token)
        run.logits = context.logits() if run.decode_status == 0 else None
        yield run


# -- the llama bridge's association rules (palw_cuda_trace_eval), for the CPU reference -------------

def _tensor_view(runtime, view, tensor) -> None:
    lib, ffi = runtime.lib, runtime.ffi
    if tensor == ffi.NULL:
        return
    view.data = tensor.data
    view.type = {lib.GGML_TYPE_F32: lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F32,
                 lib.GGML_TYPE_F16: lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F16,
                 lib.GGML_TYPE_Q4_K: lib.PALW_CUDA_LLAMA_TENSOR_TYPE_Q4_K,
                 lib.GGML_TYPE_Q6_K: lib.PALW_CUDA_LLAMA_TENSOR_TYPE_Q6_K}.get(tensor.type, 255)
    for i in range(4):
        view.ne[i] = max(int(tensor.ne[i]), 0)
        view.nb[i] = int(tensor.nb[i])


def association_v2(runtime, tensor, candidate):
    """Build the association llama-context.cpp builds for this node (pinned fresh ubatch)."""
    lib, ffi = runtime.lib, runtime.ffi
    stage = candidate.attention_stage
    actual = (new_association(runtime, tensor) if stage == STAGE_NONE
              else attention_association(runtime, tensor, stage, candidate.attention))
    _tensor_view(runtime, actual.src0, tensor.src[0])
    _tensor_view(runtime, actual.src1, tensor.src[1])
    _tensor_view(runtime, actual.src2, tensor.src[2])
    _tensor_view(runtime, actual.dst, tensor)
    if stage == STAGE_NONE:
        actual.phase = lib.PALW_CUDA_TRACE_PREFILL
        actual.kind = lib.PALW_CUDA_TRACE_GEMM
        actual.m, actual.n = int(tensor.ne[0]), int(tensor.ne[1])
        actual.k = int(tensor.src[0].ne[0])
        actual.batch = int(tensor.ne[2]) * int(tensor.ne[3])
        actual.output_rows, actual.output_columns = actual.n, actual.m
        actual.quantization = candidate.quantization
        ffi.memmove(ffi.addressof(actual.src2), bytes(ffi.sizeof(actual.src2)), ffi.sizeof(actual.src2))
        return actual
    layer = re.search(r"-(\d+)$", candidate.node)
    actual.layer_id = int(layer.group(1)) if layer else 0
    actual.quantization = lib.PALW_CUDA_TRACE_QUANTIZATION_NONE
    actual.m = int(tensor.ne[0])
    if stage == STAGE_QK:
        actual.k = int(tensor.src[0].ne[0])
        actual.precision = lib.PALW_CUDA_LLAMA_WORK_PRECISION_F32
    elif stage == STAGE_SOFTMAX:
        actual.k = 1
        actual.precision = lib.PALW_CUDA_LLAMA_WORK_PRECISION_F32
        f32_mask = tensor.src[1] != ffi.NULL and tensor.src[1].type == lib.GGML_TYPE_F32
        actual.attention_mask = (lib.PALW_CUDA_LLAMA_ATTENTION_MASK_F32_CAUSAL if f32_mask
                                 else lib.PALW_CUDA_LLAMA_ATTENTION_MASK_F16_CAUSAL)
        params = ffi.cast("uint32_t *", tensor.op_params)
        actual.scale_bits, actual.max_bias_bits = params[0], params[1]
    else:
        actual.k = int(tensor.src[0].ne[0])
        actual.precision = lib.PALW_CUDA_LLAMA_WORK_PRECISION_DEFAULT
    actual.output_columns = actual.m
    return actual


# -- stand-in kernel infos: a CPU runtime has no kernels to describe ---------------------------------

def cpu_reference_infos(runtime, caller: TraceCaller, a: AttentionGeometry) -> None:
    """Fill ``caller.infos`` with derived identities; binding attributes are 1 (no kernel)."""
    ffi, lib = runtime.ffi, runtime.lib

    def identity(target, klass: str) -> None:
        for part in ("producer_variant_id", "work_entry_point_id", "capture_implementation_id"):
            lib.palw_trace_caller_diagnostic_id(2, f"{CPU_REFERENCE_DOMAIN}.{klass}.{part}".encode(), 0, ffi.NULL,
                                                getattr(target, part))

    def attributes(info) -> None:
        info.sm_arch = info.binary_version = info.ptx_version = info.num_regs = 1
        info.max_threads_per_block = 1

    infos = caller.infos
    for name, quantization in (("q4", lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K),
                               ("q6", lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K)):
        info = ffi.new("palw_cuda_llama_mmvq_kernel_info_v1 *")
        info.abi_version = lib.PALW_CUDA_LLAMA_MMVQ_KERNEL_INFO_ABI_VERSION_V1
        info.struct_size = ffi.sizeof(info[0])
        info.quantization = quantization
        identity(info.actual_identity, name)
        attributes(info)
        setattr(infos, name, info)
    f16, f32, none = (lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F16, lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F32,
                      lib.PALW_CUDA_LLAMA_TENSOR_TYPE_NONE)
    for name, stage, work, mask in (("qk", STAGE_QK, f16, none), ("softmax", STAGE_SOFTMAX, f32, f32),
                                    ("pv", STAGE_PV, f16, none)):
        info = ffi.new("palw_cuda_llama_attention_kernel_info_v1 *")
        info.abi_version = lib.PALW_CUDA_LLAMA_ATTENTION_KERNEL_INFO_ABI_VERSION_V1
        info.struct_size = ffi.sizeof(info[0])
        info.attention_stage, info.work_tensor_type, info.mask_tensor_type = stage, work, mask
        identity(info.actual_identity, name)
        attributes(info)
        d = info.dimensions
        (d.grid_x, d.grid_y, d.grid_z, d.block_x, d.block_y, d.block_z,
         d.dynamic_shared_memory_bytes) = attention_dimensions(stage, a)
        info.output_row_stride = a.kv_cells if stage != STAGE_PV else a.head_dim
        setattr(infos, name, info)


@dataclass(repr=False)
class CpuReferenceTrace:
    reference: ReferenceRun
    caller: TraceCaller
    statuses: list[int]
    records: object  # cffi palw_cuda_trace_record_v3[]
    python_stream: bytes = b""
    c_stream: bytes | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.python_stream)


def cpu_reference_trace(model, token: int, digests: dict[str, bytes]) -> CpuReferenceTrace:
    """Discovery + the smoke's approve logic + host sketches of the outputs -> V3 records."""
    runtime = model.runtime
    ffi = runtime.ffi
    with _decoded(model, token, build_associations=True) as reference:
        caller = TraceCaller(runtime, reference.candidates, version=2, digests=digests)
        cpu_reference_infos(runtime, caller, model.profile.attention)
        count = len(reference.candidates)
        records = ffi.new("palw_cuda_trace_record_v3[]", max(count, 1))
        statuses = []
        expected = ffi.new("palw_cuda_producer_launch_v3 *")
        for index, (actual, lanes) in enumerate(zip(reference.associations, reference.sketches())):
            statuses.append(caller.approve(actual, expected))
            record = records[index]
            ffi.memmove(ffi.addressof(record), ffi.addressof(expected.semantic_template),
                        ffi.sizeof("palw_cuda_trace_record_v3"))
            for lane, value in enumerate(lanes):
                record.base.base.sketch[lane] = value
    trace = CpuReferenceTrace(reference, caller, statuses, records)
    trace.python_stream = encode_stream(records[i] for i in range(count))
    trace.c_stream = host_encode(runtime, [records[i] for i in range(count)])
    return trace


def host_encode(runtime, records) -> bytes | None:
    """record_codec.cpp as compiled into the binding (the runtime's copy needs a CUDA backend)."""
    encode = getattr(runtime.lib, "palw_cuda_trace_encode_record_v3", None)
    return None if encode is None else encode_each(runtime, encode, records)
