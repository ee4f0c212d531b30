// What the device tests write into a launch template the same way: the self-test
// (producer_selftest.cu) for its toy kernels, ggml_trace_e2e.cpp for the real ones.
#ifndef PALW_TESTS_LAUNCH_TEMPLATES_H
#define PALW_TESTS_LAUNCH_TEMPLATES_H

#include "palw_cuda_llama_mmvq.h"

#include <cstring>

// The identity the launch's captures must carry.
inline void set_identity(palw_cuda_trace_record_v3 & t, const palw_cuda_producer_actual_identity_v3 & identity) {
    std::memcpy(t.base.producer_variant_id, identity.producer_variant_id, PALW_CUDA_PRODUCER_ID_SIZE);
    std::memcpy(t.work_entry_point_id, identity.work_entry_point_id, PALW_CUDA_PRODUCER_ID_SIZE);
    std::memcpy(t.capture_implementation_id, identity.capture_implementation_id, PALW_CUDA_PRODUCER_ID_SIZE);
}

// The grid, block and dynamic shared memory the launch must use.
inline void set_dimensions(palw_cuda_trace_record_v3 & t, const palw_cuda_producer_launch_dimensions_v1 & d) {
    t.grid_x = d.grid_x;
    t.grid_y = d.grid_y;
    t.grid_z = d.grid_z;
    t.block_x = d.block_x;
    t.block_y = d.block_y;
    t.block_z = d.block_z;
    t.dynamic_shared_memory_bytes = static_cast<uint32_t>(d.dynamic_shared_memory_bytes);
}

// An MMVQ-class record: mul_mat_vec_q's FP32 accumulators over the full K, before
// the epilogue, in one launch of one reduction segment.
inline void set_mmvq_capture(palw_cuda_trace_record_v3 & t) {
    t.base.declared_origin = PALW_CUDA_TRACE_ORIGIN_PRODUCER_ACCUMULATOR;
    t.base.accumulator_stage = PALW_CUDA_TRACE_ACCUMULATOR_STAGE_FULL_K_PRE_EPILOGUE;
    t.base.accumulator_dtype = PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_FP32;
    t.base.sketch_scheme = PALW_CUDA_TRACE_SKETCH_SCALAR_ACCUMULATOR_F32_V1;
    t.base.reduction_segment_count = 1;
    t.sublaunch_count = 1;
}

// An attention stage's record: the final output tile of sub-launch `stage - 1` of
// the layer's three (QK, softmax, PV), in the group the softmax at `owner` owns.
inline void set_attention_stage(palw_cuda_trace_record_v3 & t, uint32_t stage, uint64_t owner) {
    t.base.declared_origin = PALW_CUDA_TRACE_ORIGIN_FINAL_OUTPUT;
    t.base.sketch_scheme = PALW_CUDA_TRACE_SKETCH_FINAL_OUTPUT_TILE_F32_V1;
    t.layer_present = 1;
    t.attention_group_present = 1;
    t.attention_stage = stage;
    t.grouping_version = PALW_CUDA_TRACE_GROUPING_VERSION_V1;
    t.sublaunch_index = stage - 1u;
    t.sublaunch_count = 3;
    t.attention_owner_schedule_index = owner;
}

#endif  // PALW_TESTS_LAUNCH_TEMPLATES_H
