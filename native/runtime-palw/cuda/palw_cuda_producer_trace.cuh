/*
 * Device side of the PALW producer: the capture hook a traced kernel calls once
 * per output element, and the element bookkeeping the grouped collector kernel
 * (producer_accumulator.cu) shares with it.
 *
 * Everything here is `static __device__ __forceinline__` and defined in this
 * header, so another translation unit (mmvq.cu) can use it without relocatable
 * device code. Include it after the CUDA headers (mmvq.cu: after common.cuh).
 * Semantics: native/SPEC.md, "Capture".
 */
#ifndef PALW_CUDA_PRODUCER_TRACE_CUH
#define PALW_CUDA_PRODUCER_TRACE_CUH

#include "palw_cuda_llama_mmvq.h"

#include <stdint.h>

#if !defined(__CUDACC__)
#error "palw_cuda_producer_trace.cuh is device code: compile it with nvcc"
#endif

static __device__ __forceinline__ bool palw_cuda_producer_identity_equal_v3(
        const palw_cuda_producer_actual_identity_v3 & actual,
        const palw_cuda_producer_actual_identity_v3 & expected) {
    const uint8_t * a = reinterpret_cast<const uint8_t *>(&actual);
    const uint8_t * b = reinterpret_cast<const uint8_t *>(&expected);
    unsigned int difference = 0;
#pragma unroll
    for (uint32_t i = 0; i < sizeof(palw_cuda_producer_actual_identity_v3); ++i) {
        difference |= static_cast<unsigned int>(a[i] ^ b[i]);
    }
    return difference == 0u;
}

/*
 * The sketch contribution of element e with float bits `value_bits`, added to
 * `lanes` (one accumulator per sketch lane). Sums are mod 2^64.
 */
static __device__ __forceinline__ void palw_cuda_producer_add_terms_v3(
        unsigned long long (&lanes)[PALW_CUDA_TRACE_SKETCH_LANES],
        uint64_t element_index,
        uint32_t value_bits) {
#pragma unroll
    for (uint32_t lane = 0; lane < PALW_CUDA_TRACE_SKETCH_LANES; ++lane) {
        lanes[lane] += static_cast<unsigned long long>(
            palw_cuda_trace_sketch_term_v1(lane, element_index, value_bits));
    }
}

/*
 * Records one captured element into its slot: range check, test-and-set of the
 * element's bitmap bit, then the sketch terms and the capture count. Faults are
 * OR-ed into slot->faults and the element contributes nothing.
 */
static __device__ __forceinline__ void palw_cuda_producer_record_element_v3(
        palw_cuda_producer_device_slot_v3 * slot,
        unsigned int * capture_bitmap,
        uint32_t output_rows,
        uint32_t output_columns,
        uint32_t output_row,
        uint32_t output_column,
        uint32_t value_bits) {
    if (output_row >= output_rows || output_column >= output_columns) {
        atomicOr(&slot->faults, PALW_CUDA_PRODUCER_FAULT_CAPTURE_OUT_OF_RANGE);
        return;
    }
    const uint64_t element = static_cast<uint64_t>(output_row) * output_columns + output_column;
    const unsigned int bit = 1u << static_cast<unsigned int>(element & 31u);
    const unsigned int before = atomicOr(&capture_bitmap[element >> 5], bit);
    if ((before & bit) != 0u) {
        atomicOr(&slot->faults, PALW_CUDA_PRODUCER_FAULT_DUPLICATE_CAPTURE);
        return;
    }
    unsigned long long lanes[PALW_CUDA_TRACE_SKETCH_LANES] = {};
    palw_cuda_producer_add_terms_v3(lanes, element, value_bits);
#pragma unroll
    for (uint32_t lane = 0; lane < PALW_CUDA_TRACE_SKETCH_LANES; ++lane) {
        atomicAdd(&slot->sketch[lane], lanes[lane]);
    }
    atomicAdd(&slot->captures, 1ull);
}

/*
 * The capture hook of a traced kernel: `value` is the fp32 accumulator of
 * (output_row, output_column) before any epilogue, `identity` the identity the
 * calling kernel specialization claims. Call it only when view.abi_version != 0.
 *
 * A view of another ABI version, or without a slot or bitmap, is not ours to
 * write through: the capture is dropped, and finalize reports the element as
 * missing.
 */
static __device__ __forceinline__ void palw_cuda_producer_capture_accumulator_f32_v3(
        const palw_cuda_producer_device_view_v3 & view,
        uint32_t output_row,
        uint32_t output_column,
        float value,
        const palw_cuda_producer_actual_identity_v3 & identity) {
    if (view.abi_version != PALW_CUDA_PRODUCER_DEVICE_VIEW_ABI_VERSION_V3 ||
            view.slot == nullptr || view.capture_bitmap == nullptr) {
        return;
    }
    if (!palw_cuda_producer_identity_equal_v3(identity, view.expected_identity)) {
        atomicOr(&view.slot->faults, PALW_CUDA_PRODUCER_FAULT_IDENTITY_MISMATCH);
        return;
    }
    palw_cuda_producer_record_element_v3(
        view.slot, view.capture_bitmap, view.output_rows, view.output_columns,
        output_row, output_column, __float_as_uint(value));
}

#endif /* PALW_CUDA_PRODUCER_TRACE_CUH */
