"""Claim: the trace fails closed at every reject index, V2 0..360 and V1 0..252 (614 cases).

Each case is the smoke's --reject-index expectation: decode fails, unbind fails,
approved = accepted = producer count = launch notifications = k, committed 0,
exactly one fault (IDENTITY_MISMATCH / ASSOCIATION_MISMATCH), producer faults 0,
not poisoned, destroy OK, the caller's request untouched; and the launch the runtime
refused, as the runtime itself described it to approve (its class from the association's
quantization or attention stage, its layer and weight or attention node), is the launch
table's launch at that index, and the one fault names that same operation.
"""

from typing import NamedTuple

import pytest

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.marks import each_launch
from pytest_palw.runtime.caller import refused_mismatches
from pytest_palw.runtime.library import PINNED_POLICY
from pytest_palw.runtime.names import fault_name, status_name
from pytest_palw.runtime.run import run_trace

pytestmark = pytest.mark.palw_pinned


def _request_bytes(ffi, caller):
    return bytes(ffi.buffer(caller.request))


def _check_rejection(run, caller, index, lib, before, after):
    assert run.attach_status == lib.PALW_CUDA_TRACE_OK, status_name(lib, run.attach_status)
    assert run.info_status == lib.PALW_CUDA_TRACE_OK, status_name(lib, run.info_status)
    assert caller.callback_errors == []
    assert caller.rejection_triggered, "the approve callback never reached the reject index"
    assert run.decode_status != 0, "decode succeeded although a launch was rejected"
    assert run.unbind_status != lib.PALW_CUDA_TRACE_OK
    diagnostics = run.before_finalize
    assert diagnostics.status == lib.PALW_CUDA_TRACE_OK
    counts = {"approved": caller.approved, "accepted": run.accepted, "producer_count": diagnostics.count,
              "launch_notifications": caller.launch_notifications}
    assert counts == dict.fromkeys(counts, index)
    assert diagnostics.committed == 0
    faults = [(status_name(lib, f.status), fault_name(lib, f.fault)) for f in caller.faults]
    assert faults == [("IDENTITY_MISMATCH", "ASSOCIATION_MISMATCH")]
    assert diagnostics.faults == 0 and diagnostics.poisoned == 0
    assert run.destroy_status == lib.PALW_CUDA_TRACE_OK
    assert after == before, "the caller's request was modified"


class Rejected(NamedTuple):
    caller: object  # the TraceCaller that refused
    run: object  # its TraceRun
    policy: dict  # the fresh context's policy as the runtime reports it
    before: bytes  # the caller's request before the trace
    after: bytes  # and after it


def _rejected(model, make_caller, token, ffi, version, index) -> Rejected:
    """The evidence of one reject case: a caller that refuses launch ``index`` of trace ``version``,
    a fresh context, the trace, the context freed at once (its GPU slot goes back before this case's
    checks). The reject cases' lookahead job (pytest_palw/lookahead.py): it may run on another
    thread of this process while the case before runs; the case's body judges what it returns."""
    caller = make_caller(version=version, reject_index=index)
    before = _request_bytes(ffi, caller)
    context = model.context()
    try:
        policy = context.policy()
        run = run_trace(context, caller, token)
    finally:
        context.free()
    return Rejected(caller, run, policy, before, _request_bytes(ffi, caller))


VERSIONS = {"test_reject_v2": 2, "test_reject_v1": 1}


def _case_key(item) -> tuple[int, int] | None:
    """(version, index) of a reject case, None for any other case."""
    version = VERSIONS.get(getattr(item, "originalname", ""))
    return None if version is None else (version, item.callspec.params["index"])


@pytest.fixture
def rejected(request, palw_session, palw_model, palw_caller, palw_token, palw_runtime):
    """This case's evidence (``_rejected``), asked for in its body (a runtime error there fails the case):
    run ahead on --palw-lookahead threads of this process, or then."""
    return lambda: palw_session.lookahead.take(request.node, _case_key, _rejected, palw_model, palw_caller,
                                               palw_token, palw_runtime.ffi)


def _reject(index, evidence, palw_runtime, launch, loaded_weights):
    """A trace that refused launch ``index``, checked as the smoke checks --reject-index, and
    the refused launch as the runtime described it against the launch table's ``launch``: its
    class, layer and operation, its shape and, for MMVQ, the weight it reads (the graph tensor of
    the weight's file name)."""
    lib = palw_runtime.lib
    rejected: Rejected = evidence()
    caller = rejected.caller
    assert rejected.policy == PINNED_POLICY, f"runtime did not honour the pinned context policy: {rejected.policy}"
    _check_rejection(rejected.run, caller, index, lib, rejected.before, rejected.after)
    assert caller.refused is not None, "approve never saw the association it refused"
    assert refused_mismatches(lib, caller.refused, launch, loaded_weights) == []
    fault = caller.faults[0]
    assert fault.with_association, "the fault for the refused launch carries no association"
    assert fault.operation_token == caller.refused["operation_token"], \
        "the fault names another operation than the one approve refused"


@each_launch("reject V2")
def test_reject_v2(index, rejected, palw_runtime, launch_table, palw_discovery):
    _reject(index, rejected, palw_runtime, launch_table[index], palw_discovery.loaded_weights)


@each_launch("reject V1", stream="v1")
def test_reject_v1(index, rejected, palw_runtime, mmvq_table, palw_discovery):
    _reject(index, rejected, palw_runtime, mmvq_table[index], palw_discovery.loaded_weights)


@pytest.mark.parametrize("index", [0, V2_COUNT // 2, V2_COUNT - 1])  # the first, middle and last launch
def test_fresh_context_traces_after_rejection(index, palw_context, palw_caller, palw_token, palw_runtime,
                                              palw_trace):
    lib = palw_runtime.lib
    rejected = run_trace(palw_context(), palw_caller(version=2, reject_index=index), palw_token)
    assert rejected.decode_status != 0
    positive = run_trace(palw_context(), palw_caller(version=2), palw_token)
    assert positive.finalize_status == lib.PALW_CUDA_TRACE_OK, status_name(lib, positive.finalize_status)
    assert positive.record_count == V2_COUNT
    assert positive.fingerprint == palw_trace.fingerprint
