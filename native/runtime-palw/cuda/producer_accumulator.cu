// The PALW producer trace context: accepts approved launches in order, runs
// them with a device view that captures into one slot per record, and turns
// the slots into V3 records at finalize. Lifecycle, statuses and fault bits:
// native/SPEC.md. Single-threaded per context; the caller sets the device.

#include "palw_cuda_llama_mmvq.h"
#include "palw_cuda_producer_trace.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

namespace {

// Bits for the whole pinned Qwen3-8B stream (~2.3 M elements, ~290 KiB) fit
// in the first chunk; a longer stream grows the arena chunk by chunk.
constexpr uint64_t INITIAL_BITMAP_BYTES = UINT64_C(1) << 20;
constexpr unsigned int COLLECTOR_BLOCK_THREADS = 256;
constexpr unsigned int COLLECTOR_MAX_BLOCKS = 1024;
constexpr unsigned int FULL_WARP = 0xffffffffu;
constexpr size_t ATTRIBUTE_CACHE_ENTRIES = 8;

constexpr uint8_t GROUPED_CAPTURE_ID[PALW_CUDA_PRODUCER_ID_SIZE] = {
    PALW_CUDA_PRODUCER_GROUPED_CAPTURE_ID_BYTES_V1,
};

static_assert(COLLECTOR_BLOCK_THREADS % 32u == 0u,
    "the collector claims bitmap words one warp at a time");

struct bitmap_chunk {
    unsigned int * words = nullptr;
    uint64_t capacity_words = 0;
    uint64_t used_words = 0;
};

// cudaFuncGetAttributes of one entry point on one device, plus that device's sm_arch.
struct kernel_attributes {
    const void * entry_point = nullptr;
    int device = -1;
    uint32_t sm_arch = 0;
    cudaFuncAttributes attributes = {};
};

struct pending_launch {
    bool active = false;
    const void * entry_point = nullptr;
    palw_cuda_stream_t stream = nullptr;
    palw_cuda_producer_launch_dimensions_v1 dimensions = {};
    palw_cuda_producer_device_view_v3 view = {};
    palw_cuda_trace_record_v3 semantic_template = {};
};

}  // namespace

struct palw_cuda_producer_trace_context_v3 {
    int device = -1;
    uint64_t capacity = 0;
    uint64_t count = 0;
    uint64_t committed = 0;
    uint32_t faults = 0;
    bool poisoned = false;
    bool finalized = false;
    // All records of one context run on one stream: stream order is what
    // orders bitmap zeroing, capture and the finalize read-back.
    bool stream_bound = false;
    palw_cuda_stream_t stream = nullptr;
    std::vector<palw_cuda_trace_record_v3> templates;  // [capacity], filled up to count
    palw_cuda_producer_device_slot_v3 * slots = nullptr;  // device [capacity], zeroed
    std::vector<bitmap_chunk> chunks;
    pending_launch pending;
    kernel_attributes attribute_cache[ATTRIBUTE_CACHE_ENTRIES];
    size_t attribute_cache_size = 0;
};

// The grouped final-output collector: sketches output[row * stride + column]
// for every element of the record's tile, with the device hook's semantics.
// A warp claims the 32 bits of one bitmap word at once (its elements are
// consecutive and word-aligned) and adds its terms with one atomic per lane.
__global__ void __launch_bounds__(COLLECTOR_BLOCK_THREADS)
palw_cuda_producer_grouped_final_output_collector_f32_v3(
        const float * __restrict__ output,
        uint64_t output_row_stride,
        uint32_t output_rows,
        uint32_t output_columns,
        palw_cuda_producer_device_slot_v3 * slot,
        unsigned int * capture_bitmap) {
    const uint64_t total = static_cast<uint64_t>(output_rows) * output_columns;
    const unsigned int lane = threadIdx.x & 31u;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    unsigned long long lanes[PALW_CUDA_TRACE_SKETCH_LANES] = {};
    unsigned long long captures = 0;
    unsigned int faults = 0;

    // warp_base is uniform across the warp, so every lane runs every iteration.
    for (uint64_t warp_base = static_cast<uint64_t>(blockIdx.x) * blockDim.x + (threadIdx.x - lane);
            warp_base < total; warp_base += stride) {
        const uint64_t element = warp_base + lane;
        const bool active = element < total;
        uint32_t value_bits = 0;
        if (active) {
            const uint64_t row = element / output_columns;
            const uint64_t column = element - row * output_columns;
            value_bits = __float_as_uint(output[row * output_row_stride + column]);
        }
        const unsigned int claim = __ballot_sync(FULL_WARP, active);
        unsigned int before = 0;
        if (lane == 0u) {
            before = atomicOr(&capture_bitmap[warp_base >> 5], claim);
        }
        before = __shfl_sync(FULL_WARP, before, 0);
        if (active) {
            if ((before >> lane) & 1u) {
                faults |= PALW_CUDA_PRODUCER_FAULT_DUPLICATE_CAPTURE;
            } else {
                palw_cuda_producer_add_terms_v3(lanes, element, value_bits);
                ++captures;
            }
        }
    }

    // Sums mod 2^64 commute, so reducing before the atomics changes nothing.
    for (unsigned int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (uint32_t l = 0; l < PALW_CUDA_TRACE_SKETCH_LANES; ++l) {
            lanes[l] += __shfl_down_sync(FULL_WARP, lanes[l], offset);
        }
        captures += __shfl_down_sync(FULL_WARP, captures, offset);
        faults |= __shfl_down_sync(FULL_WARP, faults, offset);
    }
    if (lane == 0u) {
        if (captures != 0u) {
#pragma unroll
            for (uint32_t l = 0; l < PALW_CUDA_TRACE_SKETCH_LANES; ++l) {
                atomicAdd(&slot->sketch[l], lanes[l]);
            }
            atomicAdd(&slot->captures, captures);
        }
        if (faults != 0u) {
            atomicOr(&slot->faults, faults);
        }
    }
}

// nvcc names anonymous namespaces, so host helpers here are plain `static`.
using context_t = palw_cuda_producer_trace_context_v3;

static palw_cuda_trace_status poison(context_t * ctx, uint32_t fault_bits, palw_cuda_trace_status status) {
    ctx->faults |= fault_bits;
    ctx->poisoned = true;
    return status;
}

// Every CUDA failure poisons: the stream can no longer be proven complete.
static palw_cuda_trace_status cuda_failure(context_t * ctx) {
    (void) cudaGetLastError();
    return poison(ctx, PALW_CUDA_PRODUCER_FAULT_CUDA_ERROR, PALW_CUDA_TRACE_CUDA_ERROR);
}

// The slots and bitmaps live on the device current at create; work for this
// context must run there too.
static bool on_context_device(const context_t * ctx) {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void) cudaGetLastError();
        return false;
    }
    return device == ctx->device;
}

// Refusals that prepare, enqueue and finalize share, in this order (SPEC.md section 6);
// a pending prepare refuses with `pending_status`: PENDING, or INCOMPLETE for finalize.
static palw_cuda_trace_status check_accepting(const context_t * ctx, palw_cuda_stream_t stream,
        palw_cuda_trace_status pending_status = PALW_CUDA_TRACE_PENDING) {
    if (ctx->finalized) {
        return PALW_CUDA_TRACE_SEQUENCE_MISMATCH;
    }
    if (ctx->poisoned) {
        return PALW_CUDA_TRACE_POISONED;
    }
    if (ctx->pending.active) {
        return pending_status;
    }
    if ((ctx->stream_bound && ctx->stream != stream) || !on_context_device(ctx)) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    return PALW_CUDA_TRACE_OK;
}

// Prepare's and enqueue's refusals: check_accepting's, then a stream longer than
// declared, which can never be complete, so it poisons.
static palw_cuda_trace_status check_room(context_t * ctx, palw_cuda_stream_t stream) {
    const palw_cuda_trace_status refused = check_accepting(ctx, stream);
    if (refused != PALW_CUDA_TRACE_OK) {
        return refused;
    }
    if (ctx->count >= ctx->capacity) {
        return poison(ctx, PALW_CUDA_PRODUCER_FAULT_CAPACITY_OVERFLOW,
            PALW_CUDA_TRACE_CAPACITY_EXCEEDED);
    }
    return PALW_CUDA_TRACE_OK;
}

static bool dimensions_match(
        const palw_cuda_trace_record_v3 & t, const palw_cuda_producer_launch_dimensions_v1 & d) {
    return d.grid_x == t.grid_x && d.grid_y == t.grid_y && d.grid_z == t.grid_z &&
        d.block_x == t.block_x && d.block_y == t.block_y && d.block_z == t.block_z &&
        d.dynamic_shared_memory_bytes == static_cast<uint64_t>(t.dynamic_shared_memory_bytes);
}

static palw_cuda_producer_actual_identity_v3 template_identity(const palw_cuda_trace_record_v3 & t) {
    palw_cuda_producer_actual_identity_v3 identity = {};
    std::memcpy(identity.producer_variant_id, t.base.producer_variant_id, PALW_CUDA_PRODUCER_ID_SIZE);
    std::memcpy(identity.work_entry_point_id, t.work_entry_point_id, PALW_CUDA_PRODUCER_ID_SIZE);
    std::memcpy(identity.capture_implementation_id, t.capture_implementation_id,
        PALW_CUDA_PRODUCER_ID_SIZE);
    return identity;
}

static cudaError_t query_attributes(const void * entry_point, kernel_attributes & out) {
    int device = -1;
    int major = 0;
    int minor = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error == cudaSuccess) {
        error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    }
    if (error == cudaSuccess) {
        error = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    }
    if (error == cudaSuccess) {
        error = cudaFuncGetAttributes(&out.attributes, entry_point);
    }
    if (error != cudaSuccess) {
        (void) cudaGetLastError();
        return error;
    }
    out.entry_point = entry_point;
    out.device = device;
    out.sm_arch = static_cast<uint32_t>(major * 10 + minor);
    return cudaSuccess;
}

// Attributes cannot change for a loaded kernel, so a context asks once per entry point.
static cudaError_t cached_attributes(context_t * ctx, const void * entry_point, kernel_attributes & out) {
    int device = -1;
    const cudaError_t device_error = cudaGetDevice(&device);
    if (device_error != cudaSuccess) {
        (void) cudaGetLastError();
        return device_error;
    }
    for (size_t i = 0; i < ctx->attribute_cache_size; ++i) {
        const kernel_attributes & cached = ctx->attribute_cache[i];
        if (cached.entry_point == entry_point && cached.device == device) {
            out = cached;
            return cudaSuccess;
        }
    }
    const cudaError_t error = query_attributes(entry_point, out);
    if (error == cudaSuccess && ctx->attribute_cache_size < ATTRIBUTE_CACHE_ENTRIES) {
        ctx->attribute_cache[ctx->attribute_cache_size++] = out;
    }
    return error;
}

static bool binding_matches(const palw_cuda_producer_kernel_binding_v3 & b, const kernel_attributes & k) {
    const cudaFuncAttributes & a = k.attributes;
    return b.sm_arch == k.sm_arch && b.binary_version == a.binaryVersion &&
        b.ptx_version == a.ptxVersion && b.num_regs == a.numRegs &&
        b.max_threads_per_block == a.maxThreadsPerBlock &&
        b.static_shared_memory_bytes == static_cast<uint64_t>(a.sharedSizeBytes) &&
        b.local_memory_bytes == static_cast<uint64_t>(a.localSizeBytes);
}

// OK, IDENTITY_MISMATCH (attributes differ) or CUDA_ERROR (poisons).
static palw_cuda_trace_status check_binding(
        context_t * ctx, const void * entry_point, const palw_cuda_producer_kernel_binding_v3 & binding) {
    kernel_attributes attributes;
    if (cached_attributes(ctx, entry_point, attributes) != cudaSuccess) {
        return cuda_failure(ctx);
    }
    return binding_matches(binding, attributes)
        ? PALW_CUDA_TRACE_OK
        : PALW_CUDA_TRACE_IDENTITY_MISMATCH;
}

static cudaError_t allocate_zeroed(void ** pointer, size_t bytes, cudaStream_t stream) {
    cudaError_t error = cudaMalloc(pointer, bytes);
    if (error == cudaSuccess) {
        error = cudaMemsetAsync(*pointer, 0, bytes, stream);
        if (error != cudaSuccess) {
            (void) cudaFree(*pointer);
            *pointer = nullptr;
        }
    }
    return error;
}

// A fresh, zeroed bitmap region of `elements` bits. Regions are never reused,
// so zeroing once per chunk (ordered before use on the context's stream) suffices.
static palw_cuda_trace_status take_bitmap_region(
        context_t * ctx, palw_cuda_stream_t stream, uint64_t elements, unsigned int ** out) {
    const uint64_t words = (elements + 31u) / 32u;
    if (ctx->chunks.empty() ||
            ctx->chunks.back().capacity_words - ctx->chunks.back().used_words < words) {
        const uint64_t bytes = std::max(INITIAL_BITMAP_BYTES, words * sizeof(unsigned int));
        bitmap_chunk chunk;
        try {
            ctx->chunks.reserve(ctx->chunks.size() + 1);
        } catch (const std::bad_alloc &) {
            return poison(ctx, PALW_CUDA_PRODUCER_FAULT_CUDA_ERROR, PALW_CUDA_TRACE_CUDA_ERROR);
        }
        void * memory = nullptr;
        if (allocate_zeroed(&memory, static_cast<size_t>(bytes), stream) != cudaSuccess) {
            return cuda_failure(ctx);
        }
        chunk.words = static_cast<unsigned int *>(memory);
        chunk.capacity_words = bytes / sizeof(unsigned int);
        ctx->chunks.push_back(chunk);  // cannot throw: reserved above
    }
    bitmap_chunk & chunk = ctx->chunks.back();
    *out = chunk.words + chunk.used_words;
    chunk.used_words += words;
    return PALW_CUDA_TRACE_OK;
}

static palw_cuda_producer_device_view_v3 make_view(
        context_t * ctx, const palw_cuda_trace_record_v3 & t, unsigned int * bitmap) {
    palw_cuda_producer_device_view_v3 view = {};
    view.abi_version = PALW_CUDA_PRODUCER_DEVICE_VIEW_ABI_VERSION_V3;
    view.record_index = static_cast<uint32_t>(ctx->count);
    view.output_rows = t.base.base.output_rows;
    view.output_columns = t.base.base.output_columns;
    view.slot = ctx->slots + ctx->count;
    view.capture_bitmap = bitmap;
    view.expected_identity = template_identity(t);
    return view;
}

static void accept(context_t * ctx, palw_cuda_stream_t stream, const palw_cuda_trace_record_v3 & t) {
    ctx->templates[static_cast<size_t>(ctx->count)] = t;
    ++ctx->count;
    ctx->stream = stream;
    ctx->stream_bound = true;
}

static void release_device_memory(context_t * ctx) {
    if (ctx->slots != nullptr) {
        (void) cudaFree(ctx->slots);
        ctx->slots = nullptr;
    }
    for (bitmap_chunk & chunk : ctx->chunks) {
        (void) cudaFree(chunk.words);
    }
    ctx->chunks.clear();
    (void) cudaGetLastError();
}

palw_cuda_trace_status palw_cuda_producer_trace_create_v3(
        uint64_t capacity, palw_cuda_producer_trace_context_v3 ** out_context) {
    if (out_context == nullptr) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    *out_context = nullptr;
    // record_index in the device view is 32-bit.
    if (capacity == 0u || capacity > UINT32_MAX) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    context_t * ctx = new (std::nothrow) context_t();
    if (ctx == nullptr) {
        return PALW_CUDA_TRACE_CUDA_ERROR;
    }
    ctx->capacity = capacity;
    try {
        ctx->templates.resize(static_cast<size_t>(capacity));
        ctx->chunks.reserve(4);
    } catch (const std::bad_alloc &) {
        delete ctx;
        return PALW_CUDA_TRACE_CUDA_ERROR;
    }

    // Zero on the default stream and wait, so the memory is zero before any
    // stream (ggml's are non-blocking) can touch it.
    void * slots = nullptr;
    void * bitmap = nullptr;
    cudaError_t error = cudaGetDevice(&ctx->device);
    if (error == cudaSuccess) {
        error = allocate_zeroed(&slots, static_cast<size_t>(capacity) * sizeof(palw_cuda_producer_device_slot_v3), 0);
    }
    if (error == cudaSuccess) {
        error = allocate_zeroed(&bitmap, static_cast<size_t>(INITIAL_BITMAP_BYTES), 0);
    }
    if (error == cudaSuccess) {
        error = cudaStreamSynchronize(0);
    }
    ctx->slots = static_cast<palw_cuda_producer_device_slot_v3 *>(slots);
    if (bitmap != nullptr) {
        bitmap_chunk chunk;
        chunk.words = static_cast<unsigned int *>(bitmap);
        chunk.capacity_words = INITIAL_BITMAP_BYTES / sizeof(unsigned int);
        ctx->chunks.push_back(chunk);  // reserved above
    }
    if (error != cudaSuccess) {
        release_device_memory(ctx);
        delete ctx;
        return PALW_CUDA_TRACE_CUDA_ERROR;
    }
    *out_context = ctx;
    return PALW_CUDA_TRACE_OK;
}

void palw_cuda_producer_trace_destroy_v3(palw_cuda_producer_trace_context_v3 * context) {
    if (context == nullptr) {
        return;
    }
    // Free on the owning device, after any capture still in flight has finished.
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != context->device &&
        cudaSetDevice(context->device) == cudaSuccess;
    (void) cudaDeviceSynchronize();
    release_device_memory(context);
    if (switched) {
        (void) cudaSetDevice(previous);
    }
    (void) cudaGetLastError();
    delete context;
}

palw_cuda_trace_status palw_cuda_producer_trace_prepare_v3(
        palw_cuda_producer_trace_context_v3 * context,
        palw_cuda_stream_t stream,
        const palw_cuda_producer_launch_v3 * expected_launch,
        const void * entry_point,
        const palw_cuda_producer_launch_dimensions_v1 * dimensions,
        uint32_t kernel_argument_count,
        uint32_t view_argument_index,
        palw_cuda_producer_device_view_v3 * out_view) {
    if (out_view != nullptr) {
        *out_view = {};
    }
    if (context == nullptr || expected_launch == nullptr || entry_point == nullptr ||
            dimensions == nullptr || out_view == nullptr) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    palw_cuda_trace_status status = check_room(context, stream);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    if (kernel_argument_count != PALW_CUDA_PRODUCER_MMVQ_KERNEL_ARGUMENT_COUNT_V3 ||
            view_argument_index != PALW_CUDA_PRODUCER_MMVQ_VIEW_ARGUMENT_INDEX_V3) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    uint64_t required_records = 0;
    status = palw_cuda_producer_validate_launch_v3(expected_launch, &required_records);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    const palw_cuda_trace_record_v3 & t = expected_launch->semantic_template;
    if (!dimensions_match(t, *dimensions)) {
        return PALW_CUDA_TRACE_IDENTITY_MISMATCH;
    }
    status = check_binding(context, entry_point, expected_launch->kernel_binding);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    unsigned int * bitmap = nullptr;
    status = take_bitmap_region(context, stream,
        static_cast<uint64_t>(t.base.base.output_rows) * t.base.base.output_columns, &bitmap);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    pending_launch & pending = context->pending;
    pending.active = true;
    pending.entry_point = entry_point;
    pending.stream = stream;
    pending.dimensions = *dimensions;
    pending.view = make_view(context, t, bitmap);
    pending.semantic_template = t;
    *out_view = pending.view;
    return PALW_CUDA_TRACE_OK;
}

palw_cuda_trace_status palw_cuda_producer_trace_launch_v3(
        palw_cuda_producer_trace_context_v3 * context,
        palw_cuda_stream_t stream,
        const void * entry_point,
        void ** kernel_arguments) {
    if (context == nullptr || kernel_arguments == nullptr) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    if (context->finalized) {
        return PALW_CUDA_TRACE_SEQUENCE_MISMATCH;
    }
    if (context->poisoned) {
        return PALW_CUDA_TRACE_POISONED;
    }
    pending_launch & pending = context->pending;
    if (!pending.active) {
        return PALW_CUDA_TRACE_SEQUENCE_MISMATCH;
    }
    if (entry_point != pending.entry_point) {
        return PALW_CUDA_TRACE_IDENTITY_MISMATCH;
    }
    if (stream != pending.stream) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    // The caller's array stays untouched; the copy carries the prepared view.
    void * arguments[PALW_CUDA_PRODUCER_MMVQ_KERNEL_ARGUMENT_COUNT_V3];
    std::copy(kernel_arguments, kernel_arguments + PALW_CUDA_PRODUCER_MMVQ_KERNEL_ARGUMENT_COUNT_V3,
        arguments);
    arguments[PALW_CUDA_PRODUCER_MMVQ_VIEW_ARGUMENT_INDEX_V3] = &pending.view;
    const palw_cuda_producer_launch_dimensions_v1 & d = pending.dimensions;
    const cudaError_t error = cudaLaunchKernel(
        entry_point,
        dim3(d.grid_x, d.grid_y, d.grid_z),
        dim3(d.block_x, d.block_y, d.block_z),
        arguments,
        static_cast<size_t>(d.dynamic_shared_memory_bytes),
        stream);
    pending.active = false;
    if (error != cudaSuccess) {
        return cuda_failure(context);
    }
    accept(context, stream, pending.semantic_template);
    return PALW_CUDA_TRACE_OK;
}

palw_cuda_trace_status palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3(
        palw_cuda_producer_trace_context_v3 * context,
        palw_cuda_stream_t stream,
        const palw_cuda_producer_launch_v3 * expected_launch,
        const void * work_entry_point,
        const palw_cuda_producer_launch_dimensions_v1 * work_dimensions,
        const float * output,
        uint64_t output_row_stride,
        const palw_cuda_producer_actual_identity_v3 * actual_identity) {
    if (context == nullptr || expected_launch == nullptr || work_entry_point == nullptr ||
            work_dimensions == nullptr || output == nullptr || actual_identity == nullptr) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    palw_cuda_trace_status status = check_room(context, stream);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    uint64_t required_records = 0;
    status = palw_cuda_producer_validate_grouped_final_output_launch_v3(
        expected_launch, &required_records);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    const palw_cuda_trace_record_v3 & t = expected_launch->semantic_template;
    if (!dimensions_match(t, *work_dimensions)) {
        return PALW_CUDA_TRACE_IDENTITY_MISMATCH;
    }
    const palw_cuda_producer_actual_identity_v3 expected_identity = template_identity(t);
    if (std::memcmp(actual_identity, &expected_identity, sizeof(expected_identity)) != 0 ||
            std::memcmp(actual_identity->capture_implementation_id, GROUPED_CAPTURE_ID,
                PALW_CUDA_PRODUCER_ID_SIZE) != 0) {
        return PALW_CUDA_TRACE_IDENTITY_MISMATCH;
    }
    const uint32_t rows = t.base.base.output_rows;
    const uint32_t columns = t.base.base.output_columns;
    if (output_row_stride < columns) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    status = check_binding(context, work_entry_point, expected_launch->kernel_binding);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    const uint64_t elements = static_cast<uint64_t>(rows) * columns;
    unsigned int * bitmap = nullptr;
    status = take_bitmap_region(context, stream, elements, &bitmap);
    if (status != PALW_CUDA_TRACE_OK) {
        return status;
    }
    const uint64_t wanted_blocks =
        (elements + COLLECTOR_BLOCK_THREADS - 1u) / COLLECTOR_BLOCK_THREADS;
    const unsigned int blocks = static_cast<unsigned int>(
        std::min<uint64_t>(wanted_blocks, COLLECTOR_MAX_BLOCKS));
    palw_cuda_producer_grouped_final_output_collector_f32_v3
        <<<blocks, COLLECTOR_BLOCK_THREADS, 0, stream>>>(
            output, output_row_stride, rows, columns,
            context->slots + context->count, bitmap);
    if (cudaGetLastError() != cudaSuccess) {
        return cuda_failure(context);
    }
    accept(context, stream, t);
    return PALW_CUDA_TRACE_OK;
}

palw_cuda_trace_status palw_cuda_producer_trace_finalize_v3(
        palw_cuda_producer_trace_context_v3 * context,
        palw_cuda_stream_t stream,
        palw_cuda_trace_record_v3 * host_records,
        uint64_t host_capacity) {
    if (context == nullptr || host_records == nullptr || host_capacity < context->count) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    const palw_cuda_trace_status refused =
        check_accepting(context, stream, PALW_CUDA_TRACE_INCOMPLETE);
    if (refused != PALW_CUDA_TRACE_OK) {
        return refused;
    }
    const size_t count = static_cast<size_t>(context->count);
    std::vector<palw_cuda_producer_device_slot_v3> slots;
    try {
        slots.resize(count);
    } catch (const std::bad_alloc &) {
        return poison(context, PALW_CUDA_PRODUCER_FAULT_CUDA_ERROR, PALW_CUDA_TRACE_CUDA_ERROR);
    }
    if (cudaStreamSynchronize(stream) != cudaSuccess ||
            (count != 0u && cudaMemcpy(slots.data(), context->slots, count * sizeof(slots[0]),
                cudaMemcpyDeviceToHost) != cudaSuccess)) {
        return cuda_failure(context);
    }

    uint32_t faults = 0;
    for (size_t i = 0; i < count; ++i) {
        const palw_cuda_trace_record & base = context->templates[i].base.base;
        const uint64_t expected = static_cast<uint64_t>(base.output_rows) * base.output_columns;
        faults |= slots[i].faults;
        if (slots[i].captures != expected) {
            faults |= PALW_CUDA_PRODUCER_FAULT_MISSING_CAPTURE;
        }
    }
    if (faults != 0u) {
        return poison(context, faults,
            (faults & PALW_CUDA_PRODUCER_FAULT_IDENTITY_MISMATCH) != 0u
                ? PALW_CUDA_TRACE_IDENTITY_MISMATCH
                : PALW_CUDA_TRACE_INCOMPLETE);
    }

    for (size_t i = 0; i < count; ++i) {
        host_records[i] = context->templates[i];
        for (uint32_t lane = 0; lane < PALW_CUDA_TRACE_SKETCH_LANES; ++lane) {
            host_records[i].base.base.sketch[lane] = static_cast<uint64_t>(slots[i].sketch[lane]);
        }
    }
    context->committed = context->count;
    context->finalized = true;
    return PALW_CUDA_TRACE_OK;
}

uint64_t palw_cuda_producer_trace_count_v3(const palw_cuda_producer_trace_context_v3 * context) {
    return context != nullptr ? context->count : 0u;
}

uint64_t palw_cuda_producer_trace_committed_count_v3(
        const palw_cuda_producer_trace_context_v3 * context) {
    return context != nullptr ? context->committed : 0u;
}

uint32_t palw_cuda_producer_trace_faults_v3(const palw_cuda_producer_trace_context_v3 * context) {
    return context != nullptr ? context->faults : 0u;
}

int palw_cuda_producer_trace_poisoned_v3(const palw_cuda_producer_trace_context_v3 * context) {
    return context != nullptr && context->poisoned ? 1 : 0;
}

palw_cuda_trace_status palw_cuda_producer_query_grouped_capture_info_v3(
        palw_cuda_producer_grouped_capture_info_v3 * out_info) {
    if (out_info == nullptr) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    *out_info = {};
    kernel_attributes collector;
    if (query_attributes(reinterpret_cast<const void *>(
                &palw_cuda_producer_grouped_final_output_collector_f32_v3),
            collector) != cudaSuccess) {
        return PALW_CUDA_TRACE_CUDA_ERROR;
    }
    const cudaFuncAttributes & a = collector.attributes;
    palw_cuda_producer_grouped_capture_info_v3 info = {};
    info.abi_version = PALW_CUDA_PRODUCER_GROUPED_CAPTURE_INFO_ABI_VERSION_V3;
    info.struct_size = sizeof(info);
    info.sm_arch = collector.sm_arch;
    info.binary_version = a.binaryVersion;
    info.ptx_version = a.ptxVersion;
    info.num_regs = a.numRegs;
    info.max_threads_per_block = a.maxThreadsPerBlock;
    info.static_shared_memory_bytes = static_cast<uint64_t>(a.sharedSizeBytes);
    info.local_memory_bytes = static_cast<uint64_t>(a.localSizeBytes);
    std::memcpy(info.capture_implementation_id, GROUPED_CAPTURE_ID, PALW_CUDA_PRODUCER_ID_SIZE);
    *out_info = info;
    return PALW_CUDA_TRACE_OK;
}
