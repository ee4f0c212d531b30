"""One-token discovery: the ordered trace candidates of the graph, as the smoke finds them.

A scheduler eval callback sees every node at its ``ask`` stage and never asks for
data, so discovery observes the graph without changing what is computed. The
candidate rules are the smoke's discover_mixed_callback / discover_attention_stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

from pytest_palw.runtime.callbacks import CallbackOwner
from pytest_palw.topology import AttentionGeometry

STAGE_NONE, STAGE_QK, STAGE_SOFTMAX, STAGE_PV = 0, 1, 2, 3
STAGE_CLASS = {STAGE_QK: "attention_qk", STAGE_SOFTMAX: "attention_softmax", STAGE_PV: "attention_pv"}
CLASSES = ("q4_k", "q6_k", "attention_qk", "attention_softmax", "attention_pv")


@dataclass(frozen=True)
class Candidate:
    """One traced launch as discovery sees it."""

    index: int
    klass: str  # q4_k | q6_k | attention_qk | attention_softmax | attention_pv | other:<type>
    layer: int | None
    node: str  # the graph node's name, e.g. "kq-3"
    weight: str | None  # the quantized weight's name for MMVQ, e.g. "blk.3.attn_v.weight"
    weight_data: int
    m: int
    n: int
    k: int
    batch: int
    output_rows: int
    output_columns: int
    kind: int
    quantization: int
    attention_stage: int
    attention: AttentionGeometry | None = None  # the decode's attention geometry, for a stage

    @property
    def is_mmvq(self) -> bool:
        return self.attention_stage == STAGE_NONE


@dataclass(repr=False)
class Discovery(CallbackOwner):
    runtime: Any = None
    attention: AttentionGeometry | None = None  # the model's (Model.profile.attention)
    candidates: list[Candidate] = field(default_factory=list)
    attention_seen: int = 0
    failed: bool = False

    def __post_init__(self):
        CallbackOwner.__init__(self)
        lib, ffi = self.runtime.lib, self.runtime.ffi
        self._lib, self._ffi = lib, ffi
        self._mmvq: tuple[int, tuple[Candidate, ...]] | None = None  # (candidates seen, the V1 stream)

    # -- callback ----------------------------------------------------------------
    def on_eval(self, tensor, ask: bool) -> bool:
        if not ask or tensor == self._ffi.NULL:
            return False
        if self.failed:
            return False
        stage = self._attention_stage(tensor)
        if stage != STAGE_NONE:
            self._add_attention(tensor, stage)
        elif self._is_quantized_matmul(tensor):
            self._add_mmvq(tensor)
        return False

    # -- rules (discover_attention_stage, discover_mixed_callback) -----------------
    def _string(self, pointer) -> str:
        return self._ffi.string(pointer).decode("utf-8", "replace")

    def _is_quantized_matmul(self, t) -> bool:
        lib = self._lib
        return (t.op in (lib.GGML_OP_MUL_MAT, lib.GGML_OP_MUL_MAT_ID) and t.src[0] != self._ffi.NULL
                and bool(lib.ggml_is_quantized(t.src[0].type)))

    def _attention_stage(self, t) -> int:
        lib, null = self._lib, self._ffi.NULL
        if t.type != lib.GGML_TYPE_F32 or t.src[0] == null:
            return STAGE_NONE
        a = cast(AttentionGeometry, self.attention)
        ne = [int(t.ne[i]) for i in range(4)]
        if (t.op == lib.GGML_OP_SOFT_MAX and t.src[0].type == lib.GGML_TYPE_F32
                and t.src[1] != null and t.src[1].type == lib.GGML_TYPE_F32 and t.src[2] == null
                and ne == [a.kv_cells, 1, a.query_heads, 1]):
            return STAGE_SOFTMAX
        src0 = t.src[0]
        if (t.op != lib.GGML_OP_MUL_MAT or src0.type != lib.GGML_TYPE_F16 or t.src[1] == null
                or t.src[1].type != lib.GGML_TYPE_F32 or ne[1:] != [1, a.query_heads, 1]
                or src0.ne[2] != a.key_value_heads or src0.ne[3] != 1):
            return STAGE_NONE
        if src0.ne[0] == a.head_dim and src0.ne[1] == a.kv_cells and ne[0] == a.kv_cells:
            return STAGE_QK
        if src0.ne[0] == a.kv_cells and src0.ne[1] == a.head_dim and ne[0] == a.head_dim:
            return STAGE_PV
        return STAGE_NONE

    def _add_attention(self, t, stage: int) -> None:
        lib = self._lib
        if stage != self.attention_seen % 3 + 1:
            self.failed = True  # the smoke fails discovery on an out-of-order stage
            return
        m = int(t.ne[0])
        a = cast(AttentionGeometry, self.attention)
        self.candidates.append(Candidate(
            index=len(self.candidates), klass=STAGE_CLASS[stage], layer=self.attention_seen // 3,
            node=self._string(t.name), weight=None, weight_data=0, m=m, n=1,
            k=1 if stage == STAGE_SOFTMAX else int(t.src[0].ne[0]), batch=a.query_heads,
            output_rows=a.query_heads, output_columns=m,
            kind=lib.PALW_CUDA_TRACE_ATTENTION if stage == STAGE_SOFTMAX else lib.PALW_CUDA_TRACE_GEMM,
            quantization=lib.PALW_CUDA_TRACE_QUANTIZATION_NONE, attention_stage=stage,
            attention=self.attention))
        self.attention_seen += 1

    def _add_mmvq(self, t) -> None:
        lib, ffi = self._lib, self._ffi
        weight = t.src[0]
        quantization = {lib.GGML_TYPE_Q4_K: lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K,
                        lib.GGML_TYPE_Q6_K: lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K}.get(
                            weight.type, lib.PALW_CUDA_TRACE_QUANTIZATION_NONE)
        klass = {lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K: "q4_k",
                 lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K: "q6_k"}.get(
                     quantization, "other:" + self._string(lib.ggml_type_name(weight.type)))
        weight_name = self._string(weight.name)
        layer = re.match(r"blk\.(\d+)\.", weight_name)
        m, n = int(t.ne[0]), int(t.ne[1])
        self.candidates.append(Candidate(
            index=len(self.candidates), klass=klass, layer=int(layer.group(1)) if layer else None,
            node=self._string(t.name), weight=weight_name,
            weight_data=int(ffi.cast("uintptr_t", weight.data)), m=m, n=n, k=int(weight.ne[0]),
            batch=int(t.ne[2]) * int(t.ne[3]), output_rows=n, output_columns=m,
            kind=lib.PALW_CUDA_TRACE_GEMM, quantization=quantization, attention_stage=STAGE_NONE))

    # -- views ---------------------------------------------------------------------
    @property
    def mmvq(self) -> tuple[Candidate, ...]:
        """The V1 (MMVQ-only) stream: discover_callback's candidates, re-indexed; made once for the
        candidates found so far (each V1 case reads it: 253 copies a read)."""
        made = self._mmvq
        if made is None or made[0] != len(self.candidates):
            from dataclasses import replace
            stream = tuple(replace(c, index=i) for i, c in enumerate(c for c in self.candidates if c.is_mmvq))
            made = self._mmvq = (len(self.candidates), stream)
        return made[1]

    @property
    def loaded_weights(self) -> dict[str, int]:
        """{weight name: data address} of the quantized weights the graph's MMVQ launches read."""
        return {c.weight: c.weight_data for c in self.candidates if c.weight is not None}

    def class_counts(self) -> dict[str, int]:
        counts = {name: 0 for name in CLASSES}
        for candidate in self.candidates:
            counts[candidate.klass] = counts.get(candidate.klass, 0) + 1
        return counts

    def first_index(self) -> dict[str, int | None]:
        return {name: next((c.index for c in self.candidates if c.klass == name), None) for name in CLASSES}


def discover(model, token: int) -> Discovery:
    """Decode ``token`` once on a fresh pinned context with the discovery callback."""
    discovery = Discovery(runtime=model.runtime, attention=model.profile.attention)
    with model.context(eval_owner=discovery) as context:
        status = context.decode(token)
    if status != 0:
        discovery.failed = True
    return discovery
