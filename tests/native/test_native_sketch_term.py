"""palw_cuda_trace_sketch_term_v1 (the header) against a pure-Python reimplementation.

The same inline function runs in the device hook, the grouped collector and any host
recomputation, so checking it on the host checks the formula all three share.
"""

import struct

import numpy as np
import pytest

from pytest_palw.runtime import sketch

M64 = (1 << 64) - 1


def reference_term(lane: int, element: int, bits: int) -> int:
    """SPEC.md's formula, written independently of the header."""
    exponent_all_ones = (bits >> 23) & 0xFF == 0xFF
    if exponent_all_ones and bits & 0x7FFFFF:
        bits = 0x7FC00000  # every NaN is the canonical quiet NaN
    z = ((element << 32) & M64) ^ bits
    z = (z + 0x9E3779B97F4A7C15 * (lane + 1)) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


VALUES = [0x00000000, 0x80000000, f32_bits(1.0), f32_bits(-2.5), f32_bits(3.4e38),
          0x00000001, 0x7F800000, 0xFF800000, 0x7FC00000, 0x12345678]
ELEMENTS = [0, 1, 31, 32, 4095, 151935, 2**32 - 1, 2**40 + 7]


@pytest.mark.parametrize("lane", range(4))
@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("bits", VALUES, ids=[f"{v:08x}" for v in VALUES])
def test_term_matches_the_python_reference(abi, lane, element, bits):
    assert abi.lib.palw_cuda_trace_sketch_term_v1(lane, element, bits) == reference_term(lane, element, bits)


@pytest.mark.parametrize("nan_bits", [0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0xFF800001, 0xFFC00000, 0xFFFFFFFF])
def test_every_nan_counts_as_the_canonical_nan(abi, nan_bits):
    for lane in range(4):
        assert abi.lib.palw_cuda_trace_sketch_term_v1(lane, 9, nan_bits) == (
            abi.lib.palw_cuda_trace_sketch_term_v1(lane, 9, 0x7FC00000))


def test_infinities_and_signed_zeros_stay_distinct(abi):
    term = abi.lib.palw_cuda_trace_sketch_term_v1
    distinct = {term(0, 3, bits) for bits in (0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x7FC00000)}
    assert len(distinct) == 5


def test_lanes_and_elements_give_different_terms(abi):
    term = abi.lib.palw_cuda_trace_sketch_term_v1
    assert len({term(lane, 0, f32_bits(1.0)) for lane in range(4)}) == 4
    assert len({term(0, element, f32_bits(1.0)) for element in range(64)}) == 64


def test_host_sketch_module_sums_the_c_terms(abi):
    """pytest_palw.runtime.sketch (the host recomputation from a read-back) agrees with the C terms."""
    rng = np.random.default_rng(7)
    tile = rng.standard_normal((3, 37)).astype(np.float32)
    tile[1, 5] = np.float32("nan")
    bits = tile.reshape(-1).view(np.uint32)
    term = abi.lib.palw_cuda_trace_sketch_term_v1
    expected = [sum(term(lane, e, int(b)) for e, b in enumerate(bits)) % 2**64 for lane in range(4)]
    assert sketch.sketch(tile) == expected
