"""The caller's C callbacks (binding/trace_caller.cpp) on the CPU reference's associations.

The associations are the llama bridge's rules over the real graph of the CPU runtime
(runtime/reference.py), the candidates discovery's, so the callbacks see what a CUDA runtime hands
them, in order. Each refusal of the seed smoke's callbacks is provoked once and named; the ids are
held against the smoke's derive_diagnostic_id(_v2) written out here from its formula (FNV-1a over
the domain, lane, sequence and shape fields, big-endian). On a GPU the caller is certified by the
fingerprints (the seed smoke's own, conformance/test_positive_trace.py).
"""

import struct

import pytest

from pytest_palw.runtime.caller import DIGEST_NAMES, CallbackError, TraceCaller
from pytest_palw.runtime.codec import fnv1a64
from pytest_palw.runtime.names import fault_name, status_name

# One digest per kernel binding, each its own, so binding the wrong one is seen.
DIGESTS = {name: bytes([slot + 1]) * 32 for slot, name in enumerate(DIGEST_NAMES)}
STAGE_DIGEST = {0: None, 1: "attention_qk", 2: "attention_softmax", 3: "attention_pv"}


@pytest.fixture
def decoded(palw_model, palw_session):
    """The CPU reference decode with its associations (alive only inside the fixture)."""
    from pytest_palw.runtime.reference import _decoded

    with _decoded(palw_model, palw_session.token, build_associations=True) as reference:
        yield reference


def _caller(runtime, model, session, candidates, version=2, **options):
    from pytest_palw.runtime.reference import cpu_reference_infos

    caller = TraceCaller(runtime, candidates, version=version, digests=DIGESTS, **options)
    cpu_reference_infos(runtime, caller, model.profile.attention)
    return caller


def _smoke_id(domain: str, sequence: int, tail: bytes = b"") -> bytes:
    """derive_diagnostic_id(_v2) of tools/palw-mmvq-smoke, from its formula."""
    u64 = lambda v: struct.pack(">Q", v & 0xFFFFFFFFFFFFFFFF)  # noqa: E731
    return b"".join(u64(fnv1a64(domain.encode() + u64(lane) + u64(sequence) + tail)) for lane in range(4))


def _v1_association(runtime, actual_v2):
    """The V1 association of an MMVQ launch, as the llama bridge fills it from the same node."""
    ffi, lib = runtime.ffi, runtime.lib
    v1 = ffi.new("palw_cuda_llama_mmvq_association_v1 *")
    v1.abi_version = lib.PALW_CUDA_LLAMA_MMVQ_ASSOCIATION_ABI_VERSION_V1
    v1.struct_size = ffi.sizeof(v1[0])
    v1.operation_token, v1.weight_data = actual_v2.operation_token, actual_v2.src0.data
    for name in ("m", "n", "k", "batch", "output_rows", "output_columns", "quantization"):
        setattr(v1, name, getattr(actual_v2, name))
    return v1


def test_v2_ids_are_the_smokes(decoded, palw_runtime, palw_model, palw_session):
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    caller = _caller(palw_runtime, palw_model, palw_session, decoded.candidates)
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    for index, actual in enumerate(decoded.associations):
        assert caller.approve(actual, launch) == lib.PALW_CUDA_TRACE_OK, index
        semantic = launch.semantic_template
        tail = b"".join(struct.pack(">Q", getattr(actual, f)) for f in ("m", "n", "k", "batch", "layer_id"))
        tail += bytes([actual.kind, actual.quantization, actual.attention_stage])
        assert bytes(semantic.operation_instance_id) == _smoke_id("misaka.palw.diagnostic.operation.v2", index, tail)
        assert bytes(semantic.physical_layout_id) == _smoke_id("misaka.palw.diagnostic.physical_layout.v2", index, tail)
        mmvq_class = {lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K: "q4_k", lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K: "q6_k"}
        klass = STAGE_DIGEST[actual.attention_stage] or mmvq_class[actual.quantization]
        assert bytes(launch.kernel_binding.kernel_binary_digest) == DIGESTS[klass], index
        if actual.attention_stage == 0:
            assert bytes(semantic.decomposition_plan_id) == _smoke_id("misaka.palw.diagnostic.plan.v2", index, tail)
            assert semantic.base.base.tile_rows == 1
        else:
            owner = semantic.attention_owner_schedule_index
            assert owner == {1: index + 1, 2: index, 3: index - 1}[actual.attention_stage]
            assert bytes(semantic.decomposition_plan_id) == _smoke_id("misaka.palw.diagnostic.attention_plan.v2", owner)
            assert bytes(semantic.attention_group_instance_id) == _smoke_id(
                "misaka.palw.diagnostic.attention_group.v1", owner)
            assert semantic.base.base.tile_rows == actual.query_heads
        assert (launch.launch_nonce, semantic.base.base.kernel_sequence, semantic.covered_schedule_index) == (
            index + 1, index, index)
    assert caller.approved == len(decoded.candidates) and caller.error == CallbackError.NONE
    assert [a["node"] for a in caller.associations] == [c.node for c in decoded.candidates]
    assert caller.operation_tokens == [int(ffi.cast("uintptr_t", a.operation_token)) for a in decoded.associations]


def test_v1_templates_are_the_smokes(decoded, palw_runtime, palw_model, palw_session):
    """approve_callback (V1): GEMM prefill, tile 1 x columns, the binary's digest, direct plan."""
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    caller = _caller(palw_runtime, palw_model, palw_session, decoded.mmvq, version=1)
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    mmvq = [a for a in decoded.associations if a.attention_stage == 0]
    assert len(mmvq) == len(decoded.mmvq)
    plan = _smoke_id("misaka.palw.diagnostic.direct_plan.v1", 0)
    for index, actual in enumerate(_v1_association(palw_runtime, a) for a in mmvq):
        assert caller.approve(actual, launch) == lib.PALW_CUDA_TRACE_OK, index
        semantic, base = launch.semantic_template, launch.semantic_template.base.base
        tail = b"".join(struct.pack(">Q", getattr(actual, f)) for f in ("m", "n", "k", "batch"))
        tail += bytes([actual.quantization])
        assert bytes(semantic.operation_instance_id) == _smoke_id("misaka.palw.diagnostic.operation.v1", index, tail)
        assert bytes(semantic.physical_layout_id) == _smoke_id("misaka.palw.diagnostic.physical_layout.v1", index, tail)
        assert bytes(semantic.decomposition_plan_id) == plan
        assert (base.kind, base.phase, base.tile_rows, base.tile_columns) == (
            lib.PALW_CUDA_TRACE_GEMM, lib.PALW_CUDA_TRACE_PREFILL, 1, actual.output_columns)
        assert (semantic.grid_x, semantic.block_x, semantic.block_y) == (actual.output_columns, 32, 4)
        assert bytes(launch.kernel_binding.kernel_binary_digest) == DIGESTS["binary"]
        info = caller.infos.mmvq(lib, actual.quantization)
        assert bytes(semantic.base.producer_variant_id) == bytes(info.actual_identity.producer_variant_id)
    assert caller.approved == len(mmvq) and caller.error == CallbackError.NONE


def test_each_refusal_of_approve_is_the_smokes(decoded, palw_runtime, palw_model, palw_session):
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    first, second = decoded.associations[0], decoded.associations[1]

    def fresh(**options):
        return _caller(palw_runtime, palw_model, palw_session, decoded.candidates, **options)

    out_of_order = fresh()
    assert status_name(lib, out_of_order.approve(second, launch)) == "IDENTITY_MISMATCH"
    assert out_of_order.error == CallbackError.ASSOCIATION_MISMATCH and out_of_order.approved == 0
    # once in error, every later call is refused as an invalid argument
    assert status_name(lib, out_of_order.approve(first, launch)) == "INVALID_ARGUMENT"

    duplicate = fresh()
    assert duplicate.approve(first, launch) == lib.PALW_CUDA_TRACE_OK
    token = second.operation_token
    second.operation_token = first.operation_token  # the same operation twice
    try:
        assert status_name(lib, duplicate.approve(second, launch)) == "SEQUENCE_MISMATCH"
    finally:
        second.operation_token = token
    assert duplicate.error == CallbackError.DUPLICATE_OPERATION_TOKEN

    short = _caller(palw_runtime, palw_model, palw_session, decoded.candidates[:1])
    assert short.approve(first, launch) == lib.PALW_CUDA_TRACE_OK
    assert status_name(lib, short.approve(second, launch)) == "SEQUENCE_MISMATCH"
    assert short.error == CallbackError.UNEXPECTED_COUNT

    unsupported = fresh()
    size = first.struct_size
    first.struct_size = size - 1
    try:
        assert status_name(lib, unsupported.approve(first, launch)) == "INVALID_ARGUMENT"
    finally:
        first.struct_size = size
    assert unsupported.error == CallbackError.INVALID_ARGUMENT

    no_info = TraceCaller(palw_runtime, decoded.candidates, digests=DIGESTS)
    assert status_name(lib, no_info.approve(first, launch)) == "IDENTITY_MISMATCH"
    assert no_info.error == CallbackError.INVALID_ARGUMENT

    rejecting = fresh(reject_index=1)
    assert rejecting.approve(first, launch) == lib.PALW_CUDA_TRACE_OK
    assert status_name(lib, rejecting.approve(second, launch)) == "IDENTITY_MISMATCH"
    assert rejecting.rejection_triggered and rejecting.error == CallbackError.NONE and rejecting.approved == 1
    assert rejecting.refused["node"] == decoded.candidates[1].node
    assert rejecting.refused["weight"] == decoded.candidates[1].weight


def test_launch_notifications_follow_the_approvals(decoded, palw_runtime, palw_model, palw_session):
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    caller = _caller(palw_runtime, palw_model, palw_session, decoded.candidates)
    launches = [ffi.new("palw_cuda_producer_launch_v3 *") for _ in range(2)]
    for actual, launch in zip(decoded.associations[:2], launches):
        assert caller.approve(actual, launch) == lib.PALW_CUDA_TRACE_OK
    accepted = caller.request.launch_accepted
    accepted(caller.state, decoded.associations[0], launches[0])
    assert caller.launch_notifications == 1 and caller.error == CallbackError.NONE
    accepted(caller.state, decoded.associations[0], launches[0])  # the same launch again
    assert caller.launch_notifications == 1 and caller.error == CallbackError.LAUNCH_NOTIFICATION_MISMATCH


def test_faults_are_kept_with_their_operation_and_an_overflow_is_named(decoded, palw_runtime, palw_model,
                                                                       palw_session):
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    caller = _caller(palw_runtime, palw_model, palw_session, decoded.candidates[:1])
    actual = decoded.associations[0]
    fault = caller.request.fault
    fault(caller.state, lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH, lib.PALW_CUDA_LLAMA_MMVQ_FAULT_ASSOCIATION_MISMATCH,
          actual)
    fault(caller.state, lib.PALW_CUDA_TRACE_INVALID_ARGUMENT, lib.PALW_CUDA_LLAMA_MMVQ_FAULT_NONE, ffi.NULL)
    kept = [(status_name(lib, f.status), fault_name(lib, f.fault), f.with_association, f.operation_token)
            for f in caller.faults]
    token = int(ffi.cast("uintptr_t", actual.operation_token))
    assert kept == [("IDENTITY_MISMATCH", "ASSOCIATION_MISMATCH", True, token),
                    ("INVALID_ARGUMENT", "NONE", False, None)]
    assert caller.callback_errors == []
    for _ in range(int(caller.state.fault_capacity)):
        fault(caller.state, lib.PALW_CUDA_TRACE_INVALID_ARGUMENT, lib.PALW_CUDA_LLAMA_MMVQ_FAULT_NONE, ffi.NULL)
    assert len(caller.faults) == caller.state.fault_capacity
    assert caller.callback_errors == [f"2 fault callbacks beyond the caller's {caller.state.fault_capacity} "
                                      "were counted but not kept"]


def test_change_runs_once_at_its_index_and_its_errors_are_kept(decoded, palw_runtime, palw_model, palw_session):
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    calls = []

    def change(lib_, semantic):
        calls.append(int(semantic.base.base.kernel_sequence))
        semantic.base.base.decode_step = 7

    caller = _caller(palw_runtime, palw_model, palw_session, decoded.candidates, change=(2, change))
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    for actual in decoded.associations[:4]:
        assert caller.approve(actual, launch) == lib.PALW_CUDA_TRACE_OK
    assert calls == [2]
    before, after = caller.changed
    assert before != after and caller.callback_errors == []

    def broken(lib_, semantic):
        raise RuntimeError("a broken change")

    failing = _caller(palw_runtime, palw_model, palw_session, decoded.candidates, change=(0, broken))
    assert status_name(lib, failing.approve(decoded.associations[0], launch)) == "INVALID_ARGUMENT"
    assert failing.error == CallbackError.INVALID_ARGUMENT and failing.approved == 0
    assert len(failing.callback_errors) == 1 and "a broken change" in failing.callback_errors[0]


def test_an_attention_launch_of_another_geometry_is_refused(decoded, palw_runtime, palw_model, palw_session):
    """same_mixed_candidate: the attention geometry is the discovered one (the smoke writes
    Qwen3-8B's literals); an association with one more key-value cell is another launch."""
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    index = next(i for i, c in enumerate(decoded.candidates) if c.attention_stage != 0)
    caller = _caller(palw_runtime, palw_model, palw_session, decoded.candidates)
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    for actual in decoded.associations[:index]:
        assert caller.approve(actual, launch) == lib.PALW_CUDA_TRACE_OK
    actual = decoded.associations[index]
    actual.physical_key_value_tokens += 1
    try:
        assert status_name(lib, caller.approve(actual, launch)) == "IDENTITY_MISMATCH"
    finally:
        actual.physical_key_value_tokens -= 1
    assert caller.error == CallbackError.ASSOCIATION_MISMATCH and caller.approved == index


def test_v1_refusals_and_the_refused_launch(decoded, palw_runtime, palw_model, palw_session):
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    mmvq = [_v1_association(palw_runtime, a) for a in decoded.associations if a.attention_stage == 0][:3]

    rejecting = _caller(palw_runtime, palw_model, palw_session, decoded.mmvq, version=1, reject_index=2)
    for actual in mmvq[:2]:
        assert rejecting.approve(actual, launch) == lib.PALW_CUDA_TRACE_OK
    assert status_name(lib, rejecting.approve(mmvq[2], launch)) == "IDENTITY_MISMATCH"
    refused = rejecting.refused
    assert refused["weight_data"] == int(ffi.cast("uintptr_t", mmvq[2].weight_data))
    assert (refused["node"], refused["weight"]) == (decoded.mmvq[2].node, decoded.mmvq[2].weight)

    wrong_info = _caller(palw_runtime, palw_model, palw_session, decoded.mmvq, version=1)
    quantization = mmvq[0].quantization
    info = wrong_info.infos.mmvq(lib, quantization)
    info.quantization = ({lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K, lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K}
                         - {quantization}).pop()  # the kernel info of the other class
    assert status_name(lib, wrong_info.approve(mmvq[0], launch)) == "IDENTITY_MISMATCH"
    assert wrong_info.error == CallbackError.INVALID_ARGUMENT

    other_version = _caller(palw_runtime, palw_model, palw_session, decoded.candidates)  # a V2 state
    v1_approve = rejecting.request.approve
    assert status_name(lib, v1_approve(other_version.state, mmvq[0], launch)) == "INVALID_ARGUMENT"
    assert other_version.approved == 0


def test_a_notification_beyond_the_approvals_is_a_mismatch(decoded, palw_runtime, palw_model, palw_session):
    ffi = palw_runtime.ffi
    caller = _caller(palw_runtime, palw_model, palw_session, decoded.candidates)
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    caller.request.launch_accepted(caller.state, decoded.associations[0], launch)  # nothing approved yet
    assert caller.launch_notifications == 0 and caller.error == CallbackError.LAUNCH_NOTIFICATION_MISMATCH
    assert caller.associations == [] and caller.operation_tokens == [] and caller.refused is None


def test_a_caller_without_every_digest_is_refused_at_once(decoded, palw_runtime):
    with pytest.raises(ValueError, match="missing or malformed: \\['attention_pv'\\]"):
        TraceCaller(palw_runtime, decoded.candidates, digests={k: v for k, v in DIGESTS.items() if k != "attention_pv"})
