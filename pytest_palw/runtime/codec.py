"""The canonical V3 record encoding and the FNV-1a 64 fingerprint, in pure Python.

Written from the seed smoke tool's ``encode_record_v3`` field order, independently of
native/runtime-palw/cuda/record_codec.cpp, so that each checks the other. Records
are read by field name (cffi structs or plain mappings); nothing here knows offsets.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

FNV64_OFFSET = 14695981039346656037
FNV64_PRIME = 1099511628211
ID_SIZE = 32
SKETCH_LANES = 4

# (path, format) in canonical order; "id" is 32 raw bytes, "lanes" the sketch u64s.
# Paths are relative to palw_cuda_trace_record_v3: base = v2 extension, base.base = record.
FIELDS: tuple[tuple[str, str], ...] = (
    ("base.base.kernel_sequence", "Q"),
    ("base.base.tile_index", "Q"),
    ("base.base.decode_step", "Q"),
    ("base.base.m", "Q"),
    ("base.base.n", "Q"),
    ("base.base.k", "Q"),
    ("base.base.batch", "Q"),
    ("base.base.query_tokens", "Q"),
    ("base.base.key_value_tokens", "Q"),
    ("base.base.sketch", "lanes"),
    ("base.base.layer_id", "I"),
    ("base.base.tile_row", "I"),
    ("base.base.tile_column", "I"),
    ("base.base.tile_rows", "I"),
    ("base.base.tile_columns", "I"),
    ("base.base.output_rows", "I"),
    ("base.base.output_columns", "I"),
    ("base.base.schema_version", "H"),
    ("base.base.kind", "B"),
    ("base.base.phase", "B"),
    ("base.base.dtype", "B"),
    ("base.base.quantization", "B"),
    ("base.base.causal", "B"),
    ("base.declared_origin", "B"),
    ("base.accumulator_stage", "B"),
    ("base.accumulator_dtype", "B"),
    ("base.sketch_scheme", "H"),
    ("base.reduction_segment_index", "I"),
    ("base.reduction_segment_count", "I"),
    ("base.producer_variant_id", "id"),
    ("covered_schedule_index", "Q"),
    ("attention_owner_schedule_index", "Q"),
    ("sublaunch_index", "I"),
    ("sublaunch_count", "I"),
    ("layer_present", "B"),
    ("attention_group_present", "B"),
    ("attention_stage", "B"),
    ("grouping_version", "B"),
    ("query_heads", "I"),
    ("key_value_heads", "I"),
    ("head_dim", "I"),
    ("logical_batch", "I"),
    ("physical_key_value_tokens", "I"),
    ("grid_x", "I"),
    ("grid_y", "I"),
    ("grid_z", "I"),
    ("block_x", "I"),
    ("block_y", "I"),
    ("block_z", "I"),
    ("dynamic_shared_memory_bytes", "I"),
    ("operation_instance_id", "id"),
    ("attention_group_instance_id", "id"),
    ("decomposition_plan_id", "id"),
    ("physical_layout_id", "id"),
    ("work_entry_point_id", "id"),
    ("capture_implementation_id", "id"),
)

_SIZES = {"Q": 8, "I": 4, "H": 2, "B": 1, "id": ID_SIZE, "lanes": 8 * SKETCH_LANES}
ENCODED_SIZE = sum(_SIZES[kind] for _, kind in FIELDS)  # 452


def field(record, path: str):
    value = record
    for part in path.split("."):
        value = value[part] if isinstance(value, Mapping) else getattr(value, part)
    return value


def _as_bytes(value) -> bytes:
    data = bytes(value) if not isinstance(value, (bytes, bytearray)) else bytes(value)
    if len(data) != ID_SIZE:
        raise ValueError(f"an id is {ID_SIZE} bytes, got {len(data)}")
    return data


def encode_record(record) -> bytes:
    """Canonical big-endian bytes of one V3 record (452 with 4 sketch lanes)."""
    out = bytearray()
    for path, kind in FIELDS:
        value = field(record, path)
        if kind == "id":
            out += _as_bytes(value)
        elif kind == "lanes":
            lanes = list(value)
            if len(lanes) != SKETCH_LANES:
                raise ValueError(f"the sketch has {SKETCH_LANES} lanes, got {len(lanes)}")
            out += struct.pack(">4Q", *lanes)
        else:
            out += struct.pack(">" + kind, value)
    return bytes(out)


def encode_stream(records: Iterable) -> bytes:
    return b"".join(encode_record(r) for r in records)


def fnv1a64(data: bytes, seed: int = FNV64_OFFSET) -> int:
    value = seed
    for byte in data:
        value = ((value ^ byte) * FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return value


def fingerprint(stream: bytes) -> str:
    """The smoke's ``canonical_record_fnv1a64``: 16 lowercase hex digits."""
    return f"{fnv1a64(stream):016x}"


def structural(stream: bytes) -> bytes:
    """The stream with every sketch lane zeroed: identical on every device class."""
    offset = sum(_SIZES[kind] for path, kind in FIELDS[:FIELDS.index(("base.base.sketch", "lanes"))])
    out = bytearray(stream)
    for start in range(0, len(out), ENCODED_SIZE):
        out[start + offset:start + offset + _SIZES["lanes"]] = bytes(_SIZES["lanes"])
    return bytes(out)
