// Canonical V3 record encoding: fixed field order, big-endian, no padding.
// The order is the one llama-palw-mmvq-smoke's encode_record_v3 fixes; the
// byte offsets are tabulated in native/SPEC.md. Host only: no CUDA headers.

#include "palw_cuda_llama_mmvq.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace {

constexpr size_t U8 = 1;
constexpr size_t U16 = 2;
constexpr size_t U32 = 4;
constexpr size_t U64 = 8;
constexpr size_t ID = PALW_CUDA_PRODUCER_ID_SIZE;

// Field widths in encoding order; the codec below writes exactly these.
constexpr size_t BASE_BYTES = 9 * U64 + PALW_CUDA_TRACE_SKETCH_LANES * U64 + 7 * U32 + U16 + 5 * U8;
constexpr size_t V2_BYTES = 3 * U8 + U16 + 2 * U32 + ID;
constexpr size_t V3_BYTES = 2 * U64 + 2 * U32 + 4 * U8 + 5 * U32 + 7 * U32 + 6 * ID;

static_assert(BASE_BYTES + V2_BYTES + V3_BYTES == PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3,
    "the V3 field list and PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3 disagree");
static_assert(PALW_CUDA_TRACE_SKETCH_LANES == 4u, "the V3 encoding fixes four sketch lanes");

// Appends big-endian integers and raw ids; counts what it wrote.
class writer {
  public:
    explicit writer(uint8_t * output) : output_(output) {}

    void u8(uint8_t value) { output_[written_++] = value; }
    void u16(uint16_t value) { be(value, U16); }
    void u32(uint32_t value) { be(value, U32); }
    void u64(uint64_t value) { be(value, U64); }

    void id(const uint8_t * value) {
        std::memcpy(output_ + written_, value, ID);
        written_ += ID;
    }

    size_t written() const { return written_; }

  private:
    void be(uint64_t value, size_t width) {
        for (size_t i = 0; i < width; ++i) {
            output_[written_ + i] = static_cast<uint8_t>(value >> (8 * (width - 1 - i)));
        }
        written_ += width;
    }

    uint8_t * output_;
    size_t written_ = 0;
};

void write_base(writer & out, const palw_cuda_trace_record & base) {
    out.u64(base.kernel_sequence);
    out.u64(base.tile_index);
    out.u64(base.decode_step);
    out.u64(base.m);
    out.u64(base.n);
    out.u64(base.k);
    out.u64(base.batch);
    out.u64(base.query_tokens);
    out.u64(base.key_value_tokens);
    for (uint32_t lane = 0; lane < PALW_CUDA_TRACE_SKETCH_LANES; ++lane) {
        out.u64(base.sketch[lane]);
    }
    out.u32(base.layer_id);
    out.u32(base.tile_row);
    out.u32(base.tile_column);
    out.u32(base.tile_rows);
    out.u32(base.tile_columns);
    out.u32(base.output_rows);
    out.u32(base.output_columns);
    out.u16(base.schema_version);
    out.u8(base.kind);
    out.u8(base.phase);
    out.u8(base.dtype);
    out.u8(base.quantization);
    out.u8(base.causal);
}

void write_v2(writer & out, const palw_cuda_trace_record_v2 & record) {
    out.u8(record.declared_origin);
    out.u8(record.accumulator_stage);
    out.u8(record.accumulator_dtype);
    out.u16(record.sketch_scheme);
    out.u32(record.reduction_segment_index);
    out.u32(record.reduction_segment_count);
    out.id(record.producer_variant_id);
}

void write_v3(writer & out, const palw_cuda_trace_record_v3 & record) {
    out.u64(record.covered_schedule_index);
    out.u64(record.attention_owner_schedule_index);
    out.u32(record.sublaunch_index);
    out.u32(record.sublaunch_count);
    out.u8(record.layer_present);
    out.u8(record.attention_group_present);
    out.u8(record.attention_stage);
    out.u8(record.grouping_version);
    out.u32(record.query_heads);
    out.u32(record.key_value_heads);
    out.u32(record.head_dim);
    out.u32(record.logical_batch);
    out.u32(record.physical_key_value_tokens);
    out.u32(record.grid_x);
    out.u32(record.grid_y);
    out.u32(record.grid_z);
    out.u32(record.block_x);
    out.u32(record.block_y);
    out.u32(record.block_z);
    out.u32(record.dynamic_shared_memory_bytes);
    out.id(record.operation_instance_id);
    out.id(record.attention_group_instance_id);
    out.id(record.decomposition_plan_id);
    out.id(record.physical_layout_id);
    out.id(record.work_entry_point_id);
    out.id(record.capture_implementation_id);
}

}  // namespace

palw_cuda_trace_status palw_cuda_trace_encode_record_v3(
        const palw_cuda_trace_record_v3 * record, uint8_t * output, uint64_t output_size) {
    if (record == nullptr || output == nullptr ||
            output_size < PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    writer out(output);
    write_base(out, record->base.base);
    write_v2(out, record->base);
    write_v3(out, *record);
    // Unreachable unless the field list above and the size constant drift apart.
    return out.written() == PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3
        ? PALW_CUDA_TRACE_OK
        : PALW_CUDA_TRACE_INVALID_ARGUMENT;
}
