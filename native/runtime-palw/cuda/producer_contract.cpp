// Host-side contract of an approved launch template (palw_cuda_producer_launch_v3).
//
// The producer writes exactly one record per launch, so a template must describe
// one tile covering the whole output. Two statuses, one meaning each:
//   INVALID_ARGUMENT  - the template is malformed: a shape, tile, schedule or
//                       geometry field is missing or inconsistent.
//   IDENTITY_MISMATCH - the template claims the wrong producer: its class fields
//                       (kind, quantization, origin, scheme, attention group) do
//                       not describe this launch class, or an identity / kernel
//                       binding is unset.
// native/SPEC.md lists every rule. Host only: no CUDA headers.

#include "palw_cuda_llama_mmvq.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace {

constexpr palw_cuda_trace_status MALFORMED = PALW_CUDA_TRACE_INVALID_ARGUMENT;
constexpr palw_cuda_trace_status FOREIGN = PALW_CUDA_TRACE_IDENTITY_MISMATCH;

// Q4_K and Q6_K pack K in super-blocks of 256 values.
constexpr uint64_t QUANT_SUPER_BLOCK = 256;

constexpr uint8_t GROUPED_CAPTURE_ID[PALW_CUDA_PRODUCER_ID_SIZE] = {
    PALW_CUDA_PRODUCER_GROUPED_CAPTURE_ID_BYTES_V1,
};

struct rule {
    bool holds;
    palw_cuda_trace_status status;
};

// The status of the first rule that does not hold, else OK.
palw_cuda_trace_status first_broken(std::initializer_list<rule> rules) {
    for (const rule & r : rules) {
        if (!r.holds) {
            return r.status;
        }
    }
    return PALW_CUDA_TRACE_OK;
}

bool nonzero(const uint8_t * id) {
    return !palw_cuda_trace_id_is_zero(id);
}

bool sketch_is_zero(const palw_cuda_trace_record & base) {
    for (uint32_t lane = 0; lane < PALW_CUDA_TRACE_SKETCH_LANES; ++lane) {
        if (base.sketch[lane] != 0u) {
            return false;
        }
    }
    return true;
}

// Rules every producer template obeys, whatever its class.
palw_cuda_trace_status check_common(const palw_cuda_producer_launch_v3 & launch) {
    const palw_cuda_trace_record_v3 & t = launch.semantic_template;
    const palw_cuda_trace_record & base = t.base.base;
    const palw_cuda_producer_kernel_binding_v3 & binding = launch.kernel_binding;
    const uint64_t block_threads =
        static_cast<uint64_t>(t.block_x) * t.block_y * t.block_z;
    return first_broken({
        {base.schema_version == PALW_CUDA_TRACE_SCHEMA_VERSION_V3, MALFORMED},
        {launch.launch_nonce != 0u, MALFORMED},
        {base.phase == PALW_CUDA_TRACE_PREFILL || base.phase == PALW_CUDA_TRACE_DECODE, MALFORMED},
        {base.dtype == PALW_CUDA_TRACE_DTYPE_FP32, MALFORMED},
        {base.causal <= 1u, MALFORMED},
        {base.m != 0u && base.n != 0u && base.k != 0u && base.batch != 0u, MALFORMED},
        {base.output_rows != 0u && base.output_columns != 0u, MALFORMED},
        // One record per launch: the single tile is the whole output.
        {base.tile_index == 0u && base.tile_row == 0u && base.tile_column == 0u, MALFORMED},
        {base.tile_rows == base.output_rows && base.tile_columns == base.output_columns, MALFORMED},
        // The producer owns the sketch; a template arriving with one is forged.
        {sketch_is_zero(base), MALFORMED},
        {t.covered_schedule_index == base.kernel_sequence, MALFORMED},
        {t.layer_present <= 1u, MALFORMED},
        {t.layer_present == 1u || base.layer_id == 0u, MALFORMED},
        {t.grid_x != 0u && t.grid_y != 0u && t.grid_z != 0u, MALFORMED},
        {t.block_x != 0u && t.block_y != 0u && t.block_z != 0u, MALFORMED},
        {nonzero(t.base.producer_variant_id), FOREIGN},
        {nonzero(t.work_entry_point_id), FOREIGN},
        {nonzero(t.capture_implementation_id), FOREIGN},
        {nonzero(t.operation_instance_id), FOREIGN},
        {nonzero(t.decomposition_plan_id), FOREIGN},
        {nonzero(t.physical_layout_id), FOREIGN},
        {nonzero(binding.kernel_binary_digest), FOREIGN},
        {binding.sm_arch > 0u, FOREIGN},
        {binding.binary_version > 0, FOREIGN},
        {binding.num_regs > 0, FOREIGN},
        {binding.max_threads_per_block > 0, FOREIGN},
        // A block the bound kernel cannot run cannot produce the record.
        {block_threads <= static_cast<uint64_t>(
             binding.max_threads_per_block > 0 ? binding.max_threads_per_block : 0), MALFORMED},
    });
}

palw_cuda_trace_status check_mmvq_class(const palw_cuda_trace_record_v3 & t) {
    const palw_cuda_trace_record & base = t.base.base;
    return first_broken({
        {base.kind == PALW_CUDA_TRACE_GEMM, FOREIGN},
        {palw_cuda_llama_quantization_is_supported(base.quantization), FOREIGN},
        {t.base.declared_origin == PALW_CUDA_TRACE_ORIGIN_PRODUCER_ACCUMULATOR, FOREIGN},
        {t.base.accumulator_stage == PALW_CUDA_TRACE_ACCUMULATOR_STAGE_FULL_K_PRE_EPILOGUE, FOREIGN},
        {t.base.accumulator_dtype == PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_FP32, FOREIGN},
        {t.base.sketch_scheme == PALW_CUDA_TRACE_SKETCH_SCALAR_ACCUMULATOR_F32_V1, FOREIGN},
        // An MMVQ launch belongs to no attention group.
        {t.attention_group_present == 0u, FOREIGN},
        {t.attention_stage == PALW_CUDA_TRACE_ATTENTION_STAGE_NONE, FOREIGN},
        {t.grouping_version == PALW_CUDA_TRACE_GROUPING_VERSION_NONE, FOREIGN},
        {palw_cuda_trace_id_is_zero(t.attention_group_instance_id), FOREIGN},
        {t.attention_owner_schedule_index == 0u, FOREIGN},
        {t.query_heads == 0u && t.key_value_heads == 0u && t.head_dim == 0u, FOREIGN},
        {t.logical_batch == 0u && t.physical_key_value_tokens == 0u, FOREIGN},
    });
}

palw_cuda_trace_status check_mmvq_shape(const palw_cuda_trace_record_v3 & t) {
    const palw_cuda_trace_record & base = t.base.base;
    return first_broken({
        // A single full-K accumulation, launched once.
        {t.base.reduction_segment_index == 0u && t.base.reduction_segment_count == 1u, MALFORMED},
        {t.sublaunch_index == 0u && t.sublaunch_count == 1u, MALFORMED},
        // Output rows are tokens (n), columns are output features (m).
        {base.output_rows == base.n && base.output_columns == base.m, MALFORMED},
        // With batch > 1 one tile would not cover the output.
        {base.batch == 1u, MALFORMED},
        {base.k % QUANT_SUPER_BLOCK == 0u, MALFORMED},
    });
}

bool is_attention_stage(uint8_t stage) {
    return stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF ||
        stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX ||
        stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_VALUE_AGGREGATION_MMVF;
}

palw_cuda_trace_status check_attention_class(const palw_cuda_trace_record_v3 & t) {
    const palw_cuda_trace_record & base = t.base.base;
    const uint8_t expected_kind =
        t.attention_stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX
        ? PALW_CUDA_TRACE_ATTENTION
        : PALW_CUDA_TRACE_GEMM;
    return first_broken({
        {t.attention_group_present == 1u, FOREIGN},
        {is_attention_stage(t.attention_stage), FOREIGN},
        {t.grouping_version == PALW_CUDA_TRACE_GROUPING_VERSION_V1, FOREIGN},
        {base.kind == expected_kind, FOREIGN},
        {base.quantization == PALW_CUDA_TRACE_QUANTIZATION_NONE, FOREIGN},
        {t.base.declared_origin == PALW_CUDA_TRACE_ORIGIN_FINAL_OUTPUT, FOREIGN},
        {t.base.accumulator_stage == PALW_CUDA_TRACE_ACCUMULATOR_STAGE_NONE, FOREIGN},
        {t.base.accumulator_dtype == PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_NONE, FOREIGN},
        {t.base.sketch_scheme == PALW_CUDA_TRACE_SKETCH_FINAL_OUTPUT_TILE_F32_V1, FOREIGN},
        // Only the grouped collector captures attention stages.
        {std::memcmp(t.capture_implementation_id, GROUPED_CAPTURE_ID,
             PALW_CUDA_PRODUCER_ID_SIZE) == 0, FOREIGN},
        {nonzero(t.attention_group_instance_id), FOREIGN},
    });
}

// The group is owned by its softmax: QK sits one before it, PV one after.
bool owner_index_holds(const palw_cuda_trace_record_v3 & t) {
    const uint64_t covered = t.covered_schedule_index;
    const uint64_t owner = t.attention_owner_schedule_index;
    switch (t.attention_stage) {
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF:
            return covered != UINT64_MAX && owner == covered + 1u;
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX:
            return owner == covered;
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_VALUE_AGGREGATION_MMVF:
            return covered != 0u && owner == covered - 1u;
        default:
            return false;
    }
}

// m and k per stage: QK scores each KV position over head_dim, softmax
// normalises the scores, PV aggregates KV positions into head_dim outputs.
bool stage_shape_holds(const palw_cuda_trace_record_v3 & t) {
    const palw_cuda_trace_record & base = t.base.base;
    const uint64_t kv = t.physical_key_value_tokens;
    switch (t.attention_stage) {
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF:
            return base.m == kv && base.k == t.head_dim;
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX:
            return base.m == kv && base.k == 1u;
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_VALUE_AGGREGATION_MMVF:
            return base.m == t.head_dim && base.k == kv;
        default:
            return false;
    }
}

palw_cuda_trace_status check_attention_shape(const palw_cuda_trace_record_v3 & t) {
    const palw_cuda_trace_record & base = t.base.base;
    const uint64_t heads_rows = static_cast<uint64_t>(t.query_heads) * t.logical_batch;
    return first_broken({
        // Final outputs, not partial reductions: no segments.
        {t.base.reduction_segment_index == 0u && t.base.reduction_segment_count == 0u, MALFORMED},
        {t.sublaunch_count == 3u && t.sublaunch_index + 1u == t.attention_stage, MALFORMED},
        {owner_index_holds(t), MALFORMED},
        {t.layer_present == 1u, MALFORMED},
        {base.query_tokens != 0u && base.key_value_tokens != 0u, MALFORMED},
        {t.physical_key_value_tokens != 0u &&
             t.physical_key_value_tokens >= base.key_value_tokens, MALFORMED},
        {t.query_heads != 0u && t.key_value_heads != 0u && t.head_dim != 0u &&
             t.logical_batch != 0u, MALFORMED},
        {t.key_value_heads == 0u || t.query_heads % t.key_value_heads == 0u, MALFORMED},
        // Rows are (head, sequence) pairs, columns the stage's m.
        {base.output_rows == heads_rows && base.output_columns == base.m, MALFORMED},
        {base.n == base.query_tokens && base.batch == heads_rows, MALFORMED},
        {stage_shape_holds(t), MALFORMED},
    });
}

template <typename... Checks>
palw_cuda_trace_status validate(
        const palw_cuda_producer_launch_v3 * launch, uint64_t * required_records,
        Checks... checks) {
    if (required_records != nullptr) {
        *required_records = 0;
    }
    if (launch == nullptr || required_records == nullptr) {
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    palw_cuda_trace_status status = check_common(*launch);
    for (auto check : {checks...}) {
        if (status != PALW_CUDA_TRACE_OK) {
            break;
        }
        status = check(launch->semantic_template);
    }
    if (status == PALW_CUDA_TRACE_OK) {
        *required_records = 1;
    }
    return status;
}

}  // namespace

palw_cuda_trace_status palw_cuda_producer_validate_launch_v3(
        const palw_cuda_producer_launch_v3 * launch, uint64_t * required_records) {
    return validate(launch, required_records, check_mmvq_class, check_mmvq_shape);
}

palw_cuda_trace_status palw_cuda_producer_validate_grouped_final_output_launch_v3(
        const palw_cuda_producer_launch_v3 * launch, uint64_t * required_records) {
    return validate(launch, required_records, check_attention_class, check_attention_shape);
}
