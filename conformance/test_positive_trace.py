"""Claim: a positive trace commits 361 (V2) / 253 (V1) records that verify one by one, encode
canonically (C codec = Python encoder), fingerprint identically over runs and equal to the seed
smoke tool's, and whose device sketches equal host sketches of the same outputs.

Each record is held against what the runtime under test did not write (never the caller's own
template): the launch table's launch at its index (position, class, layer, stage, shapes), the
model file's tensors (the weight's shape; the approved association's weight has the file's type
and shape and is the graph tensor of the weight's file name),
the model file's attention geometry, and the seed patch's kernel identities
(fixtures/oracles/kernel_identities.py). Only an attention record's grid and block are checked against the
kernel's own description of its launch (kernel info): the table holds no launch dimensions.
"""

import json
import subprocess

import pytest

from pytest_palw.fixtures.models.profiles import PROFILES
from pytest_palw.fixtures.oracles.kernel_identities import seed_identities
from pytest_palw.fixtures.oracles.launch_table import V1_COUNT, V2_COUNT
from pytest_palw.fixtures.oracles.verify import STAGE_OF, dimension_mismatches, table_mismatches
from pytest_palw.marks import each_launch
from pytest_palw.runtime.codec import ENCODED_SIZE
from pytest_palw.runtime.names import status_name
from pytest_palw.runtime.run import run_trace

pytestmark = pytest.mark.palw_pinned


def _positive_statuses(run, lib, count):
    return {
        "attach": status_name(lib, run.attach_status), "kernel_info": status_name(lib, run.info_status),
        "decode": run.decode_status, "unbind": status_name(lib, run.unbind_status), "accepted": run.accepted,
        "before_finalize": (run.before_finalize.count, run.before_finalize.committed,
                            run.before_finalize.faults, run.before_finalize.poisoned),
        "finalize": status_name(lib, run.finalize_status),
        "after_finalize": (run.after_finalize.count, run.after_finalize.committed,
                           run.after_finalize.faults, run.after_finalize.poisoned),
        "destroy": status_name(lib, run.destroy_status),
    }


def _expected_statuses(count):
    return {"attach": "OK", "kernel_info": "OK", "decode": 0, "unbind": "OK", "accepted": count,
            "before_finalize": (count, 0, 0, 0), "finalize": "OK", "after_finalize": (count, count, 0, 0),
            "destroy": "OK"}


def test_v2_statuses(palw_trace, lib):
    assert _positive_statuses(palw_trace, lib, V2_COUNT) == _expected_statuses(V2_COUNT)


def test_v1_statuses(palw_trace_v1, lib):
    assert _positive_statuses(palw_trace_v1, lib, V1_COUNT) == _expected_statuses(V1_COUNT)


@pytest.mark.parametrize("stream", ["palw_trace", "palw_trace_v1"])
def test_callbacks(stream, request):
    run = request.getfixturevalue(stream)
    caller, count = run.caller, (V2_COUNT if stream == "palw_trace" else V1_COUNT)
    assert caller.callback_errors == []
    assert (caller.approved, caller.launch_notifications, len(caller.faults), int(caller.error)) == (count, count, 0, 0)


def _record_problems(run, index, launch, palw_session, palw_discovery, ffi, lib) -> list[str]:
    assert index < run.record_count, f"{run.record_count} records committed"
    record, model = run.records[index], palw_session.model_profile
    weight = None
    if launch.weight is not None:
        assert launch.weight in model.weight_shapes, f"the model file has no tensor {launch.weight}"
        weight = (model.weight_types[launch.weight], model.weight_shapes[launch.weight])
    problems = table_mismatches(ffi, lib, record, launch, model.attention, seed_identities()[launch.klass],
                                weight, run.caller.associations[index],
                                palw_discovery.loaded_weights.get(launch.weight))
    if launch.klass.startswith("attention"):
        problems += dimension_mismatches(record, run.caller.infos.attention(STAGE_OF[launch.klass]))
    return problems


@each_launch("record V2")
def test_v2_record(index, palw_trace, launch_table, palw_session, palw_discovery, ffi, lib):
    assert _record_problems(palw_trace, index, launch_table[index], palw_session, palw_discovery, ffi, lib) == []


@each_launch("record V1", stream="v1")
def test_v1_record(index, palw_trace_v1, mmvq_table, palw_session, palw_discovery, ffi, lib):
    assert _record_problems(palw_trace_v1, index, mmvq_table[index], palw_session, palw_discovery, ffi, lib) == []


@pytest.mark.parametrize("stream", ["palw_trace", "palw_trace_v1"])
def test_c_codec_equals_python_encoder(stream, request):
    run = request.getfixturevalue(stream)
    assert run.c_stream is not None, "the runtime's backend API offered no encode_record"
    assert len(run.python_stream) == run.record_count * ENCODED_SIZE
    assert run.c_stream == run.python_stream


def test_fingerprint_stable_over_three_runs(palw_trace, palw_model, palw_caller, palw_token, palw_context,
                                            palw_session):
    fingerprints = [palw_trace.fingerprint]
    for _ in range(2):
        fingerprints.append(run_trace(palw_context(), palw_caller(version=2), palw_token).fingerprint)
    palw_session.notes["fingerprint_runs"] = fingerprints
    assert len(set(fingerprints)) == 1, fingerprints


@pytest.fixture(scope="session")
def palw_reference(palw_model, palw_token):
    from pytest_palw.runtime.reference import reference_run

    return reference_run(palw_model, palw_token)


@each_launch("device sketch")
def test_device_sketch_equals_host_sketch(index, palw_trace, palw_reference):
    """Reference: the untraced decode with every node its own scheduler split (pytest_palw.runtime.reference)."""
    assert palw_reference.decode_status == 0 and len(palw_reference.tiles) == V2_COUNT
    lanes = _host_lanes(palw_reference)[index]
    device = list(palw_trace.records[index].base.base.sketch)
    assert device == lanes


def _host_lanes(reference):
    if not hasattr(reference, "_lanes"):
        reference._lanes = reference.sketches()
    return reference._lanes


def test_fingerprint_equals_seed_smoke(palw_trace, palw_session, palw_token):
    smoke = palw_session.build.tools.get("smoke")
    if not smoke:
        pytest.fail(palw_session.build.tool_absent("smoke"))
    profile, full = palw_session.model_profile, PROFILES["full"]
    if (profile.n_embd, profile.n_vocab) != (full.n_embd, full.n_vocab):
        pytest.skip("the seed smoke tool accepts only the full Qwen3-8B shapes: run with "
                    "--palw-model=profile:full (or a real Qwen3-8B Q4_K_M GGUF)")
    digest = palw_session.kernel_digests["q4_k"].hex()
    args = [smoke, "--model", str(palw_session.model.path), "--mixed"] + [
        item for name in ("q4", "q6", "qk", "softmax", "pv") for item in (f"--{name}-cubin-sha256", digest)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    palw_session.fingerprints["seed_smoke_v2"] = report["canonical_record_fnv1a64"]
    assert report["status"] == "ok" and report["token"] == palw_token
    assert report["canonical_record_fnv1a64"] == palw_trace.fingerprint
