// The producer's foreign test kernel, in one place: a kernel in mul_mat_vec_q's
// launch shape (20 arguments, the device view last) that captures its values
// through the runtime's device hook, exactly or with one chosen capture fault.
//
// Included by the device self-test (native/tests/producer_selftest.cu) and by the
// conformance suite's producer fault cases (conformance/test_producer_faults.py),
// which compile it against the device hook the runtime was built with.
#ifndef PALW_TOY_CAPTURE_KERNEL_CUH
#define PALW_TOY_CAPTURE_KERNEL_CUH

#include "palw_cuda_llama_mmvq.h"
#include "palw_cuda_producer_trace.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

enum toy_capture_mode : uint32_t {
    CAPTURE_EXACT = 0,
    CAPTURE_DUPLICATE = 1,       // element 0 is captured twice
    CAPTURE_OUT_OF_RANGE = 2,    // one extra capture at row == output_rows
    CAPTURE_MISSING = 3,         // the last element is never captured
    CAPTURE_WRONG_IDENTITY = 4,  // element 0 claims another producer variant
    CAPTURE_OVERRUN = 5,         // exact, then element 0 also claims the first bit past its own
                                 // bitmap region: the next record's first element (a capture
                                 // kernel writing past its region, seen by the next record)
};

static __host__ __device__ inline palw_cuda_producer_actual_identity_v3 toy_identity() {
    palw_cuda_producer_actual_identity_v3 identity = {};
    for (uint32_t i = 0; i < PALW_CUDA_PRODUCER_ID_SIZE; ++i) {
        identity.producer_variant_id[i] = static_cast<uint8_t>(0xa0u ^ i);
        identity.work_entry_point_id[i] = static_cast<uint8_t>(0x50u ^ i);
        identity.capture_implementation_id[i] = static_cast<uint8_t>(0xc0u ^ i);
    }
    return identity;
}

// Captures values[row * columns + column] for the record, as mul_mat_vec_q does
// for its accumulators; arguments 4..18 are padding.
static __global__ void toy_capture_kernel(
        const float * values, uint32_t rows, uint32_t columns, uint32_t mode,
        uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
        uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
        const palw_cuda_producer_device_view_v3 view) {
    const uint32_t element = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t total = rows * columns;
    if (view.abi_version == 0u || element >= total) {
        return;
    }
    if (mode == CAPTURE_MISSING && element == total - 1u) {
        return;
    }
    palw_cuda_producer_actual_identity_v3 identity = toy_identity();
    if (mode == CAPTURE_WRONG_IDENTITY && element == 0u) {
        identity.producer_variant_id[0] ^= 1u;
    }
    const uint32_t row = element / columns;
    const uint32_t column = element % columns;
    palw_cuda_producer_capture_accumulator_f32_v3(view, row, column, values[element], identity);
    if (mode == CAPTURE_DUPLICATE && element == 0u) {
        palw_cuda_producer_capture_accumulator_f32_v3(view, row, column, values[element], identity);
    }
    if (mode == CAPTURE_OUT_OF_RANGE && element == 0u) {
        palw_cuda_producer_capture_accumulator_f32_v3(view, rows, 0u, values[element], identity);
    }
    if (mode == CAPTURE_OVERRUN && element == 0u) {
        atomicOr(view.capture_bitmap + (total + 31u) / 32u, 1u);
    }
}

// The approve callback's job, as the tests' own oracle: bind a launch to the entry
// point's real attributes on `sm_arch`; the digest is left to the caller.
static inline cudaError_t toy_kernel_binding(
        const void * entry_point, uint32_t sm_arch, palw_cuda_producer_kernel_binding_v3 * out) {
    cudaFuncAttributes a = {};
    const cudaError_t error = cudaFuncGetAttributes(&a, entry_point);
    out->sm_arch = sm_arch;
    out->binary_version = a.binaryVersion;
    out->ptx_version = a.ptxVersion;
    out->num_regs = a.numRegs;
    out->max_threads_per_block = a.maxThreadsPerBlock;
    out->static_shared_memory_bytes = a.sharedSizeBytes;
    out->local_memory_bytes = a.localSizeBytes;
    return error;
}

#endif  // PALW_TOY_CAPTURE_KERNEL_CUH
