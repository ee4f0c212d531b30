"""Claim: this runtime's one-token reference decode succeeds with finite outputs for the 361 trace
candidates, and for each launch the native header's validator accepts the association
llama-context.cpp builds (transcribed from palw_cuda_trace_eval in pytest_palw.runtime.reference, over the
node this runtime evaluated) and the native host codec encodes the reference record exactly as the
Python encoder does.

The reference decode gives every graph node its own scheduler split and reads each candidate's
output back right after it is computed. The validator is
palw_cuda_llama_trace_association_is_supported_v2, the codec record_codec.cpp, both through the host
ABI (cffi); the stream itself is golden (test_golden_streams). Not certified here: the records'
contents, which the caller's callbacks (the smoke's approve logic in C, pytest_palw/runtime/binding/trace_caller.cpp)
make with stand-in kernel identities
(tests/runtime/test_reference_records.py checks them against discovery), nor that the patch itself builds these
associations (test_non_mutation (b), pinned tier).
"""

import numpy as np
import pytest

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.marks import each_launch

pytestmark = pytest.mark.palw_cpu


def test_reference_decode_succeeds(palw_cpu_reference):
    reference = palw_cpu_reference.reference
    assert reference.decode_status == 0
    assert len(reference.tiles) == V2_COUNT


@each_launch("CPU reference record")
def test_reference_record(index, palw_cpu_reference, lib):
    """Launch ``index``: its association passes the native validator, its record the native codec."""
    associations = palw_cpu_reference.reference.associations
    assert index < len(associations), f"the reference decode yielded {len(associations)} candidates, not {V2_COUNT}"
    assert lib.palw_cuda_llama_trace_association_is_supported_v2(associations[index]), (
        "the native header rejects this association (palw_cuda_llama_trace_association_is_supported_v2)")
    assert palw_cpu_reference.c_stream is not None, "the native codec refused a reference record"
    size = lib.PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3
    span = slice(index * size, (index + 1) * size)
    assert palw_cpu_reference.c_stream[span] == palw_cpu_reference.python_stream[span]


def test_c_codec_equals_python_encoder(palw_cpu_reference):
    assert palw_cpu_reference.c_stream is not None
    assert palw_cpu_reference.c_stream == palw_cpu_reference.python_stream


def test_outputs_are_finite(palw_cpu_reference):
    bad = [i for i, tile in enumerate(palw_cpu_reference.reference.tiles) if not np.isfinite(tile).all()]
    assert bad == [], f"non-finite outputs at launches {bad[:10]}"
