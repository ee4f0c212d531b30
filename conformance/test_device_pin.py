"""Claim: the trace is pinned to one compute capability (PALW_CUDA_PINNED_CC, the seed's 890).

On a device of the pinned cc, kernel info reports that architecture and the trace commits.
On any other device the positive run fails closed at the first launch: the first association
is approved, the MMVQ dispatch hook refuses it (INVALID_ARGUMENT / UNSUPPORTED_DISPATCH),
nothing is accepted or committed.

A certifying run happens on a device of the pinned cc, so the refusing branch is run in a child
process whose CUDA runtime reports another cc (pytest_palw.probes.pin_probe: a preloaded shim of
cudaGetDeviceProperties, nothing of the runtime changed), beside a control child whose shim
reports the device's true cc and which commits the same records as this process.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.probes.pin_probe import run_child
from pytest_palw.runtime.names import fault_name, status_name
from pytest_palw.runtime.run import run_trace

pytestmark = pytest.mark.palw_gpu

FAILED_CLOSED = {"attach": "OK", "kernel_info": "OK", "approved": 1, "accepted": 0, "count": 0, "committed": 0,
                 "records": 0, "faults": [["INVALID_ARGUMENT", "UNSUPPORTED_DISPATCH"]], "destroy": "OK"}


def _pinned(palw_session) -> int | None:
    """The manifest's pin, or a brought runtime's as the pin probe observed it (None: not observed)."""
    return palw_session.pinned_cc


def test_device_pin(palw_session, palw_context, palw_caller, palw_token, palw_runtime):
    lib = palw_runtime.lib
    pinned = _pinned(palw_session)
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


def test_a_device_of_another_cc_fails_closed(palw_session, palw_token, palw_trace):
    """The refusing branch on this device: a child told another cc fails closed at the first
    launch; the control child, told the device's own cc, commits this process's records."""
    pinned, device = _pinned(palw_session), palw_session.device
    assert device is not None, "nvidia-smi reported no device for a CUDA runtime"
    # A cc below the device's (ggml then picks no feature the device lacks), and not the pinned one.
    other = next(cc for cc in range(device.cc - 10, 0, -10) if cc != pinned)
    arguments = (palw_session.build.location, palw_session.model.path, palw_token,
                 palw_session.kernel_digest.digest)
    with ThreadPoolExecutor(2) as pool:
        refused, control = pool.map(lambda cc: run_child(*arguments, reported_cc=cc), (other, device.cc))
    palw_session.notes["device_pin_probe"] = {"pinned_cc": pinned, "refused": refused, "control": control}
    assert refused["sm_arch"] * 10 == other, f"the shim did not reach the runtime: kernel info says {refused}"
    assert refused["decode"] != 0, "decode succeeded on a device of another cc"
    assert {key: refused[key] for key in FAILED_CLOSED} == FAILED_CLOSED
    assert refused["finalize"] not in (None, "OK"), "finalize committed a trace that failed"
    assert refused["discovered"] == control["discovered"] == V2_COUNT
    assert control["sm_arch"] * 10 == device.cc
    if device.cc != pinned:
        pytest.skip(f"the control needs a device of the pinned cc {pinned} (this one is {device.cc}): the refusal "
                    "above is judged; run on a device of the pinned cc for the control")
    assert (control["finalize"], control["records"]) == ("OK", V2_COUNT), control
    assert control["fingerprint"] == palw_trace.fingerprint
