"""Drive one request-local PALW trace from Python, with the seed smoke's callback semantics.

``TraceCaller`` is the caller side of the trace: its approve / launch_accepted /
fault callbacks reproduce approve_callback(_v2), launch_accepted_callback(_v2) and
fault_callback(_v2) of tools/palw-mmvq-smoke exactly (semantic template per class,
FNV-1a-derived diagnostic ids with the smoke's domains, kernel binding from kernel
info), plus an optional reject index. ``run_trace`` performs the smoke's sequence:
attach, kernel info, decode, unbind, diagnostics, finalize, verify, destroy.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from pytest_palw.runtime import identities as ids
from pytest_palw.runtime import templates
from pytest_palw.runtime.callbacks import CallbackOwner
from pytest_palw.runtime.discovery import (
    STAGE_CLASS,
    STAGE_NONE,
    STAGE_PV,
    STAGE_QK,
    STAGE_SOFTMAX,
    Candidate,
)


class CallbackError(enum.IntEnum):
    """The smoke's callback_error."""

    NONE = 0
    INVALID_ARGUMENT = 1
    UNEXPECTED_COUNT = 2
    ASSOCIATION_MISMATCH = 3
    DUPLICATE_OPERATION_TOKEN = 4
    LAUNCH_NOTIFICATION_MISMATCH = 5


# The kernel bindings a caller approves with, by name: the legacy stream's binary, then each class.
DIGEST_NAMES = ("binary", "q4_k", "q6_k", *STAGE_CLASS.values())


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
    operation_token: int | None = None  # the association's, when the runtime passed one


class TraceCaller(CallbackOwner):
    """Caller state of one trace (the smoke's trace_state / mixed_trace_state)."""

    def __init__(self, runtime, candidates: list[Candidate], *, version: int = 2,
                 reject_index: int | None = None, digests: dict[str, bytes] | None = None,
                 change: tuple[int, object] | None = None):
        """``change``: (index, function of (lib, semantic template)) applied to the template approved
        at that index after it is built, as a caller that approves a wrong template would; the
        launch before and after the change is kept in ``changed`` (two byte strings)."""
        super().__init__()
        self.change = change
        self.changed: tuple[bytes, bytes] | None = None
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
        self.refused: dict | None = None  # the association approve refused at reject_index, as the runtime gave it
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
            request.expected_launch_count = lib.PALW_CUDA_LLAMA_TRACE_MIXED_LAUNCH_COUNT_V2
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

    # -- shared pieces ---------------------------------------------------------------
    def _ptr(self, pointer) -> int:
        return int(self.ffi.cast("uintptr_t", pointer))

    def _remember(self, actual, index: int) -> None:
        token = self._ptr(actual.operation_token)
        self.operation_tokens.append(token)
        self._token_set.add(token)
        # A byte copy now (the association dies with the callback), decoded only when a case asks.
        self._seen.append((bytes(self.ffi.buffer(actual)), self._node_name(actual)))

    def _node_name(self, actual) -> str:
        """The name of the graph node the association's operation token points to."""
        node = self.ffi.string(self.ffi.cast("struct ggml_tensor *", actual.operation_token).name)
        return node.decode("utf-8", "replace")

    @property
    def associations(self) -> list[dict]:
        """What approve saw, per index (for the non-mutation checks); decoded once per length."""
        if len(getattr(self, "_decoded", ())) != len(self._seen):
            kind = ASSOCIATION_TYPES[self.version]
            self._decoded = [association_snapshot(self.ffi, self.ffi.from_buffer(f"{kind} *", raw),
                                                  self.version, node) for raw, node in self._seen]
        return self._decoded

    def _refusal(self, actual, expected, supported, same, limit: int) -> int | None:
        """The smoke's checks before a template is built, in its order: the status approve
        returns, or None to go on. ``supported``/``same`` take the association."""
        lib, ffi = self.lib, self.ffi
        if actual == ffi.NULL or expected == ffi.NULL or self.error != CallbackError.NONE or not supported(actual):
            self.error = CallbackError.INVALID_ARGUMENT
            return lib.PALW_CUDA_TRACE_INVALID_ARGUMENT
        index = self.approved
        if index >= limit:
            self.error = CallbackError.UNEXPECTED_COUNT
            return lib.PALW_CUDA_TRACE_SEQUENCE_MISMATCH
        if index == self.reject_index:
            self.rejection_triggered = True
            weight = ffi.cast("struct ggml_tensor *", actual.operation_token).src[0]
            self.refused = association_snapshot(ffi, actual, self.version, self._node_name(actual))
            self.refused["weight"] = ffi.string(weight.name).decode("utf-8", "replace") if weight != ffi.NULL else None
            return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
        if not same(self.candidates[index], actual):
            self.error = CallbackError.ASSOCIATION_MISMATCH
            return lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
        if self._ptr(actual.operation_token) in self._token_set:
            self.error = CallbackError.DUPLICATE_OPERATION_TOKEN
            return lib.PALW_CUDA_TRACE_SEQUENCE_MISMATCH
        return None

    def _approved(self, actual, index: int, launch) -> int:
        if self.change is not None and self.change[0] == index:
            before = bytes(self.ffi.buffer(launch))
            self.change[1](self.lib, launch.semantic_template)
            self.changed = (before, bytes(self.ffi.buffer(launch)))
        self._remember(actual, index)
        self.approved += 1
        return self.lib.PALW_CUDA_TRACE_OK

    def _incompatible(self) -> int:
        self.error = CallbackError.INVALID_ARGUMENT
        return self.lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH

    # -- V2 callbacks (approve_callback_v2 ...) --------------------------------------
    def _same_v2(self, candidate, actual) -> bool:
        return same_mixed_candidate(self.lib, candidate, actual, self._ptr(actual.src0.data))

    def approve_v2(self, actual, expected):
        lib, ffi = self.lib, self.ffi
        limit = min(len(self.candidates), lib.PALW_CUDA_LLAMA_TRACE_MIXED_LAUNCH_COUNT_V2)
        refused = self._refusal(actual, expected, lib.palw_cuda_llama_trace_association_is_supported_v2,
                                self._same_v2, limit)
        if refused is not None:
            return refused
        index = self.approved
        attention = actual.attention_stage != STAGE_NONE
        semantic = templates.start(
            ffi, lib, expected, index, **_shape(actual), kind=actual.kind, phase=actual.phase,
            causal=actual.causal, decode_step=actual.decode_step, layer_id=actual.layer_id,
            query_tokens=actual.query_tokens, key_value_tokens=actual.key_value_tokens,
            tile_rows=actual.query_heads if attention else 1)
        if not attention:
            info = self.infos.mmvq(lib, actual.quantization)
            if info is None or not lib.palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(info):
                return self._incompatible()
            digest = self.digests["q4_k" if actual.quantization == lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K else "q6_k"]
            templates.mmvq(lib, semantic, actual.output_columns)
            plan, group = ids.diagnostic_id_v2(ids.PLAN_V2, index, actual), None
        else:
            stage = actual.attention_stage
            info = self.infos.attention(stage)
            if (info is None or not lib.palw_cuda_llama_attention_kernel_info_is_compatible_v1(info)
                    or info.attention_stage != stage):
                return self._incompatible()
            digest = self.digests[STAGE_CLASS[stage]]
            owner = {STAGE_QK: index + 1, STAGE_SOFTMAX: index, STAGE_PV: index - 1}[stage]
            d = info.dimensions
            templates.attention(lib, semantic, stage, owner,
                                (actual.query_heads, actual.key_value_heads, actual.head_dim,
                                 actual.logical_batch, actual.physical_key_value_tokens),
                                (d.grid_x, d.grid_y, d.grid_z, d.block_x, d.block_y, d.block_z,
                                 d.dynamic_shared_memory_bytes & 0xFFFFFFFF))
            # one grouped decomposition for the three stages
            plan = ids.diagnostic_id_v2(ids.ATTENTION_PLAN_V2, owner)
            group = ids.diagnostic_id_v2(ids.ATTENTION_GROUP_V1, owner)
        templates.bind_kernel(ffi, expected, info, digest)
        templates.ids(ffi, semantic, templates.identity_of(ffi, info.actual_identity),
                      operation=ids.diagnostic_id_v2(ids.OPERATION_V2, index, actual), plan=plan,
                      layout=ids.diagnostic_id_v2(ids.PHYSICAL_LAYOUT_V2, index, actual), group=group)
        return self._approved(actual, index, expected)

    def launch_accepted_v2(self, actual, expected):
        self._launch_accepted(actual, expected, lambda c: self._same_v2(c, actual))

    # -- V1 callbacks (approve_callback ...) ----------------------------------------
    def _same_v1(self, candidate, actual) -> bool:
        return same_candidate(candidate, actual, self._ptr(actual.weight_data))

    def approve_v1(self, actual, expected):
        lib, ffi = self.lib, self.ffi
        refused = self._refusal(actual, expected, lib.palw_cuda_llama_mmvq_association_is_supported_v1,
                                self._same_v1, len(self.candidates))
        if refused is not None:
            return refused
        index = self.approved
        info = self.infos.mmvq(lib, actual.quantization)
        if (info is None or not lib.palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(info)
                or info.quantization != actual.quantization):
            return self._incompatible()
        semantic = templates.start(ffi, lib, expected, index, **_shape(actual), kind=lib.PALW_CUDA_TRACE_GEMM,
                                   phase=lib.PALW_CUDA_TRACE_PREFILL)
        templates.mmvq(lib, semantic, actual.output_columns)
        templates.ids(ffi, semantic, templates.identity_of(ffi, info.actual_identity),
                      operation=ids.diagnostic_id_v1(ids.OPERATION_V1, index, actual),
                      plan=ids.diagnostic_id_v1(ids.DIRECT_PLAN_V1, 0),
                      layout=ids.diagnostic_id_v1(ids.PHYSICAL_LAYOUT_V1, index, actual))
        templates.bind_kernel(ffi, expected, info, self.digests["binary"])
        return self._approved(actual, index, expected)

    def launch_accepted_v1(self, actual, expected):
        self._launch_accepted(actual, expected, lambda c: self._same_v1(c, actual))

    # -- both versions ----------------------------------------------------------------
    def fault(self, status, fault, actual):
        with_association = actual != self.ffi.NULL
        token = self._ptr(actual.operation_token) if with_association else None
        self.faults.append(Fault(int(status), int(fault), with_association, token))

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


def _shape(actual) -> dict:
    """An association's launch shape, as templates.start takes it."""
    return {name: getattr(actual, name) for name in ("m", "n", "k", "batch", "output_rows",
                                                      "output_columns", "quantization")}


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
    a = expected.attention
    return (expected.layer == actual.layer_id and actual.layer_present == 1 and actual.query_tokens == 1
            and actual.key_value_tokens == 1 and actual.physical_key_value_tokens == a.kv_cells
            and actual.query_heads == a.query_heads and actual.key_value_heads == a.key_value_heads
            and actual.head_dim == a.head_dim and actual.logical_batch == 1 and actual.phase == lib.PALW_CUDA_TRACE_PREFILL
            and actual.decode_step == 0 and actual.causal == 1)


_ASSOCIATION_SCALARS_V2 = ("decode_step", "m", "n", "k", "batch", "output_rows", "output_columns",
                           "layer_id", "query_tokens", "key_value_tokens", "physical_key_value_tokens",
                           "query_heads", "key_value_heads", "head_dim", "logical_batch", "scale_bits",
                           "max_bias_bits", "kind", "phase", "quantization", "causal", "layer_present",
                           "attention_stage", "precision", "attention_mask")


ASSOCIATION_TYPES = {1: "palw_cuda_llama_mmvq_association_v1", 2: "palw_cuda_llama_trace_association_v2"}


def refused_launch(lib, snapshot: dict) -> dict:
    """The launch an association describes, as the runtime gave it: its class (the association's
    quantization or attention stage), its layer (the attention metadata's layer id; an MMVQ
    launch's weight name) and the operation (the weight the MMVQ reads; the attention node)."""
    stage = snapshot.get("attention_stage", STAGE_NONE)
    if stage != STAGE_NONE:
        return {"class": STAGE_CLASS.get(stage, f"stage:{stage}"),
                "layer": snapshot["layer_id"] if snapshot["layer_present"] else None,
                "operation": snapshot["node"]}
    quantization = snapshot["quantization"]
    klass = {lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K: "q4_k",
             lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K: "q6_k"}.get(quantization, f"quantization:{quantization}")
    layer = re.match(r"blk\.(\d+)\.", snapshot.get("weight") or "")
    return {"class": klass, "layer": int(layer.group(1)) if layer else None, "operation": snapshot.get("weight")}


def refused_mismatches(lib, snapshot: dict, launch, loaded_weights: dict[str, int]) -> list[str]:
    """A refused association (``TraceCaller.refused``) against the launch table's ``launch``: its
    class, layer and operation (refused_launch), its shape and, for MMVQ, the weight it reads (the
    graph tensor of the weight's file name, ``Discovery.loaded_weights``)."""
    described = refused_launch(lib, snapshot)
    want = {"class": launch.klass, "layer": launch.layer, "operation": launch.weight or launch.node}
    problems = [f"{key} {described[key]} != {want[key]}" for key in want if described[key] != want[key]]
    problems += [f"{name} {snapshot[name]} != {getattr(launch, name)}" for name in _SHAPE
                 if snapshot[name] != getattr(launch, name)]
    if launch.weight is not None:
        data = snapshot["src0"]["data"] if "src0" in snapshot else snapshot["weight_data"]
        if data != loaded_weights.get(launch.weight):
            problems.append(f"the refused launch reads another weight than {launch.weight}")
    return problems


_SHAPE = ("m", "n", "k", "batch", "output_rows", "output_columns")


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
