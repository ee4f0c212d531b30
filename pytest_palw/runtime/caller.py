"""The caller side of one request-local PALW trace, with the seed smoke's callback semantics.

The callbacks themselves are C (binding/trace_caller.cpp: the smoke's approve_callback(_v2),
launch_accepted_callback(_v2) and fault_callback(_v2): semantic template per class, FNV-1a
diagnostic ids with the smoke's domains, kernel binding from kernel info), so no Python runs per
launch. ``TraceCaller`` owns their state (candidates, kernel infos, digests, an optional reject
index, the record of what each callback was handed) and reads it back for the cases; ``run_trace``
(run.py) performs the smoke's sequence: attach, kernel info, decode, unbind, diagnostics, finalize,
verify, destroy.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

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
    """The smoke's callback_error (PALW_TRACE_CALLER_ERROR_*)."""

    NONE = 0
    INVALID_ARGUMENT = 1
    UNEXPECTED_COUNT = 2
    ASSOCIATION_MISMATCH = 3
    DUPLICATE_OPERATION_TOKEN = 4
    LAUNCH_NOTIFICATION_MISMATCH = 5


# The kernel bindings a caller approves with, by name, in PALW_TRACE_CALLER_DIGEST_* order: the
# legacy stream's binary, then each class.
DIGEST_NAMES = ("binary", "q4_k", "q6_k", *STAGE_CLASS.values())

_INFO_SLOTS = {"q4": "q4_info", "q6": "q6_info", "qk": "qk_info", "softmax": "softmax_info", "pv": "pv_info"}


class KernelInfos:
    """Kernel self-description queried after attach (cffi structs, owned). Each one set is handed
    to the C callbacks of ``state`` at once."""

    _ffi: Any
    _state: Any
    q4: Any
    q6: Any
    qk: Any
    softmax: Any
    pv: Any
    collector: Any

    def __init__(self, ffi, state):
        object.__setattr__(self, "_ffi", ffi)
        object.__setattr__(self, "_state", state)
        for name in (*_INFO_SLOTS, "collector"):
            object.__setattr__(self, name, None)

    def __setattr__(self, name, value):
        if name in _INFO_SLOTS:  # C first: a value it refuses leaves both unchanged
            setattr(self._state, _INFO_SLOTS[name], self._ffi.NULL if value is None else value)
        object.__setattr__(self, name, value)

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
    """Caller state of one trace (the smoke's trace_state / mixed_trace_state), held in C."""

    _decoded: list[dict]  # associations, decoded once per length (absent before)

    def __init__(self, runtime, candidates: list[Candidate], *, version: int = 2,
                 reject_index: int | None = None, digests: dict[str, bytes] | None = None,
                 change: tuple[int, object] | None = None, table=None):
        """``change``: (index, function of (lib, semantic template)) applied to the template approved
        at that index after it is built, as a caller that approves a wrong template would; the
        launch before and after the change is kept in ``changed`` (two byte strings). ``table``:
        ``candidate_table(ffi, candidates)`` made once for many callers (else made here)."""
        super().__init__()
        self.change: Any = change
        self.changed: tuple[bytes, bytes] | None = None
        self.runtime, self.ffi, self.lib = runtime, runtime.ffi, runtime.lib
        self.candidates = candidates
        self._table = candidate_table(self.ffi, candidates) if table is None else table
        self.version = version
        self.reject_index = reject_index
        self.digests = digests or {}
        self.state = self._make_state()
        self.infos = KernelInfos(self.ffi, self.state)
        self.request = self._make_request()

    # -- state -----------------------------------------------------------------------
    def _make_state(self):
        ffi, lib = self.ffi, self.lib
        count = len(self.candidates)
        state = ffi.new("palw_trace_caller *")
        state.version = self.version
        if len(self._table) != max(count, 1):
            raise ValueError(f"a candidate table of {len(self._table)} for {count} candidates")
        state.candidates, state.candidate_count = self._table, count
        state.limit = min(count, lib.PALW_CUDA_LLAMA_TRACE_MIXED_LAUNCH_COUNT_V2) if self.version == 2 else count
        no_index = lib.PALW_TRACE_CALLER_NO_INDEX
        state.reject_index = no_index if self.reject_index is None else self.reject_index
        if self.change is not None:
            self._handle = ffi.new_handle(self)
            state.change_index, state.change, state.change_user_data = self.change[0], lib.palw_py_change, self._handle
        else:
            state.change_index = no_index
        missing = [name for name in DIGEST_NAMES if len(self.digests.get(name, b"")) != 32]
        if missing:
            raise ValueError(f"a caller needs a 32-byte kernel binary digest for each of {DIGEST_NAMES}; "
                             f"missing or malformed: {missing}")
        for slot, name in enumerate(DIGEST_NAMES):
            ffi.memmove(state.digests[slot], self.digests[name], 32)
        self._tokens = ffi.new("void *[]", max(count, 1))
        self._associations = ffi.new("uint8_t[]", max(count, 1) * ffi.sizeof(ASSOCIATION_TYPES[self.version]))
        self._names = ffi.new("char[]", max(count, 1) * lib.PALW_TRACE_CALLER_NAME_SIZE)
        self._faults = ffi.new("palw_trace_caller_fault[]", 2 * count + 16)
        state.operation_tokens, state.associations, state.node_names = self._tokens, self._associations, self._names
        state.faults, state.fault_capacity = self._faults, len(self._faults)
        return state

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
        request.user_data = self.state
        v = f"v{self.version}"
        request.approve = getattr(lib, f"palw_trace_caller_approve_{v}")
        request.launch_accepted = getattr(lib, f"palw_trace_caller_launch_accepted_{v}")
        request.fault = getattr(lib, f"palw_trace_caller_fault_{v}")
        return request

    def approve(self, actual, expected) -> int:
        """The approve callback on ``actual`` (as the runtime would call it), for a run without one."""
        return int(self.request.approve(self.state, actual, expected))

    def on_change(self, launch) -> int:
        before = bytes(self.ffi.buffer(launch))
        self.change[1](self.lib, launch.semantic_template)
        self.changed = (before, bytes(self.ffi.buffer(launch)))
        return 0

    # -- what the callbacks did ------------------------------------------------------
    @property
    def approved(self) -> int:
        return int(self.state.approved)

    @property
    def launch_notifications(self) -> int:
        return int(self.state.launch_notifications)

    @property
    def error(self) -> CallbackError:
        return CallbackError(self.state.error)

    @property
    def rejection_triggered(self) -> bool:
        return bool(self.state.rejection_triggered)

    @property
    def faults(self) -> list[Fault]:
        state, ptr = self.state, self._ptr
        kept = min(int(state.fault_count), int(state.fault_capacity))
        return [Fault(int(f.status), int(f.fault), bool(f.with_association),
                      ptr(f.operation_token) if f.with_association else None) for f in self._faults[0:kept]]

    @property
    def callback_errors(self) -> list[str]:
        """The change hook's exceptions, and fault callbacks the C state could not keep."""
        lost = int(self.state.fault_count) - int(self.state.fault_capacity)
        return super().callback_errors + ([f"{lost} fault callbacks beyond the caller's "
                                           f"{int(self.state.fault_capacity)} were counted but not kept"]
                                          if lost > 0 else [])

    @property
    def operation_tokens(self) -> list[int]:
        return [self._ptr(token) for token in self._tokens[0:self.approved]]

    @property
    def associations(self) -> list[dict]:
        """What approve saw, per approved index (for the non-mutation checks); decoded once per length."""
        if getattr(self, "_decoded", None) is None or len(self._decoded) != self.approved:
            ffi, kind = self.ffi, ASSOCIATION_TYPES[self.version]
            size, name_size = ffi.sizeof(kind), self.lib.PALW_TRACE_CALLER_NAME_SIZE
            self._decoded = [association_snapshot(ffi, ffi.cast(f"{kind} *", self._associations + i * size),
                                                  self.version, self._name(self._names + i * name_size))
                             for i in range(self.approved)]
        return self._decoded

    @property
    def refused(self) -> dict | None:
        """The association approve refused at reject_index, as the runtime gave it, with the name of
        the weight its operation reads."""
        state = self.state
        if not state.refused_present:
            return None
        actual = state.refused_v2 if self.version == 2 else state.refused_v1
        snapshot = association_snapshot(self.ffi, actual, self.version, self._name(state.refused_node))
        snapshot["weight"] = self._name(state.refused_weight) if state.refused_weight_present else None
        return snapshot

    def _ptr(self, pointer) -> int:
        return int(self.ffi.cast("uintptr_t", pointer))

    def _name(self, chars) -> str:
        return self.ffi.string(chars).decode("utf-8", "replace")


def candidate_table(ffi, candidates: list[Candidate]):
    """The candidates as the C callbacks compare them (palw_trace_caller_candidate[])."""
    table = ffi.new("palw_trace_caller_candidate[]", max(len(candidates), 1))
    for slot, candidate in zip(table, candidates):
        _fill_candidate(ffi, slot, candidate)
    return table


def _fill_candidate(ffi, slot, candidate: Candidate) -> None:
    """A discovered candidate as the C callbacks compare it (palw_trace_caller_candidate)."""
    slot.weight_data = ffi.cast("void *", candidate.weight_data)
    for name in ("m", "n", "k", "batch", "output_rows", "output_columns", "kind", "quantization", "attention_stage"):
        setattr(slot, name, getattr(candidate, name))
    slot.layer_id = candidate.layer or 0
    a = candidate.attention
    if a is not None:
        (slot.physical_key_value_tokens, slot.query_heads, slot.key_value_heads,
         slot.head_dim) = a.kv_cells, a.query_heads, a.key_value_heads, a.head_dim


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
