"""The smoke tool's FNV-1a-derived diagnostic ids (derive_diagnostic_id / _v2), in Python.

Each id is four FNV-1a 64 lanes over: the domain string, the lane, the sequence and,
when an association is given, its shape fields, each u64 big-endian.
"""

from __future__ import annotations

import functools
import struct

from pytest_palw.runtime.codec import FNV64_OFFSET, fnv1a64

# Domain strings, verbatim from tools/palw-mmvq-smoke/palw-mmvq-smoke.cpp.
OPERATION_V1 = "misaka.palw.diagnostic.operation.v1"
DIRECT_PLAN_V1 = "misaka.palw.diagnostic.direct_plan.v1"
PHYSICAL_LAYOUT_V1 = "misaka.palw.diagnostic.physical_layout.v1"
OPERATION_V2 = "misaka.palw.diagnostic.operation.v2"
PLAN_V2 = "misaka.palw.diagnostic.plan.v2"
ATTENTION_PLAN_V2 = "misaka.palw.diagnostic.attention_plan.v2"
PHYSICAL_LAYOUT_V2 = "misaka.palw.diagnostic.physical_layout.v2"
ATTENTION_GROUP_V1 = "misaka.palw.diagnostic.attention_group.v1"


def _u64(value: int) -> bytes:
    return struct.pack(">Q", value & 0xFFFFFFFFFFFFFFFF)


@functools.lru_cache(maxsize=1 << 14)  # pure; FNV-1a in Python costs ~0.2 ms an id, every trace asks again
def _derive(domain: str, sequence: int, tail: bytes) -> bytes:
    out = b""
    for lane in range(4):
        out += _u64(fnv1a64(domain.encode() + _u64(lane) + _u64(sequence) + tail, FNV64_OFFSET))
    return out


def diagnostic_id_v1(domain: str, sequence: int, actual=None) -> bytes:
    """derive_diagnostic_id: ``actual`` has m, n, k, batch, quantization."""
    tail = b""
    if actual is not None:
        tail = b"".join(_u64(getattr(actual, f)) for f in ("m", "n", "k", "batch"))
        tail += bytes([actual.quantization])
    return _derive(domain, sequence, tail)


def diagnostic_id_v2(domain: str, sequence: int, actual=None) -> bytes:
    """derive_diagnostic_id_v2: adds layer_id, kind, quantization, attention_stage."""
    tail = b""
    if actual is not None:
        tail = b"".join(_u64(getattr(actual, f)) for f in ("m", "n", "k", "batch", "layer_id"))
        tail += bytes([actual.kind, actual.quantization, actual.attention_stage])
    return _derive(domain, sequence, tail)
