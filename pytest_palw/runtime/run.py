"""The smoke's trace sequence, step by step, with every status kept for the cases to judge.

attach -> kernel info -> decode -> unbind -> diagnostics -> (finalize -> diagnostics)
-> destroy. Nothing here asserts: a ``TraceRun`` records what each step returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_palw.runtime.caller import TraceCaller
from pytest_palw.runtime.codec import encode_stream, fingerprint
from pytest_palw.runtime.discovery import STAGE_PV, STAGE_QK, STAGE_SOFTMAX
from pytest_palw.topology import AttentionGeometry


@dataclass
class Diagnostics:
    status: int
    count: int = 0
    committed: int = 0
    faults: int = 0
    poisoned: int = 0


@dataclass(repr=False)
class TraceRun:
    caller: TraceCaller
    attach_status: int
    info_status: int | None = None
    decode_status: int | None = None
    unbind_status: int | None = None
    accepted: int = 0
    before_finalize: Diagnostics | None = None
    finalize_status: int | None = None
    after_finalize: Diagnostics | None = None
    destroy_status: int | None = None
    records: Any = None  # cffi palw_cuda_trace_record_v3[count]
    record_count: int = 0
    python_stream: bytes = b""
    c_stream: bytes | None = None
    logits: object = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.python_stream)


def diagnostics(runtime, context) -> Diagnostics:
    ffi, lib = runtime.ffi, runtime.lib
    out = ffi.new("uint64_t[2]"), ffi.new("uint32_t *"), ffi.new("int *")
    status = lib.llama_palw_cuda_trace_diagnostics(context.cptr, out[0], out[0] + 1, out[1], out[2])
    return Diagnostics(int(status), int(out[0][0]), int(out[0][1]), int(out[1][0]), int(out[2][0]))


def new_association(runtime, operation_token):
    """An empty V2 association of this ABI for ``operation_token``."""
    ffi, lib = runtime.ffi, runtime.lib
    actual = ffi.new("palw_cuda_llama_trace_association_v2 *")
    actual.abi_version = lib.PALW_CUDA_LLAMA_TRACE_ASSOCIATION_ABI_VERSION_V2
    actual.struct_size = ffi.sizeof("palw_cuda_llama_trace_association_v2")
    actual.operation_token = operation_token
    return actual


def attention_association(runtime, operation_token, stage: int, a: AttentionGeometry):
    """A V2 association's attention fields for one decode step of one layer, as the llama bridge
    fills them (the smoke's make_synthetic_attention and the CPU reference's bridge rules alike)."""
    lib = runtime.lib
    actual = new_association(runtime, operation_token)
    actual.n, actual.batch, actual.output_rows = 1, a.query_heads, a.query_heads
    actual.query_tokens = actual.key_value_tokens = 1
    actual.physical_key_value_tokens = a.kv_cells
    actual.query_heads, actual.key_value_heads, actual.head_dim = a.query_heads, a.key_value_heads, a.head_dim
    actual.logical_batch = 1
    actual.attention_stage = stage
    actual.kind = lib.PALW_CUDA_TRACE_ATTENTION if stage == STAGE_SOFTMAX else lib.PALW_CUDA_TRACE_GEMM
    actual.layer_present = 1
    actual.phase = lib.PALW_CUDA_TRACE_PREFILL
    actual.causal = 1
    return actual


def synthetic_attention(runtime, stage: int, keepalive: list, a: AttentionGeometry):
    """The smoke's make_synthetic_attention: an association used only to query kernel info."""
    ffi, lib = runtime.ffi, runtime.lib
    allocations = ffi.new("int[3]")
    keepalive.append(allocations)
    actual = attention_association(runtime, allocations, stage, a)
    f16, f32 = lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F16, lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F32
    cells, heads, kv_heads, dim = a.kv_cells, a.query_heads, a.key_value_heads, a.head_dim
    shapes = {  # stage: (m, k, precision, src0, src1, dst) with views (type, ne)
        STAGE_QK: (cells, dim, lib.PALW_CUDA_LLAMA_WORK_PRECISION_F32,
                   (f16, (dim, cells, kv_heads, 1)), (f32, (dim, 1, heads, 1)), (f32, (cells, 1, heads, 1))),
        STAGE_SOFTMAX: (cells, 1, lib.PALW_CUDA_LLAMA_WORK_PRECISION_F32,
                        (f32, (cells, 1, heads, 1)), (f32, (cells, 1, 1, 1)), (f32, (cells, 1, heads, 1))),
        STAGE_PV: (dim, cells, lib.PALW_CUDA_LLAMA_WORK_PRECISION_DEFAULT,
                   (f16, (cells, dim, kv_heads, 1)), (f32, (cells, 1, heads, 1)), (f32, (dim, 1, heads, 1))),
    }
    m, k, precision, src0, src1, dst = shapes[stage]
    actual.m, actual.k, actual.output_columns, actual.precision = m, k, m, precision
    for slot, (name, (kind, ne)) in enumerate(zip(("src0", "src1", "dst"), (src0, src1, dst))):
        view = getattr(actual, name)
        view.data = allocations + slot
        view.type = kind
        size = 2 if kind == f16 else 4
        strides = [size, size * ne[0], size * ne[0] * ne[1], size * ne[0] * ne[1] * ne[2]]
        for i in range(4):
            view.ne[i], view.nb[i] = ne[i], strides[i]
    if stage == STAGE_SOFTMAX:
        actual.scale_bits = 0x3DB504F3
        actual.attention_mask = lib.PALW_CUDA_LLAMA_ATTENTION_MASK_F32_CAUSAL
    return actual


def query_kernel_infos(runtime, context, caller: TraceCaller) -> int:
    """The smoke's kernel-info block; returns PALW_CUDA_TRACE_OK or the first failing status."""
    ffi, lib = runtime.ffi, runtime.lib
    infos = caller.infos
    infos.q4 = ffi.new("palw_cuda_llama_mmvq_kernel_info_v1 *")
    infos.q6 = ffi.new("palw_cuda_llama_mmvq_kernel_info_v1 *")
    for info, quantization in ((infos.q4, lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K),
                               (infos.q6, lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K)):
        status = lib.llama_palw_cuda_trace_kernel_info(context.cptr, quantization, info)
        if status != lib.PALW_CUDA_TRACE_OK:
            return status
        if not lib.palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(info):
            return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
    if caller.version == 1:
        return lib.PALW_CUDA_TRACE_OK
    keepalive: list = []
    for stage, name in ((STAGE_QK, "qk"), (STAGE_SOFTMAX, "softmax"), (STAGE_PV, "pv")):
        info = ffi.new("palw_cuda_llama_attention_kernel_info_v1 *")
        setattr(infos, name, info)
        status = lib.llama_palw_cuda_trace_attention_kernel_info(
            context.cptr, synthetic_attention(runtime, stage, keepalive, context.model.profile.attention), info)
        if status != lib.PALW_CUDA_TRACE_OK:
            return status
    infos.collector = ffi.new("palw_cuda_producer_grouped_capture_info_v3 *")
    status = lib.llama_palw_cuda_trace_grouped_capture_info(context.cptr, infos.collector)
    if status != lib.PALW_CUDA_TRACE_OK:
        return status
    collector = infos.collector
    if (collector.abi_version != lib.PALW_CUDA_PRODUCER_GROUPED_CAPTURE_INFO_ABI_VERSION_V3
            or collector.struct_size != ffi.sizeof("palw_cuda_producer_grouped_capture_info_v3")
            or bytes(collector.capture_implementation_id)
            != bytes(infos.qk.actual_identity.capture_implementation_id)):
        return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
    return lib.PALW_CUDA_TRACE_OK


def run_trace(context, caller: TraceCaller, token: int, *, keep_logits: bool = False) -> TraceRun:
    runtime = context.model.runtime
    ffi, lib = runtime.ffi, runtime.lib
    attach = lib.llama_palw_cuda_trace_attach_v2 if caller.version == 2 else lib.llama_palw_cuda_trace_attach
    run = TraceRun(caller, int(attach(context.cptr, caller.request.expected_launch_count, caller.request)))
    if run.attach_status != lib.PALW_CUDA_TRACE_OK:
        return run
    accepted = ffi.new("uint64_t *")
    run.info_status = int(query_kernel_infos(runtime, context, caller))
    if run.info_status != lib.PALW_CUDA_TRACE_OK:
        run.unbind_status = int(lib.llama_palw_cuda_trace_unbind(context.cptr, accepted))
        run.destroy_status = int(lib.llama_palw_cuda_trace_destroy(context.cptr))
        return run
    run.decode_status = context.decode(token)
    if keep_logits and run.decode_status == 0:
        run.logits = context.logits()
    run.unbind_status = int(lib.llama_palw_cuda_trace_unbind(context.cptr, accepted))
    run.accepted = int(accepted[0])
    run.before_finalize = diagnostics(runtime, context)
    if caller.reject_index is None:
        capacity = caller.request.expected_launch_count
        run.records = ffi.new("palw_cuda_trace_record_v3[]", capacity)
        run.finalize_status = int(lib.llama_palw_cuda_trace_finalize(context.cptr, run.records, capacity))
        run.after_finalize = diagnostics(runtime, context)
        if run.finalize_status == lib.PALW_CUDA_TRACE_OK:
            run.record_count = run.after_finalize.committed
            run.python_stream = encode_stream(run.records[i] for i in range(run.record_count))
            run.c_stream = c_encode(runtime, [run.records[i] for i in range(run.record_count)])
    run.destroy_status = int(lib.llama_palw_cuda_trace_destroy(context.cptr))
    return run


def c_encode(runtime, records) -> bytes | None:
    """The runtime's own codec (backend API encode_record), or None without a CUDA backend."""
    api = runtime.backend_api()
    return None if api is None else encode_each(runtime, api.encode_record, records)


def encode_each(runtime, encode, records) -> bytes | None:
    """The records through a C ``encode(record *, out, size)`` of the codec, concatenated; None if
    it refuses one."""
    ffi, lib = runtime.ffi, runtime.lib
    size = lib.PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3
    out = ffi.new("uint8_t[]", size)
    chunks = []
    for record in records:
        if encode(ffi.addressof(record), out, size) != lib.PALW_CUDA_TRACE_OK:
            return None
        chunks.append(bytes(ffi.buffer(out, size)))
    return b"".join(chunks)
