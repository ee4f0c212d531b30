// The caller side of one PALW trace (trace_caller.h): the seed smoke's callbacks, line for line
// where the smoke is general, with the attention geometry of the discovered candidates where the
// smoke writes Qwen3-8B's (256 cells, 32 heads, 8 KV heads, head dim 128, a 32-row tile).

#include "palw_cuda_llama_mmvq.h"
#include "trace_caller.h"

#include "ggml.h"

#include <cstring>
#include <type_traits>

namespace {

constexpr uint64_t FNV64_OFFSET = 14695981039346656037ull;
constexpr uint64_t FNV64_PRIME = 1099511628211ull;

uint64_t fnv_byte(uint64_t hash, uint8_t byte) { return (hash ^ byte) * FNV64_PRIME; }

uint64_t fnv_u64_be(uint64_t hash, uint64_t value) {
    for (int shift = 56; shift >= 0; shift -= 8) {
        hash = fnv_byte(hash, static_cast<uint8_t>(value >> shift));
    }
    return hash;
}

void store_u64_be(uint8_t * output, uint64_t value) {
    for (int shift = 56; shift >= 0; shift -= 8) {
        *output++ = static_cast<uint8_t>(value >> shift);
    }
}

// derive_diagnostic_id (v1) and derive_diagnostic_id_v2.
template <typename Association>
void derive(uint32_t version, const char * domain, uint64_t sequence, const Association * actual, uint8_t * output) {
    for (uint64_t lane = 0; lane < 4; ++lane) {
        uint64_t hash = FNV64_OFFSET;
        for (const char * c = domain; *c != '\0'; ++c) {
            hash = fnv_byte(hash, static_cast<uint8_t>(*c));
        }
        hash = fnv_u64_be(hash, lane);
        hash = fnv_u64_be(hash, sequence);
        if (actual != nullptr) {
            hash = fnv_u64_be(hash, actual->m);
            hash = fnv_u64_be(hash, actual->n);
            hash = fnv_u64_be(hash, actual->k);
            hash = fnv_u64_be(hash, actual->batch);
            if constexpr (std::is_same_v<Association, palw_cuda_llama_trace_association_v2>) {
                hash = fnv_u64_be(hash, actual->layer_id);
                hash = fnv_byte(hash, actual->kind);
            }
            hash = fnv_byte(hash, actual->quantization);
            if constexpr (std::is_same_v<Association, palw_cuda_llama_trace_association_v2>) {
                hash = fnv_byte(hash, actual->attention_stage);
            }
        }
        (void) version;
        store_u64_be(output + lane * sizeof(uint64_t), hash);
    }
}

const char * name_of(const void * operation_token) {
    return static_cast<const ggml_tensor *>(operation_token)->name;
}

void copy_name(char * out, const char * name) {
    std::strncpy(out, name, PALW_TRACE_CALLER_NAME_SIZE - 1);
    out[PALW_TRACE_CALLER_NAME_SIZE - 1] = '\0';
}

bool same_candidate(const palw_trace_caller_candidate & expected, const palw_cuda_llama_mmvq_association_v1 & actual) {
    return expected.weight_data == actual.weight_data && expected.m == actual.m && expected.n == actual.n &&
        expected.k == actual.k && expected.batch == actual.batch && expected.quantization == actual.quantization;
}

bool same_candidate(const palw_trace_caller_candidate & expected, const palw_cuda_llama_trace_association_v2 & actual) {
    if (expected.m != actual.m || expected.n != actual.n || expected.k != actual.k ||
            expected.batch != actual.batch || expected.output_rows != actual.output_rows ||
            expected.output_columns != actual.output_columns || expected.kind != actual.kind ||
            expected.quantization != actual.quantization || expected.attention_stage != actual.attention_stage) {
        return false;
    }
    if (expected.attention_stage == PALW_CUDA_TRACE_ATTENTION_STAGE_NONE) {
        return expected.weight_data == actual.src0.data;
    }
    return expected.layer_id == actual.layer_id && actual.layer_present == 1 && actual.query_tokens == 1 &&
        actual.key_value_tokens == 1 && actual.physical_key_value_tokens == expected.physical_key_value_tokens &&
        actual.query_heads == expected.query_heads && actual.key_value_heads == expected.key_value_heads &&
        actual.head_dim == expected.head_dim && actual.logical_batch == 1 &&
        actual.phase == PALW_CUDA_TRACE_PREFILL && actual.decode_step == 0 && actual.causal == 1;
}

bool is_supported(const palw_cuda_llama_mmvq_association_v1 * actual) {
    return palw_cuda_llama_mmvq_association_is_supported_v1(actual);
}

bool is_supported(const palw_cuda_llama_trace_association_v2 * actual) {
    return palw_cuda_llama_trace_association_is_supported_v2(actual);
}

void remember_refused(palw_trace_caller * state, const palw_cuda_llama_mmvq_association_v1 * actual) {
    state->refused_v1 = *actual;
}

void remember_refused(palw_trace_caller * state, const palw_cuda_llama_trace_association_v2 * actual) {
    state->refused_v2 = *actual;
}

template <typename Association> constexpr uint32_t version_of = 2;
template <> constexpr uint32_t version_of<palw_cuda_llama_mmvq_association_v1> = 1;

// The checks before a template is built, in the smoke's order: the status approve returns, or
// PALW_CUDA_TRACE_OK to go on. (A state made for the other version, whose buffers are sized for its
// associations, is refused like a missing one.)
template <typename Association>
palw_cuda_trace_status refusal(palw_trace_caller * state, const Association * actual, const void * expected) {
    if (state == nullptr || state->version != version_of<Association> || actual == nullptr ||
            expected == nullptr || state->error != PALW_TRACE_CALLER_ERROR_NONE || !is_supported(actual)) {
        if (state != nullptr) {
            state->error = PALW_TRACE_CALLER_ERROR_INVALID_ARGUMENT;
        }
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    const uint64_t index = state->approved;
    if (index >= state->limit || index >= state->candidate_count) {
        state->error = PALW_TRACE_CALLER_ERROR_UNEXPECTED_COUNT;
        return PALW_CUDA_TRACE_SEQUENCE_MISMATCH;
    }
    if (index == state->reject_index) {
        state->rejection_triggered = 1;
        state->refused_present = 1;
        remember_refused(state, actual);
        const auto * node = static_cast<const ggml_tensor *>(actual->operation_token);
        copy_name(state->refused_node, node->name);
        if (node->src[0] != nullptr) {
            state->refused_weight_present = 1;
            copy_name(state->refused_weight, node->src[0]->name);
        }
        return PALW_CUDA_TRACE_IDENTITY_MISMATCH;
    }
    if (!same_candidate(state->candidates[index], *actual)) {
        state->error = PALW_TRACE_CALLER_ERROR_ASSOCIATION_MISMATCH;
        return PALW_CUDA_TRACE_IDENTITY_MISMATCH;
    }
    for (uint64_t prior = 0; prior < index; ++prior) {
        if (state->operation_tokens[prior] == actual->operation_token) {
            state->error = PALW_TRACE_CALLER_ERROR_DUPLICATE_OPERATION_TOKEN;
            return PALW_CUDA_TRACE_SEQUENCE_MISMATCH;
        }
    }
    return PALW_CUDA_TRACE_OK;
}

// Zero the launch, set its nonce and the base fields common to both versions.
palw_cuda_trace_record_v3 & start(palw_cuda_producer_launch_v3 * launch, uint64_t index) {
    std::memset(launch, 0, sizeof(*launch));
    launch->launch_nonce = index + 1;
    palw_cuda_trace_record_v3 & semantic = launch->semantic_template;
    semantic.base.base.kernel_sequence = index;
    semantic.base.base.schema_version = PALW_CUDA_TRACE_SCHEMA_VERSION_V3;
    semantic.base.base.dtype = PALW_CUDA_TRACE_DTYPE_FP32;
    semantic.covered_schedule_index = index;
    return semantic;
}

void mmvq(palw_cuda_trace_record_v3 & semantic, uint32_t output_columns) {
    semantic.base.declared_origin = PALW_CUDA_TRACE_ORIGIN_PRODUCER_ACCUMULATOR;
    semantic.base.accumulator_stage = PALW_CUDA_TRACE_ACCUMULATOR_STAGE_FULL_K_PRE_EPILOGUE;
    semantic.base.accumulator_dtype = PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_FP32;
    semantic.base.sketch_scheme = PALW_CUDA_TRACE_SKETCH_SCALAR_ACCUMULATOR_F32_V1;
    semantic.base.reduction_segment_count = 1;
    semantic.sublaunch_count = 1;
    semantic.grid_x = output_columns;
    semantic.grid_y = 1;
    semantic.grid_z = 1;
    semantic.block_x = 32;  // mul_mat_vec_q is __launch_bounds__(128): 4 warps of 32
    semantic.block_y = 4;
    semantic.block_z = 1;
}

template <typename Info>
void bind(palw_cuda_producer_launch_v3 * launch, const Info * info, const uint8_t * digest) {
    palw_cuda_producer_kernel_binding_v3 & binding = launch->kernel_binding;
    binding.sm_arch = info->sm_arch;
    binding.binary_version = info->binary_version;
    binding.ptx_version = info->ptx_version;
    binding.num_regs = info->num_regs;
    binding.max_threads_per_block = info->max_threads_per_block;
    binding.static_shared_memory_bytes = info->static_shared_memory_bytes;
    binding.local_memory_bytes = info->local_memory_bytes;
    std::memcpy(binding.kernel_binary_digest, digest, PALW_CUDA_PRODUCER_ID_SIZE);
}

void identity(palw_cuda_trace_record_v3 & semantic, const palw_cuda_producer_actual_identity_v3 & actual) {
    std::memcpy(semantic.base.producer_variant_id, actual.producer_variant_id, PALW_CUDA_PRODUCER_ID_SIZE);
    std::memcpy(semantic.work_entry_point_id, actual.work_entry_point_id, PALW_CUDA_PRODUCER_ID_SIZE);
    std::memcpy(semantic.capture_implementation_id, actual.capture_implementation_id, PALW_CUDA_PRODUCER_ID_SIZE);
}

// After a template is built: the change hook at its index, then the approval is remembered.
template <typename Association>
palw_cuda_trace_status approved(palw_trace_caller * state, const Association * actual,
                                palw_cuda_producer_launch_v3 * launch) {
    const uint64_t index = state->approved;
    if (index == state->change_index && state->change != nullptr &&
            state->change(state->change_user_data, launch) != 0) {
        state->error = PALW_TRACE_CALLER_ERROR_INVALID_ARGUMENT;
        return PALW_CUDA_TRACE_INVALID_ARGUMENT;
    }
    state->operation_tokens[index] = actual->operation_token;
    std::memcpy(state->associations + index * sizeof(Association), actual, sizeof(Association));
    copy_name(state->node_names + index * PALW_TRACE_CALLER_NAME_SIZE, name_of(actual->operation_token));
    ++state->approved;
    return PALW_CUDA_TRACE_OK;
}

const palw_cuda_llama_mmvq_kernel_info_v1 * mmvq_info(const palw_trace_caller * state, uint8_t quantization) {
    return quantization == PALW_CUDA_TRACE_QUANTIZATION_Q4_K ? state->q4_info
        : quantization == PALW_CUDA_TRACE_QUANTIZATION_Q6_K ? state->q6_info : nullptr;
}

palw_cuda_trace_status incompatible(palw_trace_caller * state) {
    state->error = PALW_TRACE_CALLER_ERROR_INVALID_ARGUMENT;
    return PALW_CUDA_TRACE_IDENTITY_MISMATCH;
}

template <typename Association>
void launch_accepted(void * user_data, const Association * actual, const palw_cuda_producer_launch_v3 * expected) {
    auto * state = static_cast<palw_trace_caller *>(user_data);
    if (state == nullptr || state->version != version_of<Association>) {
        return;
    }
    const uint64_t n = state->launch_notifications;
    if (actual == nullptr || expected == nullptr || n >= state->approved || n >= state->candidate_count ||
            state->operation_tokens[n] != actual->operation_token || !same_candidate(state->candidates[n], *actual) ||
            expected->launch_nonce != n + 1 || expected->semantic_template.base.base.kernel_sequence != n) {
        if (state->error == PALW_TRACE_CALLER_ERROR_NONE) {
            state->error = PALW_TRACE_CALLER_ERROR_LAUNCH_NOTIFICATION_MISMATCH;
        }
        return;
    }
    ++state->launch_notifications;
}

void fault(void * user_data, palw_cuda_trace_status status, palw_cuda_llama_mmvq_fault_v1 fault_code,
           const void * operation_token, bool with_association) {
    auto * state = static_cast<palw_trace_caller *>(user_data);
    if (state == nullptr) {
        return;
    }
    if (state->fault_count < state->fault_capacity) {
        palw_trace_caller_fault & out = state->faults[state->fault_count];
        out.status = status;
        out.fault = fault_code;
        out.with_association = with_association ? 1 : 0;
        out.operation_token = operation_token;
    }
    ++state->fault_count;  // past the capacity too: the owner sees that some were not kept
}

}  // namespace

extern "C" {

void palw_trace_caller_diagnostic_id(uint32_t version, const char * domain, uint64_t sequence, const void * actual,
                                     uint8_t * output) {
    if (version == 1) {
        derive(1, domain, sequence, static_cast<const palw_cuda_llama_mmvq_association_v1 *>(actual), output);
    } else {
        derive(2, domain, sequence, static_cast<const palw_cuda_llama_trace_association_v2 *>(actual), output);
    }
}

palw_cuda_trace_status palw_trace_caller_approve_v2(void * user_data, const palw_cuda_llama_trace_association_v2 * actual,
                                                    palw_cuda_producer_launch_v3 * expected) {
    auto * state = static_cast<palw_trace_caller *>(user_data);
    const palw_cuda_trace_status refused = refusal(state, actual, expected);
    if (refused != PALW_CUDA_TRACE_OK) {
        return refused;
    }
    const uint64_t index = state->approved;
    const bool attention = actual->attention_stage != PALW_CUDA_TRACE_ATTENTION_STAGE_NONE;
    palw_cuda_trace_record_v3 & semantic = start(expected, index);
    palw_cuda_trace_record & base = semantic.base.base;
    base.decode_step = actual->decode_step;
    base.m = actual->m;
    base.n = actual->n;
    base.k = actual->k;
    base.batch = actual->batch;
    base.query_tokens = actual->query_tokens;
    base.key_value_tokens = actual->key_value_tokens;
    base.layer_id = actual->layer_id;
    base.tile_rows = attention ? actual->query_heads : 1;
    base.tile_columns = actual->output_columns;
    base.output_rows = actual->output_rows;
    base.output_columns = actual->output_columns;
    base.kind = actual->kind;
    base.phase = actual->phase;
    base.quantization = actual->quantization;
    base.causal = actual->causal;
    const palw_cuda_producer_actual_identity_v3 * actual_identity = nullptr;
    if (!attention) {
        const palw_cuda_llama_mmvq_kernel_info_v1 * info = mmvq_info(state, actual->quantization);
        if (!palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(info)) {
            return incompatible(state);
        }
        mmvq(semantic, actual->output_columns);
        derive(2, "misaka.palw.diagnostic.plan.v2", index, actual, semantic.decomposition_plan_id);
        bind(expected, info, state->digests[actual->quantization == PALW_CUDA_TRACE_QUANTIZATION_Q4_K
                                                ? PALW_TRACE_CALLER_DIGEST_Q4_K : PALW_TRACE_CALLER_DIGEST_Q6_K]);
        actual_identity = &info->actual_identity;
    } else {
        const uint8_t stage = actual->attention_stage;
        const bool qk = stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF;
        const bool softmax = stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX;
        const palw_cuda_llama_attention_kernel_info_v1 * info =
            qk ? state->qk_info : softmax ? state->softmax_info : state->pv_info;
        if (!palw_cuda_llama_attention_kernel_info_is_compatible_v1(info) || info->attention_stage != stage) {
            return incompatible(state);
        }
        const uint64_t owner = qk ? index + 1 : softmax ? index : index - 1;
        semantic.base.declared_origin = PALW_CUDA_TRACE_ORIGIN_FINAL_OUTPUT;
        semantic.base.accumulator_stage = PALW_CUDA_TRACE_ACCUMULATOR_STAGE_NONE;
        semantic.base.accumulator_dtype = PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_NONE;
        semantic.base.sketch_scheme = PALW_CUDA_TRACE_SKETCH_FINAL_OUTPUT_TILE_F32_V1;
        semantic.base.reduction_segment_count = 0;
        semantic.layer_present = 1;
        semantic.attention_group_present = 1;
        semantic.attention_stage = stage;
        semantic.grouping_version = PALW_CUDA_TRACE_GROUPING_VERSION_V1;
        semantic.sublaunch_index = stage - 1U;
        semantic.sublaunch_count = 3;
        semantic.attention_owner_schedule_index = owner;
        semantic.query_heads = actual->query_heads;
        semantic.key_value_heads = actual->key_value_heads;
        semantic.head_dim = actual->head_dim;
        semantic.logical_batch = actual->logical_batch;
        semantic.physical_key_value_tokens = actual->physical_key_value_tokens;
        semantic.grid_x = info->dimensions.grid_x;
        semantic.grid_y = info->dimensions.grid_y;
        semantic.grid_z = info->dimensions.grid_z;
        semantic.block_x = info->dimensions.block_x;
        semantic.block_y = info->dimensions.block_y;
        semantic.block_z = info->dimensions.block_z;
        semantic.dynamic_shared_memory_bytes = static_cast<uint32_t>(info->dimensions.dynamic_shared_memory_bytes);
        // one grouped decomposition for the three stages
        derive<palw_cuda_llama_trace_association_v2>(2, "misaka.palw.diagnostic.attention_group.v1", owner, nullptr,
                                                     semantic.attention_group_instance_id);
        derive<palw_cuda_llama_trace_association_v2>(2, "misaka.palw.diagnostic.attention_plan.v2", owner, nullptr,
                                                     semantic.decomposition_plan_id);
        bind(expected, info, state->digests[qk ? PALW_TRACE_CALLER_DIGEST_QK
                                            : softmax ? PALW_TRACE_CALLER_DIGEST_SOFTMAX : PALW_TRACE_CALLER_DIGEST_PV]);
        actual_identity = &info->actual_identity;
    }
    identity(semantic, *actual_identity);
    derive(2, "misaka.palw.diagnostic.operation.v2", index, actual, semantic.operation_instance_id);
    derive(2, "misaka.palw.diagnostic.physical_layout.v2", index, actual, semantic.physical_layout_id);
    return approved(state, actual, expected);
}

palw_cuda_trace_status palw_trace_caller_approve_v1(void * user_data, const palw_cuda_llama_mmvq_association_v1 * actual,
                                                    palw_cuda_producer_launch_v3 * expected) {
    auto * state = static_cast<palw_trace_caller *>(user_data);
    const palw_cuda_trace_status refused = refusal(state, actual, expected);
    if (refused != PALW_CUDA_TRACE_OK) {
        return refused;
    }
    const uint64_t index = state->approved;
    const palw_cuda_llama_mmvq_kernel_info_v1 * info = mmvq_info(state, actual->quantization);
    if (!palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(info) || info->quantization != actual->quantization) {
        return incompatible(state);
    }
    palw_cuda_trace_record_v3 & semantic = start(expected, index);
    palw_cuda_trace_record & base = semantic.base.base;
    base.m = actual->m;
    base.n = actual->n;
    base.k = actual->k;
    base.batch = actual->batch;
    base.tile_rows = 1;
    base.tile_columns = actual->output_columns;
    base.output_rows = actual->output_rows;
    base.output_columns = actual->output_columns;
    base.kind = PALW_CUDA_TRACE_GEMM;
    base.phase = PALW_CUDA_TRACE_PREFILL;
    base.quantization = actual->quantization;
    mmvq(semantic, actual->output_columns);
    identity(semantic, info->actual_identity);
    derive(1, "misaka.palw.diagnostic.operation.v1", index, actual, semantic.operation_instance_id);
    derive<palw_cuda_llama_mmvq_association_v1>(1, "misaka.palw.diagnostic.direct_plan.v1", 0, nullptr,
                                                semantic.decomposition_plan_id);
    derive(1, "misaka.palw.diagnostic.physical_layout.v1", index, actual, semantic.physical_layout_id);
    bind(expected, info, state->digests[PALW_TRACE_CALLER_DIGEST_BINARY]);
    return approved(state, actual, expected);
}

void palw_trace_caller_launch_accepted_v1(void * user_data, const palw_cuda_llama_mmvq_association_v1 * actual,
                                          const palw_cuda_producer_launch_v3 * expected) {
    launch_accepted(user_data, actual, expected);
}

void palw_trace_caller_launch_accepted_v2(void * user_data, const palw_cuda_llama_trace_association_v2 * actual,
                                          const palw_cuda_producer_launch_v3 * expected) {
    launch_accepted(user_data, actual, expected);
}

void palw_trace_caller_fault_v1(void * user_data, palw_cuda_trace_status status, palw_cuda_llama_mmvq_fault_v1 fault_code,
                                const palw_cuda_llama_mmvq_association_v1 * actual) {
    fault(user_data, status, fault_code, actual != nullptr ? actual->operation_token : nullptr, actual != nullptr);
}

void palw_trace_caller_fault_v2(void * user_data, palw_cuda_trace_status status, palw_cuda_llama_mmvq_fault_v1 fault_code,
                                const palw_cuda_llama_trace_association_v2 * actual) {
    fault(user_data, status, fault_code, actual != nullptr ? actual->operation_token : nullptr, actual != nullptr);
}

}  // extern "C"
