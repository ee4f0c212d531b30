"""Claim: the runtime's producer reports each fault of native/SPEC.md section 4 (capture out of
range, duplicate capture, missing capture, capture of another identity, capacity overflow) with the
documented status and fault bits, is poisoned for good, commits no record and writes no host record,
while refused calls are no faults; every context is destroyed with no CUDA error left.

In detail: each capture fault makes finalize fail with INCOMPLETE (IDENTITY_MISMATCH for the
identity fault) and exactly its bits (the wrong-identity element also counts as missing); a launch
past the capacity is refused with CAPACITY_EXCEEDED and CAPACITY_OVERFLOW at once; a poisoned
context refuses every later prepare, enqueue and finalize with POISONED and stays as it was. Calls
out of order, malformed or foreign (SEQUENCE_MISMATCH, INVALID_ARGUMENT, PENDING, INCOMPLETE,
IDENTITY_MISMATCH) set no bit, no poison, no count, and the context still commits a clean launch;
the same launches without a fault commit records equal to their templates with the host sketch.
GPU tier.

How: each case creates a fresh context through the backend API table the patch exports
(``palw_cuda_llama_mmvq_get_backend_api_v1`` of the CUDA registry, on a CUDA backend of the
caller's device), reads count, committed, faults and poisoned through it and destroys the
context through it. The table has no prepare, launch, enqueue or finalize: those are the producer
functions libggml-cuda exports (native/SPEC.md section 1), called on the legacy stream. A device
fault needs a kernel that captures wrongly; the runtime's one capturing kernel (mul_mat_vec_q) is
internal and the bridge checks it on the host, so the cases build the native self-test's toy
capture kernel (native/tests/toy_capture_kernel.cuh) against the device hook the runtime was built
with (digests checked against its manifest) with the CUDA toolkit's nvcc, once per runtime, and
launch it through the runtime's producer, as mul_mat_vec_q is launched (the harness:
pytest_palw.probes.fault_probe). No model is loaded.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_palw.probes.fault_probe import (
    DUPLICATE,
    EXACT,
    GROUPED_COLUMNS,
    HEADS,
    MISSING,
    OUT_OF_RANGE,
    OVERRUN,
    TOY_COLUMNS,
    TOY_ROWS,
    WRONG_IDENTITY,
    Bench,
    ToyArguments,
    fault_names,
    toy_dimensions,
)
from pytest_palw.runtime.sketch import sketch

pytestmark = pytest.mark.palw_gpu


@pytest.fixture(scope="module")
def bench(palw_runtime, palw_session):
    made = Bench(palw_runtime)
    try:
        made.open()
        palw_session.notes["producer_faults"] = made.producer  # the library whose producer the cases called
        yield made
    finally:
        made.close()


# -- the cases ------------------------------------------------------------------------------------

def test_clean_captures_are_committed(bench):
    """The control of every fault case: the same launches, capturing exactly, finalize OK."""
    ffi = bench.ffi
    context = bench.create(4)
    first, second = bench.capture_launch(0), bench.capture_launch(1)
    assert bench.run(context, first, EXACT) == "OK"
    assert bench.run(context, second, EXACT) == "OK"
    assert bench.state(context) == {"count": 2, "committed": 0, "faults": [], "poisoned": 0}
    records = bench.sentinel_records(4)
    assert bench.finalize(context, records, 1) == "INVALID_ARGUMENT", "finalize accepted a capacity below count"
    assert bench.finalize(context, records, 4) == "OK"
    assert bench.state(context) == {"count": 2, "committed": 2, "faults": [], "poisoned": 0}
    lanes = sketch(bench.values)
    assert bench.encoded(ffi.addressof(records, 0)) == bench.expected_record(first, lanes)
    assert bench.encoded(ffi.addressof(records, 1)) == bench.expected_record(second, lanes)
    assert bench.untouched(records, start=2), "finalize wrote past its committed records"
    bench.destroy_cleanly(context)


# mode of the second launch: (fault bits, finalize status), native/SPEC.md sections 3-4.
CAPTURE_FAULTS = {
    "out_of_range": (OUT_OF_RANGE, ("CAPTURE_OUT_OF_RANGE",), "INCOMPLETE"),
    "duplicate": (DUPLICATE, ("DUPLICATE_CAPTURE",), "INCOMPLETE"),
    "missing": (MISSING, ("MISSING_CAPTURE",), "INCOMPLETE"),
    # The wrong-identity element contributes nothing, so it is also missing.
    "identity_mismatch": (WRONG_IDENTITY, ("IDENTITY_MISMATCH", "MISSING_CAPTURE"), "IDENTITY_MISMATCH"),
}


@pytest.mark.parametrize("fault", list(CAPTURE_FAULTS))
def test_capture_fault_poisons(fault, bench):
    mode, bits, status = CAPTURE_FAULTS[fault]
    lib = bench.lib
    want = fault_names(lib, sum(getattr(lib, f"PALW_CUDA_PRODUCER_FAULT_{bit}") for bit in bits))
    context = bench.create(4)
    assert bench.run(context, bench.capture_launch(0), EXACT) == "OK"
    assert bench.run(context, bench.capture_launch(1), mode) == "OK"
    assert bench.state(context) == {"count": 2, "committed": 0, "faults": [], "poisoned": 0}, (
        "a device fault was known before finalize read the slots back")
    records = bench.sentinel_records(4)
    assert bench.finalize(context, records, 4) == status
    poisoned = {"count": 2, "committed": 0, "faults": want, "poisoned": 1}
    assert bench.state(context) == poisoned
    assert bench.untouched(records), "a failed finalize wrote host records"
    assert bench.finalize(context, records, 4) == "POISONED"
    assert bench.run(context, bench.capture_launch(2), EXACT) == "POISONED"
    assert bench.state(context) == poisoned, "a call refused by the poison changed the context"
    assert bench.untouched(records)
    bench.destroy_cleanly(context)


def test_grouped_collector_reports_an_element_already_claimed(bench):
    """The grouped (attention) path's capture faults. Its collector claims each element of the tile
    itself, exactly once, so out-of-range and missing captures cannot be provoked through the ABI;
    a duplicate can: a capture kernel that claims past its own bitmap region (the toy kernel's
    OVERRUN mode: the first bit of the next region) makes the next grouped enqueue find its first
    element claimed. The collector must fault DUPLICATE_CAPTURE without summing it (so finalize
    adds MISSING_CAPTURE), poison the context and write no host record; the same two launches
    without the overrun commit, the grouped record equal to its template with the host sketch."""
    ffi, lib = bench.ffi, bench.lib
    grouped_values = np.zeros((HEADS, GROUPED_COLUMNS), dtype=np.float32)
    control = bench.create(4)
    grouped = bench.grouped_launch(1)
    assert bench.run(control, bench.capture_launch(0), EXACT) == "OK"
    assert bench.enqueue(control, grouped) == "OK"
    records = bench.sentinel_records(4)
    assert bench.finalize(control, records, 4) == "OK"
    assert bench.state(control) == {"count": 2, "committed": 2, "faults": [], "poisoned": 0}
    assert bench.encoded(ffi.addressof(records, 1)) == bench.expected_record(grouped, sketch(grouped_values))
    bench.destroy_cleanly(control)

    context = bench.create(4)
    assert bench.run(context, bench.capture_launch(0), OVERRUN) == "OK"
    assert bench.enqueue(context, bench.grouped_launch(1)) == "OK"
    assert bench.state(context) == {"count": 2, "committed": 0, "faults": [], "poisoned": 0}
    records = bench.sentinel_records(4)
    assert bench.finalize(context, records, 4) == "INCOMPLETE"
    want = fault_names(lib, lib.PALW_CUDA_PRODUCER_FAULT_DUPLICATE_CAPTURE
                       | lib.PALW_CUDA_PRODUCER_FAULT_MISSING_CAPTURE)
    poisoned = {"count": 2, "committed": 0, "faults": want, "poisoned": 1}
    assert bench.state(context) == poisoned
    assert bench.untouched(records), "a failed finalize wrote host records"
    assert bench.enqueue(context, bench.grouped_launch(2)) == "POISONED"
    assert bench.finalize(context, records, 4) == "POISONED"
    assert bench.state(context) == poisoned, "a call refused by the poison changed the context"
    bench.destroy_cleanly(context)


def test_capacity_overflow_poisons(bench):
    ffi = bench.ffi
    context = bench.create(1)
    assert bench.run(context, bench.capture_launch(0), EXACT) == "OK"
    view = ffi.new("palw_cuda_producer_device_view_v3 *")
    assert bench.prepare(context, bench.capture_launch(1), view) == "CAPACITY_EXCEEDED"
    assert view.abi_version == 0, "a refused prepare handed out a capturing view"
    poisoned = {"count": 1, "committed": 0, "faults": ["CAPACITY_OVERFLOW"], "poisoned": 1}
    assert bench.state(context) == poisoned
    assert bench.enqueue(context, bench.grouped_launch(1)) == "POISONED"
    records = bench.sentinel_records(2)
    assert bench.finalize(context, records, 2) == "POISONED"
    assert bench.state(context) == poisoned
    assert bench.untouched(records), "a poisoned finalize wrote host records"
    bench.destroy_cleanly(context)


def test_refusals_are_not_faults(bench):
    """Refused calls leave the context as it was: no bit, no poison, no count; a clean launch commits."""
    ffi = bench.ffi
    context = bench.create(4)
    launch = bench.capture_launch(0)
    arguments = ToyArguments(ffi, bench.values_device, EXACT)
    view = ffi.new("palw_cuda_producer_device_view_v3 *")
    malformed = bench.capture_launch(0)
    malformed.semantic_template.base.base.schema_version = 2
    other_binding = bench.capture_launch(0)
    other_binding.kernel_binding.num_regs += 1
    other_arch = bench.capture_launch(0)
    other_arch.kernel_binding.sm_arch += 1
    steps = {
        "launch_without_prepare": bench.launch(context, arguments),
        "prepare_19_arguments": bench.prepare(context, launch, view, argument_count=19, view_index=18),
        "prepare_malformed_template": bench.prepare(context, malformed, view),
        "prepare_other_dimensions": bench.prepare(context, launch, view, dimensions=toy_dimensions(ffi, 64)),
        "prepare_other_binding": bench.prepare(context, other_binding, view),
        "prepare_other_arch": bench.prepare(context, other_arch, view),
    }
    assert view.abi_version == 0, "a refused prepare handed out a capturing view"
    steps["prepare"] = bench.prepare(context, launch, view)
    records = bench.sentinel_records(4)
    steps["prepare_while_pending"] = bench.prepare(context, bench.capture_launch(1))
    steps["enqueue_while_pending"] = bench.enqueue(context, bench.grouped_launch(1))
    steps["finalize_while_pending"] = bench.finalize(context, records, 4)
    steps["launch_other_entry"] = bench.launch(context, arguments, entry=bench.other_entry)
    steps["launch"] = bench.launch(context, arguments)
    steps["launch_twice"] = bench.launch(context, arguments)
    assert steps == {
        "launch_without_prepare": "SEQUENCE_MISMATCH", "prepare_19_arguments": "INVALID_ARGUMENT",
        "prepare_malformed_template": "INVALID_ARGUMENT", "prepare_other_dimensions": "IDENTITY_MISMATCH",
        "prepare_other_binding": "IDENTITY_MISMATCH", "prepare_other_arch": "IDENTITY_MISMATCH",
        "prepare": "OK", "prepare_while_pending": "PENDING", "enqueue_while_pending": "PENDING",
        "finalize_while_pending": "INCOMPLETE", "launch_other_entry": "IDENTITY_MISMATCH", "launch": "OK",
        "launch_twice": "SEQUENCE_MISMATCH"}
    assert (view.abi_version, view.record_index, view.output_rows, view.output_columns) == (
        bench.lib.PALW_CUDA_PRODUCER_DEVICE_VIEW_ABI_VERSION_V3, 0, TOY_ROWS, TOY_COLUMNS)
    assert view.slot != ffi.NULL and view.capture_bitmap != ffi.NULL
    assert bytes(ffi.buffer(ffi.addressof(view.expected_identity))) == bytes(ffi.buffer(bench.identity))
    assert arguments.pointers[19] == arguments.placeholder, "launch rewrote the caller's argument array"
    assert bench.state(context) == {"count": 1, "committed": 0, "faults": [], "poisoned": 0}
    assert bench.untouched(records), "a refused finalize wrote host records"
    assert bench.finalize(context, records, 4) == "OK"
    assert bench.state(context) == {"count": 1, "committed": 1, "faults": [], "poisoned": 0}
    assert bench.encoded(ffi.addressof(records, 0)) == bench.expected_record(launch, sketch(bench.values))
    bench.destroy_cleanly(context)
