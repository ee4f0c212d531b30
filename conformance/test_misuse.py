"""Claim: attach refuses each misuse alone with INVALID_ARGUMENT, exactly one INVALID_REQUEST
fault without an association and no producer left behind, while the same request otherwise valid is
accepted; NULL, repeated and out-of-order calls return the documented status.

Any runtime (CPU tier): attach needs the one backend that exposes the PALW procs. Without it (every
CPU runtime) a V1 or V2 request valid in every other respect (header validator, capacity, pinned
and fresh context, Qwen3-8B topology) is refused as above and the caller's request is untouched;
with it (a CUDA runtime) the same request is accepted. A NULL request or context is refused with
INVALID_ARGUMENT, and every lifecycle call on a context without a trace returns INVALID_ARGUMENT.

GPU tier (only a CUDA runtime accepts a valid request, so only there can a refusal be pinned on one
misuse): each malformed request field, each unsupported context setting, each wrong model shape,
an evaluated context and an imported state is refused as above, and in the same case the unbroken
request is accepted on a clean context (test_valid_request_control alone); a second attach is
refused; state import while a trace exists is refused; 1000 attach/destroy cycles keep GPU memory
flat. Pinned tier: lifecycle calls out of order return the documented status.
"""

import ctypes
import os
import subprocess

import pytest

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.preflight.model_check import mismatches
from pytest_palw.runtime.caller import TraceCaller
from pytest_palw.runtime.discovery import Discovery
from pytest_palw.runtime.names import fault_name, status_name

REQUEST_FIELDS = ["abi_version", "struct_size", "expected_count", "capacity", "producer_context",
                  "null_approve", "null_fault"]
CONTEXT_FIELDS = {"cb_eval": None, "flash_attention": {"flash_attn_type": 1},
                  "n_batch": {"n_batch": 2}, "n_ubatch": {"n_batch": 2, "n_ubatch": 2},
                  "n_seq_max": {"n_seq_max": 2, "n_outputs_max": 2}}  # llama needs outputs >= seqs
MODEL_FIELDS = ["wrong-arch", "layers-35", "heads-16", "head-dim-64"]


class _Quiet(Discovery):
    """An eval callback that observes nothing (cb_eval merely set)."""

    def on_eval(self, tensor, ask):
        return False


def _caller(palw_runtime, palw_discovery, palw_session, version):
    candidates = palw_discovery.candidates if version == 2 else palw_discovery.mmvq
    return TraceCaller(palw_runtime, candidates, version=version, digests=palw_session.kernel_digests)


def _attach(lib, context, caller, capacity=None, request=None):
    attach = lib.llama_palw_cuda_trace_attach_v2 if caller.version == 2 else lib.llama_palw_cuda_trace_attach
    request = caller.request if request is None else request
    count = caller.request.expected_launch_count
    return attach(context.cptr, count if capacity is None else capacity, request)


def _assert_refused(lib, ffi, context, caller, status, faults_expected=1):
    """attach's refusal: INVALID_ARGUMENT, one INVALID_REQUEST fault without association, no producer."""
    assert status_name(lib, status) == "INVALID_ARGUMENT"
    faults = [(status_name(lib, f.status), fault_name(lib, f.fault), f.with_association) for f in caller.faults]
    assert faults == [("INVALID_ARGUMENT", "INVALID_REQUEST", False)] * faults_expected
    outs = ffi.new("uint64_t[2]"), ffi.new("uint32_t *"), ffi.new("int *")
    no_producer = lib.llama_palw_cuda_trace_diagnostics(context.cptr, outs[0], outs[0] + 1, outs[1], outs[2])
    assert status_name(lib, no_producer) == "INVALID_ARGUMENT", "a refused attach left a producer behind"
    assert status_name(lib, lib.llama_palw_cuda_trace_destroy(context.cptr)) == "INVALID_ARGUMENT"


def _assert_accepted(lib, ffi, context, caller, status):
    """attach's acceptance: OK, no fault, the request untouched, an empty producer; then a clean destroy."""
    assert status_name(lib, status) == "OK" and caller.faults == [], (
        f"a valid request was refused: {status_name(lib, status)}, faults {caller.faults}")
    outs = ffi.new("uint64_t[2]"), ffi.new("uint32_t *"), ffi.new("int *")
    status = lib.llama_palw_cuda_trace_diagnostics(context.cptr, outs[0], outs[0] + 1, outs[1], outs[2])
    assert (status_name(lib, status), outs[0][0], outs[0][1], outs[1][0], outs[2][0]) == ("OK", 0, 0, 0, 0)
    out = ffi.new("uint64_t *")
    assert status_name(lib, lib.llama_palw_cuda_trace_unbind(context.cptr, out)) != "OK"  # nothing ran
    assert status_name(lib, lib.llama_palw_cuda_trace_destroy(context.cptr)) == "OK"


def _control(version, palw_runtime, palw_discovery, palw_session, context):
    """The same request, unbroken, on ``context``: accepted (so the case's one change caused its refusal)."""
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    caller = _caller(palw_runtime, palw_discovery, palw_session, version)
    before = bytes(ffi.buffer(caller.request))
    status = _attach(lib, context, caller)
    assert bytes(ffi.buffer(caller.request)) == before, "attach modified the caller's request"
    _assert_accepted(lib, ffi, context, caller, status)


# -- any runtime (CPU tier) -----------------------------------------------------------------------

@pytest.mark.palw_cpu
@pytest.mark.parametrize("version", [2, 1])
def test_attach_requires_a_cuda_trace_backend(version, palw_runtime, palw_discovery, palw_session, palw_context):
    """attach finds the one backend exposing the PALW procs (llama-context.cpp: ``candidate_count
    != 1`` -> ``fail_unbound(INVALID_ARGUMENT)``). Every other condition of acceptance holds here,
    so on a runtime without such a backend this refusal is the backend's; with one, acceptance."""
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    caller = _caller(palw_runtime, palw_discovery, palw_session, version)
    request = caller.request
    owned = ffi.new(f"{ffi.typeof(request).item.cname} *", request[0])  # attach's owned copy
    owned.producer_context = ffi.cast("palw_cuda_producer_trace_context_v3 *", 0x1000)
    compatible = (lib.palw_cuda_llama_trace_request_is_compatible_v2 if version == 2
                  else lib.palw_cuda_llama_mmvq_request_is_compatible_v1)
    assert compatible(owned) and request.producer_context == ffi.NULL, "the request itself is malformed"
    assert mismatches(palw_session.model_profile) == [], "the model is not the pinned Qwen3-8B topology"
    context = palw_context()  # the pinned policy (verified), never evaluated, no state imported
    before = bytes(ffi.buffer(request))
    status = _attach(lib, context, caller)
    assert bytes(ffi.buffer(request)) == before, "attach modified the caller's request"
    if palw_runtime.has_cuda_trace:
        _assert_accepted(lib, ffi, context, caller, status)
        return
    _assert_refused(lib, ffi, context, caller, status)


@pytest.mark.palw_cpu
@pytest.mark.parametrize("version", [2, 1])
def test_null_request(version, palw_runtime, palw_context):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    attach = lib.llama_palw_cuda_trace_attach_v2 if version == 2 else lib.llama_palw_cuda_trace_attach
    context = palw_context()
    assert status_name(lib, attach(context.cptr, V2_COUNT, ffi.NULL)) == "INVALID_ARGUMENT"
    assert status_name(lib, attach(ffi.NULL, V2_COUNT, ffi.NULL)) == "INVALID_ARGUMENT"


@pytest.mark.palw_cpu
def test_calls_without_a_trace(palw_runtime, palw_context):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    context = palw_context()
    out = ffi.new("uint64_t *")
    records = ffi.new("palw_cuda_trace_record_v3[1]")
    info = ffi.new("palw_cuda_llama_mmvq_kernel_info_v1 *")
    attention = ffi.new("palw_cuda_llama_attention_kernel_info_v1 *")
    capture = ffi.new("palw_cuda_producer_grouped_capture_info_v3 *")
    association = ffi.new("palw_cuda_llama_trace_association_v2 *")
    outs = ffi.new("uint64_t[2]"), ffi.new("uint32_t *"), ffi.new("int *")
    for target in (context.cptr, ffi.NULL):
        statuses = {
            "unbind": lib.llama_palw_cuda_trace_unbind(target, out),
            "finalize": lib.llama_palw_cuda_trace_finalize(target, records, 1),
            "destroy": lib.llama_palw_cuda_trace_destroy(target),
            "diagnostics": lib.llama_palw_cuda_trace_diagnostics(target, outs[0], outs[0] + 1, outs[1], outs[2]),
            "kernel_info": lib.llama_palw_cuda_trace_kernel_info(target, lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K, info),
            "attention_kernel_info": lib.llama_palw_cuda_trace_attention_kernel_info(target, association, attention),
            "grouped_capture_info": lib.llama_palw_cuda_trace_grouped_capture_info(target, capture),
        }
        assert {k: status_name(lib, v) for k, v in statuses.items()} == dict.fromkeys(statuses, "INVALID_ARGUMENT")


# -- the refusal of each misuse alone (GPU tier: a CUDA runtime accepts the valid request) ----------

@pytest.mark.palw_gpu
@pytest.mark.parametrize("version", [2, 1])
def test_valid_request_control(version, palw_runtime, palw_discovery, palw_session, palw_context):
    """The control for the refusals: a valid request on a clean pinned context is accepted."""
    _control(version, palw_runtime, palw_discovery, palw_session, palw_context())


@pytest.mark.palw_gpu
@pytest.mark.parametrize("version", [2, 1])
@pytest.mark.parametrize("field", REQUEST_FIELDS)
def test_invalid_request_field(field, version, palw_runtime, palw_discovery, palw_session, palw_context):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    caller = _caller(palw_runtime, palw_discovery, palw_session, version)
    request, capacity, faults_expected = caller.request, None, 1
    if field == "abi_version":
        request.abi_version = 99
    elif field == "struct_size":
        request.struct_size -= 8
    elif field == "expected_count":
        request.expected_launch_count = V2_COUNT - 1 if version == 2 else 0
    elif field == "capacity":
        capacity = request.expected_launch_count - 1
    elif field == "producer_context":
        request.producer_context = ffi.cast("palw_cuda_producer_trace_context_v3 *", 0x1000)
    elif field == "null_approve":
        request.approve = ffi.NULL
    elif field == "null_fault":
        request.fault = ffi.NULL
        faults_expected = 0  # nothing to call back
    context = palw_context()
    _assert_refused(lib, ffi, context, caller, _attach(lib, context, caller, capacity), faults_expected)
    # The refusal left the context as it was: the unbroken request is accepted on it.
    _control(version, palw_runtime, palw_discovery, palw_session, context)


@pytest.mark.palw_gpu
@pytest.mark.parametrize("version", [2, 1])
@pytest.mark.parametrize("field", sorted(CONTEXT_FIELDS))
def test_invalid_context_policy(field, version, palw_runtime, palw_discovery, palw_session, palw_context):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    caller = _caller(palw_runtime, palw_discovery, palw_session, version)
    if field == "cb_eval":
        context = palw_context(eval_owner=_Quiet(runtime=palw_runtime), verify=False)
    else:
        context = palw_context(verify=False, **CONTEXT_FIELDS[field])
    _assert_refused(lib, ffi, context, caller, _attach(lib, context, caller))
    _control(version, palw_runtime, palw_discovery, palw_session, palw_context())


@pytest.mark.palw_gpu
@pytest.mark.parametrize("fixture", MODEL_FIELDS)
def test_wrong_model_profile(fixture, palw_runtime, palw_discovery, palw_session, palw_context):
    from pytest_palw.fixtures.models.catalog import ensure_negative

    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    model = palw_runtime.load_model(ensure_negative(fixture))
    try:
        caller = _caller(palw_runtime, palw_discovery, palw_session, 2)
        with model.context() as context:
            _assert_refused(lib, ffi, context, caller, _attach(lib, context, caller))
    finally:
        model.free()
    _control(2, palw_runtime, palw_discovery, palw_session, palw_context())


@pytest.mark.palw_gpu
@pytest.mark.parametrize("version", [2, 1])
def test_context_already_evaluated(version, palw_runtime, palw_discovery, palw_session, palw_context, palw_token):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    caller = _caller(palw_runtime, palw_discovery, palw_session, version)
    context = palw_context()
    assert context.decode(palw_token) == 0
    _assert_refused(lib, ffi, context, caller, _attach(lib, context, caller))
    _control(version, palw_runtime, palw_discovery, palw_session, palw_context())


@pytest.mark.palw_gpu
def test_state_imported(palw_runtime, palw_discovery, palw_session, palw_context, palw_token):
    lib, ffi, llama = palw_runtime.lib, palw_runtime.ffi, palw_runtime.llama
    donor = palw_context()
    assert donor.decode(palw_token) == 0
    size = llama.llama_state_get_size(donor.pointer)
    state = (ctypes.c_uint8 * size)()
    assert llama.llama_state_get_data(donor.pointer, state, size) == size
    context = palw_context()
    assert llama.llama_state_set_data(context.pointer, state, size) == size
    caller = _caller(palw_runtime, palw_discovery, palw_session, 2)
    _assert_refused(lib, ffi, context, caller, _attach(lib, context, caller))
    _control(2, palw_runtime, palw_discovery, palw_session, palw_context())


# -- lifecycle with a live trace (GPU tier) ------------------------------------------------------

@pytest.fixture
def attached(palw_runtime, palw_discovery, palw_session, palw_context):
    lib = palw_runtime.lib
    caller = _caller(palw_runtime, palw_discovery, palw_session, 2)
    context = palw_context()
    assert status_name(lib, _attach(lib, context, caller)) == "OK"
    from pytest_palw.runtime.run import query_kernel_infos

    assert status_name(lib, query_kernel_infos(palw_runtime, context, caller)) == "OK"
    return context, caller


@pytest.mark.palw_gpu
def test_already_attached(attached, palw_runtime, palw_discovery, palw_session):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    context, _ = attached
    second = _caller(palw_runtime, palw_discovery, palw_session, 2)
    status = _attach(lib, context, second)
    assert status_name(lib, status) == "INVALID_ARGUMENT"
    assert [(status_name(lib, f.status), fault_name(lib, f.fault)) for f in second.faults] == [
        ("INVALID_ARGUMENT", "INVALID_REQUEST")]
    out = ffi.new("uint64_t *")
    lib.llama_palw_cuda_trace_unbind(context.cptr, out)
    assert status_name(lib, lib.llama_palw_cuda_trace_destroy(context.cptr)) == "OK"


@pytest.mark.palw_pinned
def test_lifecycle_out_of_order(attached, palw_runtime, palw_token):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    context, caller = attached
    records = ffi.new("palw_cuda_trace_record_v3[]", V2_COUNT)
    out = ffi.new("uint64_t *")
    steps = {"destroy_while_bound": lib.llama_palw_cuda_trace_destroy(context.cptr)}
    assert context.decode(palw_token) == 0
    steps["finalize_before_unbind"] = lib.llama_palw_cuda_trace_finalize(context.cptr, records, V2_COUNT)
    steps["unbind"] = lib.llama_palw_cuda_trace_unbind(context.cptr, out)
    steps["unbind_twice"] = lib.llama_palw_cuda_trace_unbind(context.cptr, out)
    steps["finalize"] = lib.llama_palw_cuda_trace_finalize(context.cptr, records, V2_COUNT)
    steps["finalize_twice"] = lib.llama_palw_cuda_trace_finalize(context.cptr, records, V2_COUNT)
    steps["destroy"] = lib.llama_palw_cuda_trace_destroy(context.cptr)
    steps["destroy_twice"] = lib.llama_palw_cuda_trace_destroy(context.cptr)
    assert {k: status_name(lib, v) for k, v in steps.items()} == {
        "destroy_while_bound": "PENDING", "finalize_before_unbind": "INVALID_ARGUMENT", "unbind": "OK",
        "unbind_twice": "INVALID_ARGUMENT", "finalize": "OK", "finalize_twice": "INVALID_ARGUMENT",
        "destroy": "OK", "destroy_twice": "INVALID_ARGUMENT"}
    assert caller.callback_errors == []


@pytest.mark.palw_gpu
def test_state_import_while_a_trace_exists(attached, palw_runtime, palw_context, palw_token):
    lib, ffi, llama = palw_runtime.lib, palw_runtime.ffi, palw_runtime.llama
    context, _ = attached
    donor = palw_context()
    assert donor.decode(palw_token) == 0
    size = llama.llama_state_get_size(donor.pointer)
    state = (ctypes.c_uint8 * size)()
    llama.llama_state_get_data(donor.pointer, state, size)
    assert llama.llama_state_set_data(context.pointer, state, size) == 0, "state import was accepted"
    out = ffi.new("uint64_t *")
    lib.llama_palw_cuda_trace_unbind(context.cptr, out)
    assert status_name(lib, lib.llama_palw_cuda_trace_destroy(context.cptr)) == "OK"


def _own_device_memory() -> int | None:
    """GPU memory this process holds (NVML through nvidia-smi, MiB resolution), or None when
    nvidia-smi cannot see this process (a container without the host's PID namespace).

    Device-wide free memory would not do: other xdist workers and tools allocate meanwhile (seen
    on the H200 at -n 8: 74 MiB "lost", at -n 12: 308 MiB "gained" over the same 1000 cycles)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return int(used.strip()) << 20
    return None


@pytest.mark.palw_gpu
def test_attach_destroy_cycles_keep_memory_flat(palw_runtime, palw_discovery, palw_session, palw_context, palw_token):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    context = palw_context()
    out = ffi.new("uint64_t *")

    def cycle():
        caller = _caller(palw_runtime, palw_discovery, palw_session, 2)
        assert _attach(lib, context, caller) == lib.PALW_CUDA_TRACE_OK
        lib.llama_palw_cuda_trace_unbind(context.cptr, out)
        assert lib.llama_palw_cuda_trace_destroy(context.cptr) == lib.PALW_CUDA_TRACE_OK

    for _ in range(10):  # warm the allocator
        cycle()
    before = _own_device_memory()
    if before is None:
        pytest.skip("nvidia-smi does not list this process's GPU memory (no host PID namespace?): "
                    "run where `nvidia-smi --query-compute-apps=pid,used_memory` shows it")
    for _ in range(1000):
        cycle()
    after = _own_device_memory()
    palw_session.notes["attach_destroy_1000_process_memory_delta_bytes"] = after - before
    assert after - before <= 2 << 20, f"this process holds {(after - before) / 2**20:.0f} MiB more after 1000 cycles"
