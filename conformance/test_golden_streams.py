"""Claim: the encoded record stream is golden. Full stream per (model, device class, token);
the structural stream (sketch lanes zeroed) is the same on every device class.

A deliberate change is recorded with ``pytest --snapshot-update --snapshot-no-cleanup`` (syrupy;
the second flag keeps the goldens of other profiles and devices); the files live in
fixtures/goldens/test_golden_streams/ and are reviewed like code.
"""

import pytest

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.goldens import GoldenStreamExtension, device_label, golden_for, model_label
from pytest_palw.runtime.codec import ENCODED_SIZE, structural


@pytest.fixture
def golden(snapshot, request):
    """``golden(name)``: the committed stream ``name``; a missing one skips with how to record it;
    the certificate says where the golden came from (shipped, or recorded here and by whom)."""
    checked = snapshot.use_extension(GoldenStreamExtension)

    def named(name: str):
        golden_for(request, name)
        return checked(name=name)

    return named


@pytest.mark.palw_pinned
def test_full_stream(palw_trace, palw_session, palw_token, golden):
    assert palw_trace.record_count == V2_COUNT
    expected = golden(f"v2-{model_label(palw_session)}-{device_label(palw_session)}-t{palw_token}")
    assert palw_trace.python_stream == expected


@pytest.mark.palw_pinned
def test_structural_stream(palw_trace, palw_session, palw_token, golden):
    assert palw_trace.record_count == V2_COUNT
    expected = golden(f"v2-structural-{model_label(palw_session)}-t{palw_token}")
    assert structural(palw_trace.python_stream) == expected


@pytest.mark.palw_cpu
def test_cpu_reference_stream(palw_cpu_reference, palw_session, palw_token, golden):
    """The reference is computed by the runtime's own backend (CPU, or the GPU of a CUDA build):
    the golden's name says which device class computed it."""
    stream = palw_cpu_reference.python_stream
    assert len(stream) == V2_COUNT * ENCODED_SIZE
    expected = golden(f"reference-{device_label(palw_session)}-{model_label(palw_session)}-t{palw_token}")
    assert stream == expected
