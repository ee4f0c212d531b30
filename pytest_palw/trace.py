"""Drive one request-local PALW trace from Python, with the seed smoke's callback semantics.

``TraceSession`` is the caller side of the trace: its approve / launch_accepted /
fault callbacks reproduce approve_callback(_v2), launch_accepted_callback(_v2) and
fault_callback(_v2) of tools/palw-mmvq-smoke exactly (semantic template per class,
FNV-1a-derived diagnostic ids with the smoke's domains, kernel binding from kernel
info), plus an optional reject index. ``run_trace`` performs the smoke's sequence:
attach, kernel info, decode, unbind, diagnostics, finalize, verify, destroy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from . import identities as ids
from .callbacks import CallbackOwner
from .codec import encode_record, fingerprint
from .discovery import STAGE_NONE, STAGE_PV, STAGE_QK, STAGE_SOFTMAX, Candidate

MIXED_LAUNCH_COUNT = 361


class CallbackError(enum.IntEnum):
    """The smoke's callback_error."""

    NONE = 0
    INVALID_ARGUMENT = 1
    UNEXPECTED_COUNT = 2
    ASSOCIATION_MISMATCH = 3
    DUPLICATE_OPERATION_TOKEN = 4
    LAUNCH_NOTIFICATION_MISMATCH = 5


@dataclass
class KernelInfos:
    """Kernel self-description queried after attach (cffi structs, owned)."""

    q4: object = None
    q6: object = None
    qk: object = None
    softmax: object = None
    pv: object = None
    collector: object = None

    def mmvq(self, lib, quantization):
        return {lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K: self.q4,
                lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K: self.q6}.get(quantization)

    def attention(self, stage):
        return {STAGE_QK: self.qk, STAGE_SOFTMAX: self.softmax, STAGE_PV: self.pv}.get(stage)


@dataclass
class Fault:
    status: int
    fault: int
    with_association: bool


class TraceSession(CallbackOwner):
    """Caller state of one trace (the smoke's trace_state / mixed_trace_state)."""

    def __init__(self, runtime, candidates: list[Candidate], *, version: int = 2,
                 reject_index: int | None = None, digests: dict[str, bytes] | None = None):
        super().__init__()
        self.runtime, self.ffi, self.lib = runtime, runtime.ffi, runtime.lib
        self.candidates = candidates
        self.version = version
        self.reject_index = reject_index
        self.digests = digests or {}
        self.infos = KernelInfos()
        self.approved = 0
        self.launch_notifications = 0
        self.faults: list[Fault] = []
        self.error = CallbackError.NONE
        self.rejection_triggered = False
        self.operation_tokens: list[int] = []
        self._token_set: set[int] = set()
        self._seen: list[tuple[bytes, str]] = []  # each approved association's bytes and node name
        self._handle = self.ffi.new_handle(self)
        self.request = self._make_request()

    # -- request -------------------------------------------------------------------
    def _make_request(self):
        ffi, lib = self.ffi, self.lib
        if self.version == 2:
            request = ffi.new("palw_cuda_llama_trace_request_v2 *")
            request.abi_version = lib.PALW_CUDA_LLAMA_TRACE_REQUEST_ABI_VERSION_V2
            request.expected_launch_count = MIXED_LAUNCH_COUNT
        else:
            request = ffi.new("palw_cuda_llama_mmvq_request_v1 *")
            request.abi_version = lib.PALW_CUDA_LLAMA_MMVQ_REQUEST_ABI_VERSION_V1
            request.expected_launch_count = len(self.candidates)
        request.struct_size = ffi.sizeof(request[0])
        request.user_data = self._handle
        v = f"v{self.version}"
        request.approve = getattr(lib, f"palw_py_approve_{v}")
        request.launch_accepted = getattr(lib, f"palw_py_launch_accepted_{v}")
        request.fault = getattr(lib, f"palw_py_fault_{v}")
        return request

    @property
    def last_fault(self) -> Fault | None:
        return self.faults[-1] if self.faults else None

    # -- shared pieces ---------------------------------------------------------------
    def _ptr(self, pointer) -> int:
        return int(self.ffi.cast("uintptr_t", pointer))

    def _remember(self, actual, index: int) -> None:
        token = self._ptr(actual.operation_token)
        self.operation_tokens.append(token)
        self._token_set.add(token)
        # A byte copy now (the association dies with the callback), decoded only when a case asks.
        node = self.ffi.string(self.ffi.cast("struct ggml_tensor *", actual.operation_token).name)
        self._seen.append((bytes(self.ffi.buffer(actual)), node.decode("utf-8", "replace")))

    @property
    def associations(self) -> list[dict]:
        """What approve saw, per index (for the non-mutation checks); decoded once per length."""
        if len(getattr(self, "_decoded", ())) != len(self._seen):
            kind = ASSOCIATION_TYPES[self.version]
            self._decoded = [association_snapshot(self.ffi, self.ffi.from_buffer(f"{kind} *", raw),
                                                  self.version, node) for raw, node in self._seen]
        return self._decoded

    def _copy_id(self, target, data: bytes) -> None:
        self.ffi.memmove(target, data, 32)

    def _bind_kernel(self, expected, info, digest: bytes) -> None:
        binding = expected.kernel_binding
        for name in ("sm_arch", "binary_version", "ptx_version", "num_regs", "max_threads_per_block",
                     "static_shared_memory_bytes", "local_memory_bytes"):
            setattr(binding, name, getattr(info, name))
        self._copy_id(binding.kernel_binary_digest, digest)

    def _copy_identity(self, semantic, identity) -> None:
        ffi = self.ffi
        ffi.memmove(semantic.base.producer_variant_id, identity.producer_variant_id, 32)
        ffi.memmove(semantic.work_entry_point_id, identity.work_entry_point_id, 32)
        ffi.memmove(semantic.capture_implementation_id, identity.capture_implementation_id, 32)

    # -- V2 callbacks (approve_callback_v2 ...) --------------------------------------
    def approve_v2(self, actual, expected):
        lib, ffi = self.lib, self.ffi
        if (actual == ffi.NULL or expected == ffi.NULL or self.error != CallbackError.NONE
                or not lib.palw_cuda_llama_trace_association_is_supported_v2(actual)):
            self.error = CallbackError.INVALID_ARGUMENT
            return lib.PALW_CUDA_TRACE_INVALID_ARGUMENT
        index = self.approved
        if index >= len(self.candidates) or index >= MIXED_LAUNCH_COUNT:
            self.error = CallbackError.UNEXPECTED_COUNT
            return lib.PALW_CUDA_TRACE_SEQUENCE_MISMATCH
        if index == self.reject_index:
            self.rejection_triggered = True
            return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
        if not same_mixed_candidate(lib, self.candidates[index], actual, self._ptr(actual.src0.data)):
            self.error = CallbackError.ASSOCIATION_MISMATCH
            return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
        if self._ptr(actual.operation_token) in self._token_set:
            self.error = CallbackError.DUPLICATE_OPERATION_TOKEN
            return lib.PALW_CUDA_TRACE_SEQUENCE_MISMATCH

        ffi.memmove(expected, bytes(ffi.sizeof("palw_cuda_producer_launch_v3")),
                    ffi.sizeof("palw_cuda_producer_launch_v3"))
        expected.launch_nonce = index + 1
        semantic = expected.semantic_template
        base = semantic.base.base
        attention = actual.attention_stage != STAGE_NONE
        base.kernel_sequence = index
        base.decode_step = actual.decode_step
        base.m, base.n, base.k, base.batch = actual.m, actual.n, actual.k, actual.batch
        base.query_tokens = actual.query_tokens
        base.key_value_tokens = actual.key_value_tokens
        base.layer_id = actual.layer_id
        base.tile_rows = 32 if attention else 1
        base.tile_columns = actual.output_columns
        base.output_rows = actual.output_rows
        base.output_columns = actual.output_columns
        base.schema_version = lib.PALW_CUDA_TRACE_SCHEMA_VERSION_V3
        base.kind = actual.kind
        base.phase = actual.phase
        base.dtype = lib.PALW_CUDA_TRACE_DTYPE_FP32
        base.quantization = actual.quantization
        base.causal = actual.causal
        semantic.covered_schedule_index = index

        if not attention:
            info = self.infos.mmvq(lib, actual.quantization)
            if info is None or not lib.palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(info):
                self.error = CallbackError.INVALID_ARGUMENT
                return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
            digest = self.digests["q4_k" if actual.quantization == lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K else "q6_k"]
            semantic.base.declared_origin = lib.PALW_CUDA_TRACE_ORIGIN_PRODUCER_ACCUMULATOR
            semantic.base.accumulator_stage = lib.PALW_CUDA_TRACE_ACCUMULATOR_STAGE_FULL_K_PRE_EPILOGUE
            semantic.base.accumulator_dtype = lib.PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_FP32
            semantic.base.sketch_scheme = lib.PALW_CUDA_TRACE_SKETCH_SCALAR_ACCUMULATOR_F32_V1
            semantic.base.reduction_segment_count = 1
            semantic.sublaunch_count = 1
            semantic.grid_x, semantic.grid_y, semantic.grid_z = actual.output_columns, 1, 1
            semantic.block_x, semantic.block_y, semantic.block_z = 32, 4, 1
        else:
            stage = actual.attention_stage
            info = self.infos.attention(stage)
            if (info is None or not lib.palw_cuda_llama_attention_kernel_info_is_compatible_v1(info)
                    or info.attention_stage != stage):
                self.error = CallbackError.INVALID_ARGUMENT
                return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
            digest = self.digests[{STAGE_QK: "attention_qk", STAGE_SOFTMAX: "attention_softmax",
                                   STAGE_PV: "attention_pv"}[stage]]
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
            semantic.attention_owner_schedule_index = {STAGE_QK: index + 1, STAGE_SOFTMAX: index,
                                                       STAGE_PV: index - 1}[stage]
            semantic.query_heads = actual.query_heads
            semantic.key_value_heads = actual.key_value_heads
            semantic.head_dim = actual.head_dim
            semantic.logical_batch = actual.logical_batch
            semantic.physical_key_value_tokens = actual.physical_key_value_tokens
            d = info.dimensions
            semantic.grid_x, semantic.grid_y, semantic.grid_z = d.grid_x, d.grid_y, d.grid_z
            semantic.block_x, semantic.block_y, semantic.block_z = d.block_x, d.block_y, d.block_z
            semantic.dynamic_shared_memory_bytes = d.dynamic_shared_memory_bytes & 0xFFFFFFFF
            self._copy_id(semantic.attention_group_instance_id, ids.diagnostic_id_v2(
                ids.ATTENTION_GROUP_V1, semantic.attention_owner_schedule_index))
        self._bind_kernel(expected, info, digest)
        self._copy_identity(semantic, info.actual_identity)
        self._copy_id(semantic.operation_instance_id, ids.diagnostic_id_v2(ids.OPERATION_V2, index, actual))
        if not attention:
            plan = ids.diagnostic_id_v2(ids.PLAN_V2, index, actual)
        else:  # one grouped decomposition for the three stages
            plan = ids.diagnostic_id_v2(ids.ATTENTION_PLAN_V2, semantic.attention_owner_schedule_index)
        self._copy_id(semantic.decomposition_plan_id, plan)
        self._copy_id(semantic.physical_layout_id, ids.diagnostic_id_v2(ids.PHYSICAL_LAYOUT_V2, index, actual))
        self._remember(actual, index)
        self.approved += 1
        return lib.PALW_CUDA_TRACE_OK

    def launch_accepted_v2(self, actual, expected):
        self._launch_accepted(actual, expected, lambda c: same_mixed_candidate(
            self.lib, c, actual, self._ptr(actual.src0.data)))

    def fault_v2(self, status, fault, actual):
        self.faults.append(Fault(int(status), int(fault), actual != self.ffi.NULL))

    # -- V1 callbacks (approve_callback ...) ----------------------------------------
    def approve_v1(self, actual, expected):
        lib, ffi = self.lib, self.ffi
        if (actual == ffi.NULL or expected == ffi.NULL or self.error != CallbackError.NONE
                or not lib.palw_cuda_llama_mmvq_association_is_supported_v1(actual)):
            self.error = CallbackError.INVALID_ARGUMENT
            return lib.PALW_CUDA_TRACE_INVALID_ARGUMENT
        index = self.approved
        if index >= len(self.candidates):
            self.error = CallbackError.UNEXPECTED_COUNT
            return lib.PALW_CUDA_TRACE_SEQUENCE_MISMATCH
        if index == self.reject_index:
            self.rejection_triggered = True
            return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
        if not same_candidate(self.candidates[index], actual, self._ptr(actual.weight_data)):
            self.error = CallbackError.ASSOCIATION_MISMATCH
            return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
        if self._ptr(actual.operation_token) in self._token_set:
            self.error = CallbackError.DUPLICATE_OPERATION_TOKEN
            return lib.PALW_CUDA_TRACE_SEQUENCE_MISMATCH
        info = self.infos.mmvq(lib, actual.quantization)
        if (info is None or not lib.palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(info)
                or info.quantization != actual.quantization):
            self.error = CallbackError.INVALID_ARGUMENT
            return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
        ffi.memmove(expected, bytes(ffi.sizeof("palw_cuda_producer_launch_v3")),
                    ffi.sizeof("palw_cuda_producer_launch_v3"))
        expected.launch_nonce = index + 1
        semantic = expected.semantic_template
        base = semantic.base.base
        base.kernel_sequence = index
        base.m, base.n, base.k, base.batch = actual.m, actual.n, actual.k, actual.batch
        base.tile_rows = 1
        base.tile_columns = actual.output_columns
        base.output_rows = actual.output_rows
        base.output_columns = actual.output_columns
        base.schema_version = lib.PALW_CUDA_TRACE_SCHEMA_VERSION_V3
        base.kind = lib.PALW_CUDA_TRACE_GEMM
        base.phase = lib.PALW_CUDA_TRACE_PREFILL
        base.dtype = lib.PALW_CUDA_TRACE_DTYPE_FP32
        base.quantization = actual.quantization
        semantic.base.declared_origin = lib.PALW_CUDA_TRACE_ORIGIN_PRODUCER_ACCUMULATOR
        semantic.base.accumulator_stage = lib.PALW_CUDA_TRACE_ACCUMULATOR_STAGE_FULL_K_PRE_EPILOGUE
        semantic.base.accumulator_dtype = lib.PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_FP32
        semantic.base.sketch_scheme = lib.PALW_CUDA_TRACE_SKETCH_SCALAR_ACCUMULATOR_F32_V1
        semantic.base.reduction_segment_count = 1
        semantic.covered_schedule_index = index
        semantic.sublaunch_count = 1
        semantic.grid_x, semantic.grid_y, semantic.grid_z = actual.output_columns, 1, 1
        semantic.block_x, semantic.block_y, semantic.block_z = 32, 4, 1
        self._copy_identity(semantic, info.actual_identity)
        self._copy_id(semantic.operation_instance_id, ids.diagnostic_id_v1(ids.OPERATION_V1, index, actual))
        self._copy_id(semantic.decomposition_plan_id, ids.diagnostic_id_v1(ids.DIRECT_PLAN_V1, 0))
        self._copy_id(semantic.physical_layout_id, ids.diagnostic_id_v1(ids.PHYSICAL_LAYOUT_V1, index, actual))
        self._bind_kernel(expected, info, self.digests["binary"])
        self._remember(actual, index)
        self.approved += 1
        return lib.PALW_CUDA_TRACE_OK

    def launch_accepted_v1(self, actual, expected):
        self._launch_accepted(actual, expected, lambda c: same_candidate(
            c, actual, self._ptr(actual.weight_data)))

    def fault_v1(self, status, fault, actual):
        self.faults.append(Fault(int(status), int(fault), actual != self.ffi.NULL))

    def _launch_accepted(self, actual, expected, same) -> None:
        n = self.launch_notifications
        if (actual == self.ffi.NULL or expected == self.ffi.NULL or n >= self.approved
                or n >= len(self.candidates) or self.operation_tokens[n] != self._ptr(actual.operation_token)
                or not same(self.candidates[n]) or expected.launch_nonce != n + 1
                or expected.semantic_template.base.base.kernel_sequence != n):
            if self.error == CallbackError.NONE:
                self.error = CallbackError.LAUNCH_NOTIFICATION_MISMATCH
            return
        self.launch_notifications += 1


def same_candidate(expected: Candidate, actual, weight_data: int) -> bool:
    """The smoke's same_candidate (V1)."""
    return (expected.weight_data == weight_data and expected.m == actual.m and expected.n == actual.n
            and expected.k == actual.k and expected.batch == actual.batch
            and expected.quantization == actual.quantization)


def same_mixed_candidate(lib, expected: Candidate, actual, src0_data: int) -> bool:
    """The smoke's same_mixed_candidate (V2)."""
    if (expected.m != actual.m or expected.n != actual.n or expected.k != actual.k
            or expected.batch != actual.batch or expected.output_rows != actual.output_rows
            or expected.output_columns != actual.output_columns or expected.kind != actual.kind
            or expected.quantization != actual.quantization
            or expected.attention_stage != actual.attention_stage):
        return False
    if expected.attention_stage == STAGE_NONE:
        return expected.weight_data == src0_data
    return (expected.layer == actual.layer_id and actual.layer_present == 1 and actual.query_tokens == 1
            and actual.key_value_tokens == 1 and actual.physical_key_value_tokens == 256
            and actual.query_heads == 32 and actual.key_value_heads == 8 and actual.head_dim == 128
            and actual.logical_batch == 1 and actual.phase == lib.PALW_CUDA_TRACE_PREFILL
            and actual.decode_step == 0 and actual.causal == 1)


_ASSOCIATION_SCALARS_V2 = ("decode_step", "m", "n", "k", "batch", "output_rows", "output_columns",
                           "layer_id", "query_tokens", "key_value_tokens", "physical_key_value_tokens",
                           "query_heads", "key_value_heads", "head_dim", "logical_batch", "scale_bits",
                           "max_bias_bits", "kind", "phase", "quantization", "causal", "layer_present",
                           "attention_stage", "precision", "attention_mask")


ASSOCIATION_TYPES = {1: "palw_cuda_llama_mmvq_association_v1", 2: "palw_cuda_llama_trace_association_v2"}


def association_snapshot(ffi, actual, version: int, node: str) -> dict:
    """A plain copy of an association. ``node`` is the name of the graph node the operation token
    pointed to while the callback ran."""
    ptr = lambda p: int(ffi.cast("uintptr_t", p))  # noqa: E731
    if version == 1:
        return {"operation_token": ptr(actual.operation_token), "weight_data": ptr(actual.weight_data), "node": node,
                **{f: int(getattr(actual, f)) for f in ("m", "n", "k", "batch", "output_rows",
                                                         "output_columns", "quantization")}}
    views = {}
    for name in ("src0", "src1", "src2", "dst"):
        view = getattr(actual, name)
        views[name] = {"data": ptr(view.data), "type": int(view.type),
                       "ne": [int(view.ne[i]) for i in range(4)], "nb": [int(view.nb[i]) for i in range(4)]}
    return {"operation_token": ptr(actual.operation_token), "node": node, **views,
            **{f: int(getattr(actual, f)) for f in _ASSOCIATION_SCALARS_V2}}
