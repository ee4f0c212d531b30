"""Claim: the whole record pipeline (discovery, association, the smoke's approve logic, host
sketches, canonical encoding) produces 361 well-formed V3 records without a GPU, and both
encoders agree on them. The stream itself is golden (test_golden_streams)."""

import pytest

from pytest_palw.names import status_name
from pytest_palw.verify import record_mismatches

pytestmark = pytest.mark.palw_cpu


def test_every_launch_is_approved(palw_cpu_reference, lib):
    statuses = {status_name(lib, s) for s in palw_cpu_reference.statuses}
    assert len(palw_cpu_reference.statuses) == 361
    assert statuses == {"OK"}
    assert palw_cpu_reference.session.callback_errors == []


def test_reference_decode_succeeds(palw_cpu_reference):
    reference = palw_cpu_reference.reference
    assert reference.decode_status == 0
    assert len(reference.tiles) == 361


@pytest.mark.parametrize("index", range(361))
def test_reference_record(index, palw_cpu_reference, ffi, lib):
    candidate = palw_cpu_reference.reference.candidates[index]
    record = palw_cpu_reference.records[index]
    problems = record_mismatches(ffi, record, index, candidate, palw_cpu_reference.session.infos, lib)
    assert problems == []
    assert list(record.base.base.sketch) != [0, 0, 0, 0]


def test_c_codec_equals_python_encoder(palw_cpu_reference):
    assert palw_cpu_reference.c_stream is not None
    assert palw_cpu_reference.c_stream == palw_cpu_reference.python_stream


def test_outputs_are_finite(palw_cpu_reference):
    import numpy as np

    bad = [i for i, tile in enumerate(palw_cpu_reference.reference.tiles) if not np.isfinite(tile).all()]
    assert bad == [], f"non-finite outputs at launches {bad[:10]}"
