"""Host computation of the sketch schemes (native/SPEC.md), from values read back.

Both schemes share one formula: lane l = sum over elements e of
palw_cuda_trace_sketch_term_v1(l, e, bits(value_e)) mod 2**64, with
e = row * output_columns + column; they differ in which values are sketched
(MMVQ pre-epilogue accumulators vs the final output tile of an attention stage).
"""

from __future__ import annotations

import numpy as np

LANES = 4
_M64 = (1 << 64) - 1


def term(lane: int, element: int, bits: int) -> int:
    """palw_cuda_trace_sketch_term_v1 on Python ints (the reference for the vectorised form)."""
    if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x007FFFFF):
        bits = 0x7FC00000
    z = ((element << 32) ^ bits) & _M64
    z = (z + 0x9E3779B97F4A7C15 * (lane + 1)) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def sketch(values: np.ndarray) -> list[int]:
    """Lanes of a (rows, columns) float32 tile; element e = row * columns + column."""
    tile = np.ascontiguousarray(values, dtype=np.float32)
    bits = tile.reshape(-1).view(np.uint32).astype(np.uint64)
    nan = ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x007FFFFF) != 0)
    bits[nan] = 0x7FC00000
    elements = np.arange(bits.size, dtype=np.uint64)
    base = (elements << np.uint64(32)) ^ bits
    lanes = []
    with np.errstate(over="ignore"):
        for lane in range(LANES):
            z = base + np.uint64((0x9E3779B97F4A7C15 * (lane + 1)) & _M64)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            lanes.append(int(z.sum(dtype=np.uint64)))
    return lanes


def tile_from_buffer(data: bytes, rows: int, columns: int, row_stride: int) -> np.ndarray:
    """The (rows, columns) tile of a float32 buffer whose rows start ``row_stride`` floats apart."""
    flat = np.frombuffer(data, dtype=np.float32)
    return np.stack([flat[r * row_stride:r * row_stride + columns] for r in range(rows)])
