"""Golden vectors of the canonical V3 encoding (record_codec.cpp, native/SPEC.md).

Every field holds a distinct value: its first byte is the field's ordinal (0x80+lane
for the sketch), the rest count up, so a swapped field, a wrong width or a
little-endian write each show up as a mismatch at a known offset. The table is
written from the smoke's encode_record_v3 field order; the offsets are SPEC.md's.
"""

import pytest
from native_templates import set_field

# (field path in palw_cuda_trace_record_v3, offset, big-endian bytes)
GOLDEN = (
    ("base.base.kernel_sequence", 0, "0101020304050607"),
    ("base.base.tile_index", 8, "0201020304050607"),
    ("base.base.decode_step", 16, "0301020304050607"),
    ("base.base.m", 24, "0401020304050607"),
    ("base.base.n", 32, "0501020304050607"),
    ("base.base.k", 40, "0601020304050607"),
    ("base.base.batch", 48, "0701020304050607"),
    ("base.base.query_tokens", 56, "0801020304050607"),
    ("base.base.key_value_tokens", 64, "0901020304050607"),
    ("base.base.sketch[0]", 72, "8001020304050607"),
    ("base.base.sketch[1]", 80, "8101020304050607"),
    ("base.base.sketch[2]", 88, "8201020304050607"),
    ("base.base.sketch[3]", 96, "8301020304050607"),
    ("base.base.layer_id", 104, "0e010203"),
    ("base.base.tile_row", 108, "0f010203"),
    ("base.base.tile_column", 112, "10010203"),
    ("base.base.tile_rows", 116, "11010203"),
    ("base.base.tile_columns", 120, "12010203"),
    ("base.base.output_rows", 124, "13010203"),
    ("base.base.output_columns", 128, "14010203"),
    ("base.base.schema_version", 132, "1501"),
    ("base.base.kind", 134, "16"),
    ("base.base.phase", 135, "17"),
    ("base.base.dtype", 136, "18"),
    ("base.base.quantization", 137, "19"),
    ("base.base.causal", 138, "1a"),
    ("base.declared_origin", 139, "1b"),
    ("base.accumulator_stage", 140, "1c"),
    ("base.accumulator_dtype", 141, "1d"),
    ("base.sketch_scheme", 142, "1e01"),
    ("base.reduction_segment_index", 144, "1f010203"),
    ("base.reduction_segment_count", 148, "20010203"),
    ("base.producer_variant_id", 152, "212122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"),
    ("covered_schedule_index", 184, "2201020304050607"),
    ("attention_owner_schedule_index", 192, "2301020304050607"),
    ("sublaunch_index", 200, "24010203"),
    ("sublaunch_count", 204, "25010203"),
    ("layer_present", 208, "26"),
    ("attention_group_present", 209, "27"),
    ("attention_stage", 210, "28"),
    ("grouping_version", 211, "29"),
    ("query_heads", 212, "2a010203"),
    ("key_value_heads", 216, "2b010203"),
    ("head_dim", 220, "2c010203"),
    ("logical_batch", 224, "2d010203"),
    ("physical_key_value_tokens", 228, "2e010203"),
    ("grid_x", 232, "2f010203"),
    ("grid_y", 236, "30010203"),
    ("grid_z", 240, "31010203"),
    ("block_x", 244, "32010203"),
    ("block_y", 248, "33010203"),
    ("block_z", 252, "34010203"),
    ("dynamic_shared_memory_bytes", 256, "35010203"),
    ("operation_instance_id", 260, "362122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"),
    ("attention_group_instance_id", 292, "372122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"),
    ("decomposition_plan_id", 324, "382122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"),
    ("physical_layout_id", 356, "392122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"),
    ("work_entry_point_id", 388, "3a2122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"),
    ("capture_implementation_id", 420, "3b2122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"),
)


def _golden_record(abi):
    record = abi.ffi.new("palw_cuda_trace_record_v3 *")
    for path, _, hex_bytes in GOLDEN:
        raw = bytes.fromhex(hex_bytes)
        value = raw if len(raw) == 32 else int.from_bytes(raw, "big")
        set_field(abi.ffi, record[0], path, value)
    return record


def _encode(abi, record, size=452):
    output = abi.ffi.new("uint8_t[]", max(size, 1))
    status = abi.lib.palw_cuda_trace_encode_record_v3(record, output, size)
    return status, bytes(abi.ffi.buffer(output, size))


def test_encoded_size_constant_is_452(abi):
    assert abi.lib.PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3 == 452
    assert abi.lib.PALW_CUDA_TRACE_SKETCH_LANES == 4


def test_golden_table_is_contiguous_and_complete():
    offset = 0
    for path, listed, hex_bytes in GOLDEN:
        assert listed == offset, path
        offset += len(hex_bytes) // 2
    assert offset == 452


def test_golden_record_encodes_to_the_golden_bytes(abi):
    status, encoded = _encode(abi, _golden_record(abi))
    assert status == abi.lib.PALW_CUDA_TRACE_OK
    assert encoded == b"".join(bytes.fromhex(h) for _, _, h in GOLDEN)


@pytest.mark.parametrize("path, offset, hex_bytes", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_each_field_lands_at_its_offset(abi, path, offset, hex_bytes):
    _, encoded = _encode(abi, _golden_record(abi))
    assert encoded[offset:offset + len(hex_bytes) // 2].hex() == hex_bytes


def test_zero_record_encodes_to_zeros(abi):
    status, encoded = _encode(abi, abi.ffi.new("palw_cuda_trace_record_v3 *"))
    assert status == abi.lib.PALW_CUDA_TRACE_OK and encoded == bytes(452)


def test_larger_buffer_is_written_only_for_452_bytes(abi):
    output = abi.ffi.new("uint8_t[]", b"\xee" * 460)
    status = abi.lib.palw_cuda_trace_encode_record_v3(_golden_record(abi), output, 460)
    assert status == abi.lib.PALW_CUDA_TRACE_OK
    assert bytes(abi.ffi.buffer(output, 460))[452:] == b"\xee" * 8


@pytest.mark.parametrize("size", [0, 1, 451])
def test_short_buffer_is_rejected_untouched(abi, size):
    output = abi.ffi.new("uint8_t[]", b"\xee" * 452)
    status = abi.lib.palw_cuda_trace_encode_record_v3(_golden_record(abi), output, size)
    assert status == abi.lib.PALW_CUDA_TRACE_INVALID_ARGUMENT
    assert bytes(abi.ffi.buffer(output, 452)) == b"\xee" * 452


def test_null_record_or_output_is_rejected(abi):
    ffi, lib = abi.ffi, abi.lib
    output = ffi.new("uint8_t[]", 452)
    assert lib.palw_cuda_trace_encode_record_v3(ffi.NULL, output, 452) == lib.PALW_CUDA_TRACE_INVALID_ARGUMENT
    assert lib.palw_cuda_trace_encode_record_v3(_golden_record(abi), ffi.NULL, 452) == (
        lib.PALW_CUDA_TRACE_INVALID_ARGUMENT)
