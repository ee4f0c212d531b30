"""Claim: the trace is pinned to one compute capability (PALW_CUDA_PINNED_CC, the seed's 890).

On a device of the pinned cc, kernel info reports that architecture and the trace commits.
On any other device the positive run fails closed at the first launch: the first association
is approved, the MMVQ dispatch hook refuses it (INVALID_ARGUMENT / UNSUPPORTED_DISPATCH),
nothing is accepted or committed.
"""

import pytest

from pytest_palw.models.launch_table import V2_COUNT
from pytest_palw.runtime.names import fault_name, status_name
from pytest_palw.runtime.run import run_trace

pytestmark = pytest.mark.palw_gpu


def test_device_pin(palw_session, palw_context, palw_caller, palw_token, palw_runtime):
    lib = palw_runtime.lib
    pinned = palw_session.build.pinned_cc or 890
    device = palw_session.device
    assert device is not None, "nvidia-smi reported no device for a CUDA runtime"
    caller = palw_caller(version=2)
    run = run_trace(palw_context(), caller, palw_token)
    palw_session.notes["device_pin"] = {"device_cc": device.cc, "pinned_cc": pinned}
    if device.cc == pinned:
        assert status_name(lib, run.finalize_status) == "OK"
        assert run.record_count == V2_COUNT
        assert caller.infos.q4.sm_arch * 10 == pinned
        return
    assert status_name(lib, run.attach_status) == "OK"
    assert run.decode_status != 0
    assert caller.approved == 1, "the first launch was not the one refused"
    assert run.accepted == 0 and run.before_finalize.count == 0 and run.before_finalize.committed == 0
    faults = [(status_name(lib, f.status), fault_name(lib, f.fault)) for f in caller.faults]
    assert faults == [("INVALID_ARGUMENT", "UNSUPPORTED_DISPATCH")]
    assert run.destroy_status == lib.PALW_CUDA_TRACE_OK
