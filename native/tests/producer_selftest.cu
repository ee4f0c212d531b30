// Device self-test of the PALW producer runtime (native/runtime-palw/cuda).
//
// Runs the producer end to end on a real GPU with toy kernels: a 20-argument
// kernel in MMVQ's launch shape that calls the device capture hook, and a work
// kernel whose output the grouped final-output collector sketches. Every
// sketch is recomputed on the host from the values (or a read-back) and must
// match bit for bit. Prints one JSON line; exits 0 when every check passes,
// 1 when one fails, 2 when no CUDA device is usable.
//
// Build and run (from the repository root; add compute_89 for Ada):
//   nvcc -std=c++17 -O2 -gencode arch=compute_90,code=sm_90 -I native/runtime-palw/cuda native/tests/producer_selftest.cu native/runtime-palw/cuda/producer_accumulator.cu native/runtime-palw/cuda/producer_contract.cpp native/runtime-palw/cuda/record_codec.cpp -o /tmp/producer_selftest && /tmp/producer_selftest

#include "palw_cuda_llama_mmvq.h"
#include "launch_templates.h"
#include "palw_cuda_producer_trace.cuh"
#include "toy_capture_kernel.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

// ---- toy kernels ------------------------------------------------------------

constexpr uint32_t TOY_ROWS = 3;
constexpr uint32_t TOY_COLUMNS = 70;  // not a multiple of 32: a partial bitmap word
constexpr uint32_t TOY_THREADS = 128;
constexpr uint32_t TOY_BLOCKS = (TOY_ROWS * TOY_COLUMNS + TOY_THREADS - 1) / TOY_THREADS;
constexpr uint32_t TOY_PADDING = 15;  // arguments 4..18: MMVQ's 20-argument shape
constexpr uint32_t HEADS = 32;
constexpr uint32_t WORK_THREADS = 256;

// Stands in for an attention stage: writes a (rows x columns) tile with rows
// `row_stride` floats apart, and poisons the padding the collector must skip.
__global__ void toy_attention_work_kernel(
        float * output, uint32_t columns, uint64_t row_stride, uint32_t seed) {
    const uint32_t row = blockIdx.y;
    for (uint64_t column = blockIdx.x * blockDim.x + threadIdx.x; column < row_stride;
            column += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
        const uint64_t element = static_cast<uint64_t>(row) * columns + column;
        float value = __uint_as_float(static_cast<uint32_t>(element * 2654435761u) ^ seed);
        if (column >= columns) {
            value = -12345.0f;  // padding: outside the tile
        } else if (element == 5u) {
            value = __uint_as_float(0x7fa00001u);  // a NaN with a payload
        } else if (element == 6u) {
            value = -0.0f;
        }
        output[static_cast<uint64_t>(row) * row_stride + column] = value;
    }
}

// ---- reporting -----------------------------------------------------------------

const char * status_name(palw_cuda_trace_status status) {
    switch (status) {
        case PALW_CUDA_TRACE_OK: return "OK";
        case PALW_CUDA_TRACE_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
        case PALW_CUDA_TRACE_PENDING: return "PENDING";
        case PALW_CUDA_TRACE_SEQUENCE_MISMATCH: return "SEQUENCE_MISMATCH";
        case PALW_CUDA_TRACE_IDENTITY_MISMATCH: return "IDENTITY_MISMATCH";
        case PALW_CUDA_TRACE_INCOMPLETE: return "INCOMPLETE";
        case PALW_CUDA_TRACE_CUDA_ERROR: return "CUDA_ERROR";
        case PALW_CUDA_TRACE_CAPACITY_EXCEEDED: return "CAPACITY_EXCEEDED";
        case PALW_CUDA_TRACE_POISONED: return "POISONED";
    }
    return "UNKNOWN";
}

// One named check: the first failed expectation is its detail.
class check {
  public:
    explicit check(const char * name) : name_(name) {}

    void expect(bool condition, const std::string & what) {
        if (!condition && ok_) {
            ok_ = false;
            detail_ = what;
        }
    }

    void expect_status(palw_cuda_trace_status got, palw_cuda_trace_status want, const char * call) {
        expect(got == want, std::string(call) + " returned " + status_name(got) + ", want " +
            status_name(want));
    }

    const std::string & name() const { return name_; }
    bool ok() const { return ok_; }
    const std::string & detail() const { return detail_; }

  private:
    std::string name_;
    bool ok_ = true;
    std::string detail_;
};

#define EXPECT(c, condition) (c).expect((condition), #condition)
#define EXPECT_STATUS(c, call, want) (c).expect_status((call), (want), #call)

std::string json_escape(const std::string & text) {
    std::string out;
    for (char ch : text) {
        if (ch == '"' || ch == '\\') {
            out += '\\';
        }
        out += (static_cast<unsigned char>(ch) < 0x20) ? ' ' : ch;
    }
    return out;
}

// ---- host-side expectations -------------------------------------------------------

using sketch_lanes = std::array<uint64_t, PALW_CUDA_TRACE_SKETCH_LANES>;

uint32_t float_bits(float value) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    return bits;
}

// SPEC.md: lane l = sum over e = row * columns + column of term(l, e, bits), mod 2^64.
sketch_lanes host_sketch(const float * data, uint32_t rows, uint32_t columns, uint64_t row_stride) {
    sketch_lanes lanes = {};
    for (uint64_t row = 0; row < rows; ++row) {
        for (uint64_t column = 0; column < columns; ++column) {
            const uint32_t bits = float_bits(data[row * row_stride + column]);
            for (uint32_t l = 0; l < PALW_CUDA_TRACE_SKETCH_LANES; ++l) {
                lanes[l] += palw_cuda_trace_sketch_term_v1(l, row * columns + column, bits);
            }
        }
    }
    return lanes;
}

void fill_id(uint8_t * id, uint8_t seed) {
    for (uint32_t i = 0; i < PALW_CUDA_PRODUCER_ID_SIZE; ++i) {
        id[i] = static_cast<uint8_t>(seed + 7u * i + 1u);
    }
}

// The approve callback's job: bind the launch to the kernel's real attributes.
palw_cuda_producer_kernel_binding_v3 binding_for(const void * entry_point, uint32_t sm_arch) {
    palw_cuda_producer_kernel_binding_v3 binding = {};
    (void) toy_kernel_binding(entry_point, sm_arch, &binding);
    fill_id(binding.kernel_binary_digest, 0x5e);
    return binding;
}

palw_cuda_producer_launch_dimensions_v1 toy_dims() {
    palw_cuda_producer_launch_dimensions_v1 d = {};
    d.grid_x = TOY_BLOCKS;
    d.grid_y = d.grid_z = 1;
    d.block_x = TOY_THREADS;
    d.block_y = d.block_z = 1;
    return d;
}

// What every toy template shares: launch `index` of a prefill in FP32, launched as
// `d`, with its kernel's identity and binding; the tile is rows x columns.
palw_cuda_producer_launch_v3 launch_template(uint64_t index, uint32_t rows, uint32_t columns,
        const palw_cuda_producer_launch_dimensions_v1 & d,
        const palw_cuda_producer_actual_identity_v3 & identity, const void * entry_point,
        uint32_t sm_arch) {
    palw_cuda_producer_launch_v3 launch;
    std::memset(&launch, 0, sizeof(launch));
    launch.launch_nonce = index + 1;
    palw_cuda_trace_record_v3 & t = launch.semantic_template;
    palw_cuda_trace_record & base = t.base.base;
    base.kernel_sequence = index;
    base.tile_rows = base.output_rows = rows;
    base.tile_columns = base.output_columns = columns;
    base.schema_version = PALW_CUDA_TRACE_SCHEMA_VERSION_V3;
    base.phase = PALW_CUDA_TRACE_PREFILL;
    base.dtype = PALW_CUDA_TRACE_DTYPE_FP32;
    t.covered_schedule_index = index;
    set_dimensions(t, d);
    set_identity(t, identity);
    launch.kernel_binding = binding_for(entry_point, sm_arch);
    return launch;
}

// An MMVQ-class template (SCALAR_ACCUMULATOR_F32_V1) for the toy capture kernel.
palw_cuda_producer_launch_v3 toy_launch(uint64_t index, uint32_t sm_arch) {
    palw_cuda_producer_launch_v3 launch = launch_template(index, TOY_ROWS, TOY_COLUMNS, toy_dims(),
        toy_identity(), reinterpret_cast<const void *>(&toy_capture_kernel), sm_arch);
    palw_cuda_trace_record_v3 & t = launch.semantic_template;
    palw_cuda_trace_record & base = t.base.base;
    base.m = TOY_COLUMNS;
    base.n = TOY_ROWS;
    base.k = 256;
    base.batch = 1;
    base.kind = PALW_CUDA_TRACE_GEMM;
    base.quantization = PALW_CUDA_TRACE_QUANTIZATION_Q4_K;
    set_mmvq_capture(t);
    fill_id(t.operation_instance_id, static_cast<uint8_t>(index));
    fill_id(t.decomposition_plan_id, 0x31);
    fill_id(t.physical_layout_id, static_cast<uint8_t>(index + 0x40));
    return launch;
}

constexpr uint8_t GROUPED_CAPTURE_ID[PALW_CUDA_PRODUCER_ID_SIZE] = {
    PALW_CUDA_PRODUCER_GROUPED_CAPTURE_ID_BYTES_V1,
};

palw_cuda_producer_actual_identity_v3 attention_identity() {
    palw_cuda_producer_actual_identity_v3 identity = {};
    fill_id(identity.producer_variant_id, 0x11);
    fill_id(identity.work_entry_point_id, 0x22);
    std::memcpy(identity.capture_implementation_id, GROUPED_CAPTURE_ID, PALW_CUDA_PRODUCER_ID_SIZE);
    return identity;
}

palw_cuda_producer_launch_dimensions_v1 work_dims(uint32_t columns) {
    palw_cuda_producer_launch_dimensions_v1 d = {};
    d.grid_x = std::min<uint32_t>((columns + WORK_THREADS - 1) / WORK_THREADS, 1024u);
    d.grid_y = HEADS;
    d.grid_z = 1;
    d.block_x = WORK_THREADS;
    d.block_y = d.block_z = 1;
    return d;
}

// A softmax-stage template (FINAL_OUTPUT_TILE_F32_V1) over a 32 x columns tile.
palw_cuda_producer_launch_v3 attention_launch(uint64_t index, uint32_t columns, uint32_t sm_arch) {
    palw_cuda_producer_launch_v3 launch = launch_template(index, HEADS, columns, work_dims(columns),
        attention_identity(), reinterpret_cast<const void *>(&toy_attention_work_kernel), sm_arch);
    palw_cuda_trace_record_v3 & t = launch.semantic_template;
    palw_cuda_trace_record & base = t.base.base;
    base.m = columns;
    base.n = 1;
    base.k = 1;
    base.batch = HEADS;
    base.query_tokens = 1;
    base.key_value_tokens = 1;
    base.kind = PALW_CUDA_TRACE_ATTENTION;
    base.quantization = PALW_CUDA_TRACE_QUANTIZATION_NONE;
    base.causal = 1;
    // The softmax owns its group.
    set_attention_stage(t, PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX, index);
    t.query_heads = HEADS;
    t.key_value_heads = 8;
    t.head_dim = 128;
    t.logical_batch = 1;
    t.physical_key_value_tokens = columns;
    fill_id(t.operation_instance_id, static_cast<uint8_t>(index + 0x80));
    fill_id(t.attention_group_instance_id, static_cast<uint8_t>(index + 0x90));
    fill_id(t.decomposition_plan_id, static_cast<uint8_t>(index + 0xa0));
    fill_id(t.physical_layout_id, static_cast<uint8_t>(index + 0xb0));
    return launch;
}

// The 20 argument slots of a toy capture launch; slot 19 is the placeholder view.
struct toy_arguments {
    const float * values;
    uint32_t rows = TOY_ROWS;
    uint32_t columns = TOY_COLUMNS;
    uint32_t mode;
    uint32_t padding[TOY_PADDING] = {};
    palw_cuda_producer_device_view_v3 placeholder = {};
    void * pointers[PALW_CUDA_PRODUCER_MMVQ_KERNEL_ARGUMENT_COUNT_V3];

    toy_arguments(const float * v, uint32_t m) : values(v), mode(m) {
        pointers[0] = &values;
        pointers[1] = &rows;
        pointers[2] = &columns;
        pointers[3] = &mode;
        for (uint32_t i = 0; i < TOY_PADDING; ++i) {
            pointers[4 + i] = &padding[i];
        }
        pointers[PALW_CUDA_PRODUCER_MMVQ_VIEW_ARGUMENT_INDEX_V3] = &placeholder;
    }
};

const void * toy_entry() {
    return reinterpret_cast<const void *>(&toy_capture_kernel);
}

const void * work_entry() {
    return reinterpret_cast<const void *>(&toy_attention_work_kernel);
}

palw_cuda_trace_status prepare_toy(
        palw_cuda_producer_trace_context_v3 * ctx, cudaStream_t stream,
        const palw_cuda_producer_launch_v3 & launch, palw_cuda_producer_device_view_v3 * view) {
    const palw_cuda_producer_launch_dimensions_v1 d = toy_dims();
    return palw_cuda_producer_trace_prepare_v3(ctx, stream, &launch, toy_entry(), &d,
        PALW_CUDA_PRODUCER_MMVQ_KERNEL_ARGUMENT_COUNT_V3,
        PALW_CUDA_PRODUCER_MMVQ_VIEW_ARGUMENT_INDEX_V3, view);
}

// prepare + launch of the toy capture kernel; OK or the first refusal.
palw_cuda_trace_status run_toy(
        palw_cuda_producer_trace_context_v3 * ctx, cudaStream_t stream,
        const palw_cuda_producer_launch_v3 & launch, const float * values, uint32_t mode) {
    palw_cuda_producer_device_view_v3 view = {};
    const palw_cuda_trace_status status = prepare_toy(ctx, stream, launch, &view);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    toy_arguments arguments(values, mode);
    return palw_cuda_producer_trace_launch_v3(ctx, stream, toy_entry(), arguments.pointers);
}

palw_cuda_trace_status enqueue_attention(
        palw_cuda_producer_trace_context_v3 * ctx, cudaStream_t stream,
        const palw_cuda_producer_launch_v3 & launch, const float * output, uint64_t row_stride) {
    const palw_cuda_producer_launch_dimensions_v1 d = work_dims(launch.semantic_template.base.base.output_columns);
    const palw_cuda_producer_actual_identity_v3 identity = attention_identity();
    return palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3(
        ctx, stream, &launch, work_entry(), &d, output, row_stride, &identity);
}

void launch_work(cudaStream_t stream, float * output, uint32_t columns, uint64_t row_stride, uint32_t seed) {
    const palw_cuda_producer_launch_dimensions_v1 d = work_dims(columns);
    toy_attention_work_kernel<<<dim3(d.grid_x, d.grid_y, d.grid_z), dim3(d.block_x), 0, stream>>>(
        output, columns, row_stride, seed);
}

std::vector<uint8_t> encode(const palw_cuda_trace_record_v3 & record) {
    std::vector<uint8_t> out(PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3);
    if (palw_cuda_trace_encode_record_v3(&record, out.data(), out.size()) != PALW_CUDA_TRACE_OK) {
        out.clear();
    }
    return out;
}

// A record equals its template with the expected sketch, compared canonically.
bool record_matches(const palw_cuda_trace_record_v3 & record,
        const palw_cuda_producer_launch_v3 & launch, const sketch_lanes & sketch) {
    palw_cuda_trace_record_v3 expected = launch.semantic_template;
    for (uint32_t l = 0; l < PALW_CUDA_TRACE_SKETCH_LANES; ++l) {
        expected.base.base.sketch[l] = sketch[l];
    }
    const std::vector<uint8_t> a = encode(record);
    return !a.empty() && a == encode(expected);
}

struct fixture {
    uint32_t sm_arch = 0;
    cudaStream_t stream = nullptr;
    cudaStream_t other_stream = nullptr;
    std::vector<float> toy_values;  // TOY_ROWS x TOY_COLUMNS, row-major
    float * toy_device = nullptr;
};

// Records a failed or short finalize must not have touched still hold 0xab bytes.
bool record_sentinel_intact(const palw_cuda_trace_record_v3 * records, size_t count) {
    const auto * bytes = reinterpret_cast<const uint8_t *>(records);
    for (size_t i = 0; i < count * sizeof(records[0]); ++i) {
        if (bytes[i] != 0xabu) {
            return false;
        }
    }
    return true;
}

std::vector<palw_cuda_trace_record_v3> sentinel_records(size_t count) {
    std::vector<palw_cuda_trace_record_v3> records(count);
    std::memset(records.data(), 0xab, count * sizeof(records[0]));
    return records;
}

// ---- checks --------------------------------------------------------------------------

check check_create_and_null_handles() {
    check c("create_and_null_handles");
    palw_cuda_producer_trace_context_v3 * ctx = reinterpret_cast<palw_cuda_producer_trace_context_v3 *>(1);
    EXPECT_STATUS(c, palw_cuda_producer_trace_create_v3(0, &ctx), PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT(c, ctx == nullptr);
    EXPECT_STATUS(c, palw_cuda_producer_trace_create_v3(4, nullptr), PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT_STATUS(c, palw_cuda_producer_trace_create_v3(UINT64_C(1) << 33, &ctx),
        PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT(c, palw_cuda_producer_trace_count_v3(nullptr) == 0u);
    EXPECT(c, palw_cuda_producer_trace_committed_count_v3(nullptr) == 0u);
    EXPECT(c, palw_cuda_producer_trace_faults_v3(nullptr) == 0u);
    EXPECT(c, palw_cuda_producer_trace_poisoned_v3(nullptr) == 0);
    palw_cuda_producer_trace_destroy_v3(nullptr);
    palw_cuda_trace_record_v3 record = {};
    EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(nullptr, nullptr, &record, 1),
        PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT_STATUS(c, palw_cuda_producer_trace_launch_v3(nullptr, nullptr, toy_entry(), nullptr),
        PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT_STATUS(c, palw_cuda_producer_query_grouped_capture_info_v3(nullptr),
        PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT(c, cudaGetLastError() == cudaSuccess);
    return c;
}

// A fresh context for `capacity` launches; nullptr, and `c` failed, when create refuses.
palw_cuda_producer_trace_context_v3 * create_context(check & c, uint64_t capacity) {
    palw_cuda_producer_trace_context_v3 * ctx = nullptr;
    EXPECT_STATUS(c, palw_cuda_producer_trace_create_v3(capacity, &ctx), PALW_CUDA_TRACE_OK);
    return ctx;
}

check check_positive_capture(const fixture & f) {
    check c("positive_capture_matches_host_sketch");
    const sketch_lanes expected = host_sketch(f.toy_values.data(), TOY_ROWS, TOY_COLUMNS, TOY_COLUMNS);
    std::vector<sketch_lanes> runs;
    for (int run = 0; run < 2; ++run) {  // twice: the sketch must not depend on scheduling
        palw_cuda_producer_trace_context_v3 * ctx = create_context(c, 4);
        if (ctx == nullptr) {
            return c;
        }
        const palw_cuda_producer_launch_v3 first = toy_launch(0, f.sm_arch);
        const palw_cuda_producer_launch_v3 second = toy_launch(1, f.sm_arch);
        EXPECT_STATUS(c, run_toy(ctx, f.stream, first, f.toy_device, CAPTURE_EXACT), PALW_CUDA_TRACE_OK);
        EXPECT_STATUS(c, run_toy(ctx, f.stream, second, f.toy_device, CAPTURE_EXACT), PALW_CUDA_TRACE_OK);
        EXPECT(c, palw_cuda_producer_trace_count_v3(ctx) == 2u);
        EXPECT(c, palw_cuda_producer_trace_committed_count_v3(ctx) == 0u);
        std::vector<palw_cuda_trace_record_v3> records = sentinel_records(4);
        EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 1),
            PALW_CUDA_TRACE_INVALID_ARGUMENT);  // capacity below count
        EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 4),
            PALW_CUDA_TRACE_OK);
        EXPECT(c, palw_cuda_producer_trace_committed_count_v3(ctx) == 2u);
        EXPECT(c, palw_cuda_producer_trace_faults_v3(ctx) == 0u);
        EXPECT(c, palw_cuda_producer_trace_poisoned_v3(ctx) == 0);
        EXPECT(c, record_matches(records[0], first, expected));
        EXPECT(c, record_matches(records[1], second, expected));
        EXPECT(c, records[0].base.base.kernel_sequence == 0u && records[1].base.base.kernel_sequence == 1u);
        EXPECT(c, record_sentinel_intact(&records[2], 2));
        runs.push_back({records[0].base.base.sketch[0], records[0].base.base.sketch[1],
                        records[0].base.base.sketch[2], records[0].base.base.sketch[3]});
        palw_cuda_producer_trace_destroy_v3(ctx);
    }
    EXPECT(c, runs.size() == 2u && runs[0] == runs[1] && runs[0] == expected);
    EXPECT(c, cudaGetLastError() == cudaSuccess);
    return c;
}

check check_after_finalize(const fixture & f) {
    check c("calls_after_finalize_are_refused");
    palw_cuda_producer_trace_context_v3 * ctx = create_context(c, 4);
    if (ctx == nullptr) {
        return c;
    }
    const palw_cuda_producer_launch_v3 launch = toy_launch(0, f.sm_arch);
    EXPECT_STATUS(c, run_toy(ctx, f.stream, launch, f.toy_device, CAPTURE_EXACT), PALW_CUDA_TRACE_OK);
    std::vector<palw_cuda_trace_record_v3> records = sentinel_records(4);
    EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 4),
        PALW_CUDA_TRACE_OK);
    EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 4),
        PALW_CUDA_TRACE_SEQUENCE_MISMATCH);
    palw_cuda_producer_device_view_v3 view = {};
    EXPECT_STATUS(c, prepare_toy(ctx, f.stream, toy_launch(1, f.sm_arch), &view),
        PALW_CUDA_TRACE_SEQUENCE_MISMATCH);
    EXPECT(c, view.abi_version == 0u);
    toy_arguments arguments(f.toy_device, CAPTURE_EXACT);
    EXPECT_STATUS(c, palw_cuda_producer_trace_launch_v3(ctx, f.stream, toy_entry(), arguments.pointers),
        PALW_CUDA_TRACE_SEQUENCE_MISMATCH);
    EXPECT(c, palw_cuda_producer_trace_committed_count_v3(ctx) == 1u);
    EXPECT(c, palw_cuda_producer_trace_poisoned_v3(ctx) == 0);
    palw_cuda_producer_trace_destroy_v3(ctx);
    return c;
}

// A device-side fault: faults + poisoned + finalize fails + committed stays 0.
check check_device_fault(const fixture & f, const char * name, uint32_t mode,
        uint32_t want_faults, palw_cuda_trace_status want_status) {
    check c(name);
    palw_cuda_producer_trace_context_v3 * ctx = create_context(c, 4);
    if (ctx == nullptr) {
        return c;
    }
    EXPECT_STATUS(c, run_toy(ctx, f.stream, toy_launch(0, f.sm_arch), f.toy_device, CAPTURE_EXACT),
        PALW_CUDA_TRACE_OK);
    EXPECT_STATUS(c, run_toy(ctx, f.stream, toy_launch(1, f.sm_arch), f.toy_device, mode),
        PALW_CUDA_TRACE_OK);
    EXPECT(c, palw_cuda_producer_trace_poisoned_v3(ctx) == 0);  // not known before finalize
    std::vector<palw_cuda_trace_record_v3> records = sentinel_records(4);
    c.expect_status(palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 4),
        want_status, "finalize");
    EXPECT(c, palw_cuda_producer_trace_faults_v3(ctx) == want_faults);
    EXPECT(c, palw_cuda_producer_trace_poisoned_v3(ctx) == 1);
    EXPECT(c, palw_cuda_producer_trace_committed_count_v3(ctx) == 0u);
    EXPECT(c, palw_cuda_producer_trace_count_v3(ctx) == 2u);
    EXPECT(c, record_sentinel_intact(records.data(), records.size()));
    EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 4),
        PALW_CUDA_TRACE_POISONED);
    EXPECT_STATUS(c, run_toy(ctx, f.stream, toy_launch(2, f.sm_arch), f.toy_device, CAPTURE_EXACT),
        PALW_CUDA_TRACE_POISONED);
    palw_cuda_producer_trace_destroy_v3(ctx);
    EXPECT(c, cudaGetLastError() == cudaSuccess);
    return c;
}

check check_capacity_overflow(const fixture & f, float * attention_output) {
    check c("capacity_overflow_poisons");
    palw_cuda_producer_trace_context_v3 * ctx = create_context(c, 1);
    if (ctx == nullptr) {
        return c;
    }
    EXPECT_STATUS(c, run_toy(ctx, f.stream, toy_launch(0, f.sm_arch), f.toy_device, CAPTURE_EXACT),
        PALW_CUDA_TRACE_OK);
    palw_cuda_producer_device_view_v3 view = {};
    EXPECT_STATUS(c, prepare_toy(ctx, f.stream, toy_launch(1, f.sm_arch), &view),
        PALW_CUDA_TRACE_CAPACITY_EXCEEDED);
    EXPECT(c, palw_cuda_producer_trace_faults_v3(ctx) == PALW_CUDA_PRODUCER_FAULT_CAPACITY_OVERFLOW);
    EXPECT(c, palw_cuda_producer_trace_poisoned_v3(ctx) == 1);
    EXPECT_STATUS(c, enqueue_attention(ctx, f.stream, attention_launch(1, 256, f.sm_arch),
        attention_output, 256), PALW_CUDA_TRACE_POISONED);
    std::vector<palw_cuda_trace_record_v3> records = sentinel_records(2);
    EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 2),
        PALW_CUDA_TRACE_POISONED);
    EXPECT(c, palw_cuda_producer_trace_committed_count_v3(ctx) == 0u);
    EXPECT(c, palw_cuda_producer_trace_count_v3(ctx) == 1u);
    EXPECT(c, record_sentinel_intact(records.data(), records.size()));
    palw_cuda_producer_trace_destroy_v3(ctx);
    return c;
}

// Refused calls change nothing: after all of them one good launch still finalizes.
check check_out_of_order(const fixture & f, float * attention_output) {
    check c("out_of_order_calls_are_refused");
    palw_cuda_producer_trace_context_v3 * ctx = create_context(c, 4);
    if (ctx == nullptr) {
        return c;
    }
    const palw_cuda_producer_launch_v3 launch = toy_launch(0, f.sm_arch);
    toy_arguments arguments(f.toy_device, CAPTURE_EXACT);
    palw_cuda_producer_device_view_v3 view = {};
    const palw_cuda_producer_launch_dimensions_v1 dims = toy_dims();

    EXPECT_STATUS(c, palw_cuda_producer_trace_launch_v3(ctx, f.stream, toy_entry(), arguments.pointers),
        PALW_CUDA_TRACE_SEQUENCE_MISMATCH);
    EXPECT_STATUS(c, palw_cuda_producer_trace_prepare_v3(ctx, f.stream, &launch, toy_entry(), &dims,
        19, 18, &view), PALW_CUDA_TRACE_INVALID_ARGUMENT);
    palw_cuda_producer_launch_v3 malformed = launch;
    malformed.semantic_template.base.base.schema_version = 2;
    EXPECT_STATUS(c, prepare_toy(ctx, f.stream, malformed, &view), PALW_CUDA_TRACE_INVALID_ARGUMENT);
    palw_cuda_producer_launch_dimensions_v1 other_dims = dims;
    other_dims.block_x = 64;
    EXPECT_STATUS(c, palw_cuda_producer_trace_prepare_v3(ctx, f.stream, &launch, toy_entry(), &other_dims,
        PALW_CUDA_PRODUCER_MMVQ_KERNEL_ARGUMENT_COUNT_V3, PALW_CUDA_PRODUCER_MMVQ_VIEW_ARGUMENT_INDEX_V3,
        &view), PALW_CUDA_TRACE_IDENTITY_MISMATCH);
    palw_cuda_producer_launch_v3 other_binding = launch;
    other_binding.kernel_binding.num_regs += 1;
    EXPECT_STATUS(c, prepare_toy(ctx, f.stream, other_binding, &view), PALW_CUDA_TRACE_IDENTITY_MISMATCH);
    palw_cuda_producer_launch_v3 other_arch = launch;
    other_arch.kernel_binding.sm_arch += 1;
    EXPECT_STATUS(c, prepare_toy(ctx, f.stream, other_arch, &view), PALW_CUDA_TRACE_IDENTITY_MISMATCH);
    EXPECT(c, view.abi_version == 0u);

    EXPECT_STATUS(c, prepare_toy(ctx, f.stream, launch, &view), PALW_CUDA_TRACE_OK);
    EXPECT(c, view.abi_version == PALW_CUDA_PRODUCER_DEVICE_VIEW_ABI_VERSION_V3 && view.record_index == 0u &&
        view.output_rows == TOY_ROWS && view.output_columns == TOY_COLUMNS && view.slot != nullptr &&
        view.capture_bitmap != nullptr);
    palw_cuda_producer_device_view_v3 second_view = {};
    EXPECT_STATUS(c, prepare_toy(ctx, f.stream, toy_launch(1, f.sm_arch), &second_view),
        PALW_CUDA_TRACE_PENDING);
    EXPECT_STATUS(c, enqueue_attention(ctx, f.stream, attention_launch(1, 256, f.sm_arch),
        attention_output, 256), PALW_CUDA_TRACE_PENDING);
    std::vector<palw_cuda_trace_record_v3> records = sentinel_records(4);
    EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 4),
        PALW_CUDA_TRACE_INCOMPLETE);
    EXPECT_STATUS(c, palw_cuda_producer_trace_launch_v3(ctx, f.stream, work_entry(), arguments.pointers),
        PALW_CUDA_TRACE_IDENTITY_MISMATCH);
    EXPECT_STATUS(c, palw_cuda_producer_trace_launch_v3(ctx, f.other_stream, toy_entry(), arguments.pointers),
        PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT_STATUS(c, palw_cuda_producer_trace_launch_v3(ctx, f.stream, toy_entry(), arguments.pointers),
        PALW_CUDA_TRACE_OK);
    EXPECT(c, arguments.pointers[PALW_CUDA_PRODUCER_MMVQ_VIEW_ARGUMENT_INDEX_V3] == &arguments.placeholder);
    EXPECT_STATUS(c, palw_cuda_producer_trace_launch_v3(ctx, f.stream, toy_entry(), arguments.pointers),
        PALW_CUDA_TRACE_SEQUENCE_MISMATCH);
    EXPECT_STATUS(c, prepare_toy(ctx, f.other_stream, toy_launch(1, f.sm_arch), &view),
        PALW_CUDA_TRACE_INVALID_ARGUMENT);  // one stream per context

    EXPECT(c, palw_cuda_producer_trace_poisoned_v3(ctx) == 0 && palw_cuda_producer_trace_faults_v3(ctx) == 0u);
    EXPECT(c, palw_cuda_producer_trace_count_v3(ctx) == 1u);
    EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.other_stream, records.data(), 4),
        PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 4),
        PALW_CUDA_TRACE_OK);
    const sketch_lanes expected = host_sketch(f.toy_values.data(), TOY_ROWS, TOY_COLUMNS, TOY_COLUMNS);
    EXPECT(c, record_matches(records[0], launch, expected));
    palw_cuda_producer_trace_destroy_v3(ctx);
    EXPECT(c, cudaGetLastError() == cudaSuccess);
    return c;
}

// MMVQ capture and grouped final-output records interleaved in one stream,
// including a tile large enough to loop the collector and grow the bitmap arena.
check check_grouped_enqueue(const fixture & f) {
    check c("grouped_final_output_matches_host_readback");
    struct tile {
        uint32_t columns;
        uint64_t row_stride;
        uint32_t seed;
        float * device = nullptr;
    };
    std::vector<tile> tiles = {{256, 260, 0x1234u}, {300000, 300000, 0x9876u}, {128, 128, 0x4242u}};
    for (tile & t : tiles) {
        if (cudaMalloc(&t.device, HEADS * t.row_stride * sizeof(float)) != cudaSuccess) {
            c.expect(false, "cudaMalloc of a work output");
            return c;
        }
    }
    palw_cuda_producer_trace_context_v3 * ctx = create_context(c, 8);
    std::vector<palw_cuda_producer_launch_v3> launches;
    if (ctx != nullptr) {
        launches.push_back(toy_launch(0, f.sm_arch));
        EXPECT_STATUS(c, run_toy(ctx, f.stream, launches.back(), f.toy_device, CAPTURE_EXACT),
            PALW_CUDA_TRACE_OK);
        for (size_t i = 0; i < tiles.size(); ++i) {
            launch_work(f.stream, tiles[i].device, tiles[i].columns, tiles[i].row_stride, tiles[i].seed);
            launches.push_back(attention_launch(launches.size(), tiles[i].columns, f.sm_arch));
            EXPECT_STATUS(c, enqueue_attention(ctx, f.stream, launches.back(), tiles[i].device,
                tiles[i].row_stride), PALW_CUDA_TRACE_OK);
        }
        launches.push_back(toy_launch(launches.size(), f.sm_arch));
        EXPECT_STATUS(c, run_toy(ctx, f.stream, launches.back(), f.toy_device, CAPTURE_EXACT),
            PALW_CUDA_TRACE_OK);
        std::vector<palw_cuda_trace_record_v3> records = sentinel_records(8);
        EXPECT_STATUS(c, palw_cuda_producer_trace_finalize_v3(ctx, f.stream, records.data(), 8),
            PALW_CUDA_TRACE_OK);
        EXPECT(c, palw_cuda_producer_trace_committed_count_v3(ctx) == launches.size());
        const sketch_lanes toy = host_sketch(f.toy_values.data(), TOY_ROWS, TOY_COLUMNS, TOY_COLUMNS);
        EXPECT(c, record_matches(records[0], launches[0], toy));
        EXPECT(c, record_matches(records[launches.size() - 1], launches.back(), toy));
        for (size_t i = 0; i < tiles.size(); ++i) {
            std::vector<float> readback(HEADS * tiles[i].row_stride);
            EXPECT(c, cudaMemcpy(readback.data(), tiles[i].device, readback.size() * sizeof(float),
                cudaMemcpyDeviceToHost) == cudaSuccess);
            const sketch_lanes expected =
                host_sketch(readback.data(), HEADS, tiles[i].columns, tiles[i].row_stride);
            c.expect(record_matches(records[i + 1], launches[i + 1], expected),
                "grouped record " + std::to_string(i + 1) + " sketch or fields differ from the host readback");
        }
        palw_cuda_producer_trace_destroy_v3(ctx);
    }
    for (tile & t : tiles) {
        (void) cudaFree(t.device);
    }
    EXPECT(c, cudaGetLastError() == cudaSuccess);
    return c;
}

check check_grouped_refusals(const fixture & f, float * attention_output) {
    check c("grouped_enqueue_refusals");
    palw_cuda_producer_trace_context_v3 * ctx = create_context(c, 4);
    if (ctx == nullptr) {
        return c;
    }
    const palw_cuda_producer_launch_v3 launch = attention_launch(0, 256, f.sm_arch);
    const palw_cuda_producer_launch_dimensions_v1 dims = work_dims(256);
    palw_cuda_producer_actual_identity_v3 identity = attention_identity();
    EXPECT_STATUS(c, palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3(
        ctx, f.stream, &launch, work_entry(), &dims, nullptr, 256, &identity), PALW_CUDA_TRACE_INVALID_ARGUMENT);
    EXPECT_STATUS(c, palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3(
        ctx, f.stream, &launch, work_entry(), &dims, attention_output, 255, &identity),
        PALW_CUDA_TRACE_INVALID_ARGUMENT);
    palw_cuda_producer_actual_identity_v3 other_capture = identity;
    other_capture.capture_implementation_id[0] ^= 1u;
    EXPECT_STATUS(c, palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3(
        ctx, f.stream, &launch, work_entry(), &dims, attention_output, 256, &other_capture),
        PALW_CUDA_TRACE_IDENTITY_MISMATCH);
    palw_cuda_producer_actual_identity_v3 other_variant = identity;
    other_variant.producer_variant_id[3] ^= 1u;
    EXPECT_STATUS(c, palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3(
        ctx, f.stream, &launch, work_entry(), &dims, attention_output, 256, &other_variant),
        PALW_CUDA_TRACE_IDENTITY_MISMATCH);
    palw_cuda_producer_launch_dimensions_v1 other_dims = dims;
    other_dims.grid_y = 16;
    EXPECT_STATUS(c, palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3(
        ctx, f.stream, &launch, work_entry(), &other_dims, attention_output, 256, &identity),
        PALW_CUDA_TRACE_IDENTITY_MISMATCH);
    palw_cuda_producer_launch_v3 other_binding = launch;
    other_binding.kernel_binding.local_memory_bytes += 16;
    EXPECT_STATUS(c, enqueue_attention(ctx, f.stream, other_binding, attention_output, 256),
        PALW_CUDA_TRACE_IDENTITY_MISMATCH);
    EXPECT_STATUS(c, enqueue_attention(ctx, f.stream, toy_launch(0, f.sm_arch), attention_output, 256),
        PALW_CUDA_TRACE_IDENTITY_MISMATCH);  // an MMVQ template is not a grouped one
    EXPECT(c, palw_cuda_producer_trace_count_v3(ctx) == 0u && palw_cuda_producer_trace_poisoned_v3(ctx) == 0);
    palw_cuda_producer_trace_destroy_v3(ctx);
    EXPECT(c, cudaGetLastError() == cudaSuccess);
    return c;
}

check check_grouped_capture_info(const fixture & f) {
    check c("query_grouped_capture_info");
    palw_cuda_producer_grouped_capture_info_v3 info;
    std::memset(&info, 0xff, sizeof(info));
    EXPECT_STATUS(c, palw_cuda_producer_query_grouped_capture_info_v3(&info), PALW_CUDA_TRACE_OK);
    EXPECT(c, info.abi_version == PALW_CUDA_PRODUCER_GROUPED_CAPTURE_INFO_ABI_VERSION_V3);
    EXPECT(c, info.struct_size == sizeof(info));
    EXPECT(c, info.sm_arch == f.sm_arch);
    EXPECT(c, info.binary_version > 0 && info.ptx_version > 0 && info.num_regs > 0);
    EXPECT(c, info.max_threads_per_block >= 256);
    EXPECT(c, std::memcmp(info.capture_implementation_id, GROUPED_CAPTURE_ID, PALW_CUDA_PRODUCER_ID_SIZE) == 0);
    EXPECT(c, cudaGetLastError() == cudaSuccess);
    return c;
}

std::vector<float> make_toy_values() {
    std::vector<float> values(TOY_ROWS * TOY_COLUMNS);
    for (size_t i = 0; i < values.size(); ++i) {
        values[i] = std::ldexp(static_cast<float>(i) - 100.5f, static_cast<int>(i % 7) - 3);
    }
    uint32_t nan_bits = 0x7fa00001u;  // payload NaN: counts as the canonical NaN
    std::memcpy(&values[3], &nan_bits, sizeof(nan_bits));
    values[4] = -0.0f;
    values[5] = INFINITY;
    values[6] = 1e-45f;  // a denormal
    return values;
}

}  // namespace

int main() {
    fixture f;
    int device = -1;
    int major = 0;
    int minor = 0;
    cudaDeviceProp properties = {};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&properties, device) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        std::printf("{\"schema\":\"palw.producer_selftest.v1\",\"ok\":false,\"error\":\"no usable CUDA device\"}\n");
        return 2;
    }
    f.sm_arch = static_cast<uint32_t>(major * 10 + minor);
    f.toy_values = make_toy_values();
    float * attention_output = nullptr;
    if (cudaStreamCreateWithFlags(&f.stream, cudaStreamNonBlocking) != cudaSuccess ||
            cudaStreamCreateWithFlags(&f.other_stream, cudaStreamNonBlocking) != cudaSuccess ||
            cudaMalloc(&f.toy_device, f.toy_values.size() * sizeof(float)) != cudaSuccess ||
            cudaMemcpy(f.toy_device, f.toy_values.data(), f.toy_values.size() * sizeof(float),
                cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMalloc(&attention_output, HEADS * 256 * sizeof(float)) != cudaSuccess ||
            cudaMemset(attention_output, 0, HEADS * 256 * sizeof(float)) != cudaSuccess) {
        std::printf("{\"schema\":\"palw.producer_selftest.v1\",\"ok\":false,\"error\":\"setup failed\"}\n");
        return 2;
    }

    std::vector<check> checks;
    checks.push_back(check_create_and_null_handles());
    checks.push_back(check_positive_capture(f));
    checks.push_back(check_after_finalize(f));
    checks.push_back(check_device_fault(f, "duplicate_capture", CAPTURE_DUPLICATE,
        PALW_CUDA_PRODUCER_FAULT_DUPLICATE_CAPTURE, PALW_CUDA_TRACE_INCOMPLETE));
    checks.push_back(check_device_fault(f, "out_of_range_capture", CAPTURE_OUT_OF_RANGE,
        PALW_CUDA_PRODUCER_FAULT_CAPTURE_OUT_OF_RANGE, PALW_CUDA_TRACE_INCOMPLETE));
    checks.push_back(check_device_fault(f, "identity_mismatch", CAPTURE_WRONG_IDENTITY,
        PALW_CUDA_PRODUCER_FAULT_IDENTITY_MISMATCH | PALW_CUDA_PRODUCER_FAULT_MISSING_CAPTURE,
        PALW_CUDA_TRACE_IDENTITY_MISMATCH));
    checks.push_back(check_device_fault(f, "missing_capture", CAPTURE_MISSING,
        PALW_CUDA_PRODUCER_FAULT_MISSING_CAPTURE, PALW_CUDA_TRACE_INCOMPLETE));
    checks.push_back(check_capacity_overflow(f, attention_output));
    checks.push_back(check_out_of_order(f, attention_output));
    checks.push_back(check_grouped_enqueue(f));
    checks.push_back(check_grouped_refusals(f, attention_output));
    checks.push_back(check_grouped_capture_info(f));
    check sticky("no_sticky_cuda_error");
    EXPECT(sticky, cudaDeviceSynchronize() == cudaSuccess);
    EXPECT(sticky, cudaGetLastError() == cudaSuccess);
    checks.push_back(sticky);

    bool all_ok = true;
    std::string results;
    std::string failures;
    for (const check & c : checks) {
        all_ok = all_ok && c.ok();
        results += (results.empty() ? "" : ",") + std::string("\"") + c.name() + "\":" + (c.ok() ? "true" : "false");
        if (!c.ok()) {
            failures += (failures.empty() ? "" : ",") + std::string("{\"check\":\"") + c.name() +
                "\",\"detail\":\"" + json_escape(c.detail()) + "\"}";
        }
    }
    std::printf("{\"schema\":\"palw.producer_selftest.v1\",\"device\":\"%s\",\"sm_arch\":%u,"
        "\"ok\":%s,\"checks\":{%s},\"failures\":[%s]}\n",
        json_escape(properties.name).c_str(), f.sm_arch, all_ok ? "true" : "false",
        results.c_str(), failures.c_str());

    (void) cudaFree(attention_output);
    (void) cudaFree(f.toy_device);
    (void) cudaStreamDestroy(f.other_stream);
    (void) cudaStreamDestroy(f.stream);
    return all_ok ? 0 : 1;
}
