// End-to-end device check of the patched ggml-cuda hooks with this runtime.
//
// Builds one-node ggml graphs shaped like the pinned Qwen3-8B decode (a Q4_K and
// a Q6_K MMVQ, then eager attention QK, softmax and PV), binds a V2 trace request
// through the backend's proc addresses exactly as llama-context.cpp does
// (associate -> compute -> complete per node), finalizes the producer and checks
// each record's sketch against the node's output read back from the GPU. With no
// fusion, mul_mat_vec_q writes its pre-epilogue accumulator unchanged, so the
// read-back is the captured value for MMVQ too. Prints one JSON line; exit 0 = ok.
//
// Needs a CUDA build of the seed-patched ggml (+ overlays) with
// -DGGML_CUDA_PALW_TRACE=ON -DPALW_CUDA_RUNTIME_DIR=<this repo>/native/runtime-palw/cuda
// and -DPALW_CUDA_PINNED_CC=<the device's ggml cc, 900 on H100/H200>;
// native/tests/ggml_trace_e2e.sh PATCHED_LLAMA_TREE builds it and runs this.

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "launch_templates.h"
#include "palw_cuda_llama_mmvq.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr uint32_t KV = 256;
constexpr uint32_t HEADS = 32;
constexpr uint32_t KV_HEADS = 8;
constexpr uint32_t HEAD_DIM = 128;
constexpr uint64_t MIXED_COUNT = PALW_CUDA_LLAMA_TRACE_MIXED_LAUNCH_COUNT_V2;

struct bridge {
    const palw_cuda_llama_mmvq_backend_api_v1 * api = nullptr;
    palw_cuda_llama_mmvq_kernel_info_backend_v1 mmvq_info = nullptr;
    palw_cuda_llama_trace_bind_backend_v2 bind = nullptr;
    palw_cuda_llama_trace_associate_backend_v2 associate = nullptr;
    palw_cuda_llama_trace_complete_backend_v2 complete = nullptr;
    palw_cuda_llama_trace_unbind_backend_v2 unbind = nullptr;
    palw_cuda_llama_attention_kernel_info_backend_v1 attention_info = nullptr;
    palw_cuda_llama_grouped_capture_info_backend_v1 capture_info = nullptr;
};

template <typename T>
T proc(ggml_backend_reg_t reg, const char * name) {
    return reinterpret_cast<T>(ggml_backend_reg_get_proc_address(reg, name));
}

// What the approve callback needs to build each template, like the smoke's state.
struct approval_state {
    palw_cuda_llama_mmvq_kernel_info_v1 q4 = {};
    palw_cuda_llama_mmvq_kernel_info_v1 q6 = {};
    palw_cuda_llama_attention_kernel_info_v1 stage_info[4] = {};
    uint64_t approved = 0;
    uint64_t accepted = 0;
    uint64_t faults = 0;
    palw_cuda_trace_status last_fault_status = PALW_CUDA_TRACE_OK;
    palw_cuda_llama_mmvq_fault_v1 last_fault = PALW_CUDA_LLAMA_MMVQ_FAULT_NONE;
    std::vector<palw_cuda_producer_launch_v3> templates;
};

void fill_id(uint8_t * id, uint64_t a, uint64_t b) {
    for (uint32_t i = 0; i < PALW_CUDA_PRODUCER_ID_SIZE; ++i) {
        id[i] = static_cast<uint8_t>((a * 131u + b * 29u + i * 7u + 1u) & 0xffu);
    }
    id[0] |= 1u;
}

template <typename Info>
void bind_kernel(palw_cuda_producer_kernel_binding_v3 & binding, const Info & info, uint64_t tag) {
    fill_id(binding.kernel_binary_digest, 0xd16e57, tag);
    binding.sm_arch = info.sm_arch;
    binding.binary_version = info.binary_version;
    binding.ptx_version = info.ptx_version;
    binding.num_regs = info.num_regs;
    binding.max_threads_per_block = info.max_threads_per_block;
    binding.static_shared_memory_bytes = info.static_shared_memory_bytes;
    binding.local_memory_bytes = info.local_memory_bytes;
}

// approve_callback_v2 of the seed smoke, condensed.
palw_cuda_trace_status approve(void * user_data, const palw_cuda_llama_trace_association_v2 * actual,
        palw_cuda_producer_launch_v3 * expected) {
    auto * state = static_cast<approval_state *>(user_data);
    const uint64_t index = state->approved;
    *expected = {};
    expected->launch_nonce = index + 1;
    palw_cuda_trace_record_v3 & t = expected->semantic_template;
    palw_cuda_trace_record & base = t.base.base;
    base.kernel_sequence = index;
    base.decode_step = actual->decode_step;
    base.m = actual->m;
    base.n = actual->n;
    base.k = actual->k;
    base.batch = actual->batch;
    base.query_tokens = actual->query_tokens;
    base.key_value_tokens = actual->key_value_tokens;
    base.layer_id = actual->layer_id;
    base.tile_rows = actual->attention_stage == PALW_CUDA_TRACE_ATTENTION_STAGE_NONE ? 1 : HEADS;
    base.tile_columns = actual->output_columns;
    base.output_rows = actual->output_rows;
    base.output_columns = actual->output_columns;
    base.schema_version = PALW_CUDA_TRACE_SCHEMA_VERSION_V3;
    base.kind = actual->kind;
    base.phase = actual->phase;
    base.dtype = PALW_CUDA_TRACE_DTYPE_FP32;
    base.quantization = actual->quantization;
    base.causal = actual->causal;
    t.covered_schedule_index = index;
    if (actual->attention_stage == PALW_CUDA_TRACE_ATTENTION_STAGE_NONE) {
        const auto & info = actual->quantization == PALW_CUDA_TRACE_QUANTIZATION_Q4_K ? state->q4 : state->q6;
        set_identity(t, info.actual_identity);
        set_mmvq_capture(t);
        t.grid_x = actual->output_columns;
        t.grid_y = t.grid_z = 1;
        t.block_x = 32;
        t.block_y = 4;
        t.block_z = 1;
        bind_kernel(expected->kernel_binding, info, actual->quantization);
    } else {
        const auto & info = state->stage_info[actual->attention_stage];
        set_identity(t, info.actual_identity);
        set_attention_stage(t, actual->attention_stage, index + 2u - actual->attention_stage);
        t.query_heads = actual->query_heads;
        t.key_value_heads = actual->key_value_heads;
        t.head_dim = actual->head_dim;
        t.logical_batch = actual->logical_batch;
        t.physical_key_value_tokens = actual->physical_key_value_tokens;
        set_dimensions(t, info.dimensions);
        fill_id(t.attention_group_instance_id, 0x6709, t.attention_owner_schedule_index);
        bind_kernel(expected->kernel_binding, info, 16u + actual->attention_stage);
    }
    fill_id(t.operation_instance_id, 0x0b, index);
    fill_id(t.decomposition_plan_id, 0x91a, t.attention_owner_schedule_index);
    fill_id(t.physical_layout_id, 0x1a7, index);
    state->templates.push_back(*expected);
    ++state->approved;
    return PALW_CUDA_TRACE_OK;
}

void launch_accepted(void * user_data, const palw_cuda_llama_trace_association_v2 *,
        const palw_cuda_producer_launch_v3 *) {
    ++static_cast<approval_state *>(user_data)->accepted;
}

void fault(void * user_data, palw_cuda_trace_status status, palw_cuda_llama_mmvq_fault_v1 fault_kind,
        const palw_cuda_llama_trace_association_v2 *) {
    auto * state = static_cast<approval_state *>(user_data);
    ++state->faults;
    state->last_fault_status = status;
    state->last_fault = fault_kind;
}

palw_cuda_llama_tensor_view_v1 view_of(const ggml_tensor * tensor) {
    palw_cuda_llama_tensor_view_v1 view = {};
    if (tensor == nullptr) {
        return view;
    }
    view.data = tensor->data;
    switch (tensor->type) {
        case GGML_TYPE_F32: view.type = PALW_CUDA_LLAMA_TENSOR_TYPE_F32; break;
        case GGML_TYPE_F16: view.type = PALW_CUDA_LLAMA_TENSOR_TYPE_F16; break;
        case GGML_TYPE_Q4_K: view.type = PALW_CUDA_LLAMA_TENSOR_TYPE_Q4_K; break;
        case GGML_TYPE_Q6_K: view.type = PALW_CUDA_LLAMA_TENSOR_TYPE_Q6_K; break;
        default: view.type = UINT8_MAX; break;
    }
    for (int i = 0; i < 4; ++i) {
        view.ne[i] = static_cast<uint64_t>(tensor->ne[i]);
        view.nb[i] = static_cast<uint64_t>(tensor->nb[i]);
    }
    return view;
}

// As llama_context::palw_cuda_trace_eval builds it.
palw_cuda_llama_trace_association_v2 associate_node(const ggml_tensor * node, uint8_t stage) {
    palw_cuda_llama_trace_association_v2 a = {};
    a.abi_version = PALW_CUDA_LLAMA_TRACE_ASSOCIATION_ABI_VERSION_V2;
    a.struct_size = sizeof(a);
    a.operation_token = node;
    a.src0 = view_of(node->src[0]);
    a.src1 = view_of(node->src[1]);
    a.src2 = view_of(node->src[2]);
    a.dst = view_of(node);
    a.phase = PALW_CUDA_TRACE_PREFILL;
    a.m = static_cast<uint64_t>(node->ne[0]);
    a.output_columns = static_cast<uint32_t>(node->ne[0]);
    if (stage == PALW_CUDA_TRACE_ATTENTION_STAGE_NONE) {
        a.kind = PALW_CUDA_TRACE_GEMM;
        a.n = static_cast<uint64_t>(node->ne[1]);
        a.k = static_cast<uint64_t>(node->src[0]->ne[0]);
        a.batch = static_cast<uint64_t>(node->ne[2] * node->ne[3]);
        a.output_rows = static_cast<uint32_t>(a.n);
        a.quantization = node->src[0]->type == GGML_TYPE_Q4_K ? PALW_CUDA_TRACE_QUANTIZATION_Q4_K
                                                               : PALW_CUDA_TRACE_QUANTIZATION_Q6_K;
        a.src2 = {};
        return a;
    }
    a.attention_stage = stage;
    a.kind = stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX ? PALW_CUDA_TRACE_ATTENTION
                                                                                  : PALW_CUDA_TRACE_GEMM;
    a.layer_id = 0;
    a.layer_present = 1;
    a.query_tokens = 1;
    a.key_value_tokens = 1;
    a.physical_key_value_tokens = KV;
    a.query_heads = HEADS;
    a.key_value_heads = KV_HEADS;
    a.head_dim = HEAD_DIM;
    a.logical_batch = 1;
    a.causal = 1;
    a.n = 1;
    a.batch = HEADS;
    a.output_rows = HEADS;
    if (stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX) {
        a.k = 1;
        a.precision = PALW_CUDA_LLAMA_WORK_PRECISION_F32;
        a.attention_mask = PALW_CUDA_LLAMA_ATTENTION_MASK_F32_CAUSAL;
        std::memcpy(&a.scale_bits, node->op_params, sizeof(uint32_t));
        std::memcpy(&a.max_bias_bits, reinterpret_cast<const float *>(node->op_params) + 1, sizeof(uint32_t));
    } else {
        a.k = static_cast<uint64_t>(node->src[0]->ne[0]);
        a.precision = stage == PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF
            ? PALW_CUDA_LLAMA_WORK_PRECISION_F32 : PALW_CUDA_LLAMA_WORK_PRECISION_DEFAULT;
    }
    return a;
}

using sketch_lanes = std::array<uint64_t, PALW_CUDA_TRACE_SKETCH_LANES>;

sketch_lanes host_sketch(const std::vector<float> & data, uint32_t rows, uint32_t columns, uint64_t stride) {
    sketch_lanes lanes = {};
    for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t c = 0; c < columns; ++c) {
            uint32_t bits = 0;
            std::memcpy(&bits, &data[r * stride + c], sizeof(bits));
            for (uint32_t l = 0; l < PALW_CUDA_TRACE_SKETCH_LANES; ++l) {
                lanes[l] += palw_cuda_trace_sketch_term_v1(l, r * columns + c, bits);
            }
        }
    }
    return lanes;
}

std::vector<float> read_back(const ggml_tensor * tensor) {
    std::vector<float> out(ggml_nelements(tensor));
    ggml_backend_tensor_get(tensor, out.data(), 0, ggml_nbytes(tensor));
    return out;
}

void fill_random(ggml_tensor * tensor, std::mt19937 & rng, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    const int64_t n = ggml_nelements(tensor);
    std::vector<float> values(n);
    for (float & v : values) {
        v = normal(rng);
    }
    if (tensor->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(tensor, values.data(), 0, ggml_nbytes(tensor));
    } else if (tensor->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> half(n);
        ggml_fp32_to_fp16_row(values.data(), half.data(), n);
        ggml_backend_tensor_set(tensor, half.data(), 0, ggml_nbytes(tensor));
    } else {
        std::vector<uint8_t> packed(ggml_nbytes(tensor));
        ggml_quantize_chunk(tensor->type, values.data(), packed.data(), 0, tensor->ne[1], tensor->ne[0], nullptr);
        ggml_backend_tensor_set(tensor, packed.data(), 0, packed.size());
    }
}

struct result {
    std::string name;
    bool ok;
    std::string detail;
};

}  // namespace

int main() {
    std::vector<result> results;
    auto record = [&](const std::string & name, bool ok, const std::string & detail = "") {
        results.push_back({name, ok, ok ? "" : detail});
    };

    ggml_backend_reg_t reg = ggml_backend_reg_by_name("CUDA");
    ggml_backend_t backend = reg != nullptr ? ggml_backend_dev_init(ggml_backend_reg_dev_get(reg, 0), nullptr) : nullptr;
    if (backend == nullptr) {
        std::printf("{\"schema\":\"palw.ggml_trace_e2e.v1\",\"ok\":false,\"error\":\"no CUDA backend\"}\n");
        return 2;
    }
    bridge b;
    auto get_api = proc<palw_cuda_llama_mmvq_get_backend_api_v1>(reg, PALW_CUDA_LLAMA_MMVQ_GET_API_PROC_V1);
    b.api = get_api != nullptr ? get_api() : nullptr;
    b.mmvq_info = proc<palw_cuda_llama_mmvq_kernel_info_backend_v1>(reg, PALW_CUDA_LLAMA_MMVQ_KERNEL_INFO_PROC_V1);
    b.bind = proc<palw_cuda_llama_trace_bind_backend_v2>(reg, PALW_CUDA_LLAMA_TRACE_BIND_PROC_V2);
    b.associate = proc<palw_cuda_llama_trace_associate_backend_v2>(reg, PALW_CUDA_LLAMA_TRACE_ASSOCIATE_PROC_V2);
    b.complete = proc<palw_cuda_llama_trace_complete_backend_v2>(reg, PALW_CUDA_LLAMA_TRACE_COMPLETE_PROC_V2);
    b.unbind = proc<palw_cuda_llama_trace_unbind_backend_v2>(reg, PALW_CUDA_LLAMA_TRACE_UNBIND_PROC_V2);
    b.attention_info = proc<palw_cuda_llama_attention_kernel_info_backend_v1>(reg, PALW_CUDA_LLAMA_ATTENTION_KERNEL_INFO_PROC_V1);
    b.capture_info = proc<palw_cuda_llama_grouped_capture_info_backend_v1>(reg, PALW_CUDA_LLAMA_GROUPED_CAPTURE_INFO_PROC_V1);
    const bool procs = palw_cuda_llama_mmvq_backend_api_is_compatible_v1(b.api) && b.mmvq_info && b.bind &&
        b.associate && b.complete && b.unbind && b.attention_info && b.capture_info;
    record("proc_addresses", procs);
    if (!procs) {
        std::printf("{\"schema\":\"palw.ggml_trace_e2e.v1\",\"ok\":false,\"error\":\"PALW procs missing\"}\n");
        return 1;
    }

    // One-node graphs in Qwen3-8B shapes; every input is a leaf so each graph has one node.
    ggml_init_params params = {64 * ggml_tensor_overhead() + 16 * ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * w4 = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_K, 4096, 512);
    ggml_tensor * x4 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4096, 1);
    ggml_tensor * y4 = ggml_mul_mat(ctx, w4, x4);
    ggml_tensor * w6 = ggml_new_tensor_2d(ctx, GGML_TYPE_Q6_K, 4096, 384);
    ggml_tensor * x6 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4096, 1);
    ggml_tensor * y6 = ggml_mul_mat(ctx, w6, x6);
    ggml_tensor * k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, HEAD_DIM, KV, KV_HEADS, 1);
    ggml_tensor * q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, HEAD_DIM, 1, HEADS, 1);
    ggml_tensor * kq = ggml_mul_mat(ctx, k, q);
    ggml_mul_mat_set_prec(kq, GGML_PREC_F32);
    ggml_tensor * scores = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, KV, 1, HEADS, 1);
    ggml_tensor * mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, KV, 1, 1, 1);
    ggml_tensor * probs = ggml_soft_max_ext(ctx, scores, mask, 1.0f / std::sqrt(static_cast<float>(HEAD_DIM)), 0.0f);
    ggml_tensor * v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, KV, HEAD_DIM, KV_HEADS, 1);
    ggml_tensor * weights = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, KV, 1, HEADS, 1);
    ggml_tensor * kqv = ggml_mul_mat(ctx, v, weights);
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);

    std::mt19937 rng(20240611u);
    for (ggml_tensor * t : {w4, x4, w6, x6, k, q, scores, v, weights}) {
        fill_random(t, rng, 1.0f);
    }
    std::vector<float> mask_values(KV, -INFINITY);
    mask_values[0] = 0.0f;  // one live KV position, like a fresh one-token decode
    ggml_backend_tensor_set(mask, mask_values.data(), 0, ggml_nbytes(mask));

    struct step {
        const char * name;
        ggml_tensor * node;
        uint8_t stage;
        uint32_t rows;
    };
    const std::vector<step> steps = {
        {"mmvq_q4_k", y4, PALW_CUDA_TRACE_ATTENTION_STAGE_NONE, 1},
        {"mmvq_q6_k", y6, PALW_CUDA_TRACE_ATTENTION_STAGE_NONE, 1},
        {"attention_qk", kq, PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF, HEADS},
        {"attention_softmax", probs, PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX, HEADS},
        {"attention_pv", kqv, PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_VALUE_AGGREGATION_MMVF, HEADS},
    };
    std::vector<ggml_cgraph *> graphs;
    for (const step & s : steps) {
        ggml_cgraph * graph = ggml_new_graph(ctx);
        ggml_build_forward_expand(graph, s.node);
        graphs.push_back(graph);
    }

    // Reference outputs without a trace: capture must not change a result.
    std::vector<std::vector<float>> untraced;
    for (size_t i = 0; i < steps.size(); ++i) {
        ggml_backend_graph_compute(backend, graphs[i]);
        untraced.push_back(read_back(steps[i].node));
    }

    approval_state state;
    const bool infos = b.mmvq_info(backend, PALW_CUDA_TRACE_QUANTIZATION_Q4_K, &state.q4) == PALW_CUDA_TRACE_OK &&
        b.mmvq_info(backend, PALW_CUDA_TRACE_QUANTIZATION_Q6_K, &state.q6) == PALW_CUDA_TRACE_OK;
    bool attention_infos = true;
    for (const step & s : steps) {
        if (s.stage != PALW_CUDA_TRACE_ATTENTION_STAGE_NONE) {
            const palw_cuda_llama_trace_association_v2 a = associate_node(s.node, s.stage);
            attention_infos = attention_infos &&
                b.attention_info(backend, &a, &state.stage_info[s.stage]) == PALW_CUDA_TRACE_OK;
        }
    }
    palw_cuda_producer_grouped_capture_info_v3 collector = {};
    record("kernel_infos", infos && attention_infos &&
        b.capture_info(backend, &collector) == PALW_CUDA_TRACE_OK &&
        std::memcmp(collector.capture_implementation_id, state.stage_info[1].actual_identity.capture_implementation_id,
            PALW_CUDA_PRODUCER_ID_SIZE) == 0);

    palw_cuda_producer_trace_context_v3 * producer = nullptr;
    palw_cuda_trace_status status = b.api->producer_create(backend, MIXED_COUNT, &producer);
    palw_cuda_llama_trace_request_v2 request = {};
    request.abi_version = PALW_CUDA_LLAMA_TRACE_REQUEST_ABI_VERSION_V2;
    request.struct_size = sizeof(request);
    request.expected_launch_count = MIXED_COUNT;
    request.producer_context = producer;
    request.user_data = &state;
    request.approve = approve;
    request.launch_accepted = launch_accepted;
    request.fault = fault;
    status = status == PALW_CUDA_TRACE_OK ? b.bind(backend, &request) : status;
    record("create_and_bind", status == PALW_CUDA_TRACE_OK, "status " + std::to_string(status));

    for (size_t i = 0; i < steps.size() && status == PALW_CUDA_TRACE_OK; ++i) {
        const palw_cuda_llama_trace_association_v2 a = associate_node(steps[i].node, steps[i].stage);
        palw_cuda_trace_status step_status = b.associate(backend, &a);
        const ggml_status compute = step_status == PALW_CUDA_TRACE_OK
            ? ggml_backend_graph_compute(backend, graphs[i]) : GGML_STATUS_FAILED;
        if (step_status == PALW_CUDA_TRACE_OK) {
            step_status = b.complete(backend, steps[i].node);
        }
        record(std::string("traced_") + steps[i].name,
            step_status == PALW_CUDA_TRACE_OK && compute == GGML_STATUS_SUCCESS && state.accepted == i + 1,
            "status " + std::to_string(step_status) + ", compute " + std::to_string(compute) +
            ", fault " + std::to_string(state.last_fault) + "/" + std::to_string(state.last_fault_status));
        status = step_status;
    }

    // Five of the pinned 361: unbind reports the short stream, the producer is intact.
    uint64_t accepted = 0;
    const palw_cuda_trace_status unbound = b.unbind(backend, &request, &accepted);
    record("unbind_reports_short_stream", unbound == PALW_CUDA_TRACE_INCOMPLETE && accepted == steps.size() &&
        state.faults == 1 && state.last_fault == PALW_CUDA_LLAMA_MMVQ_FAULT_INCOMPLETE,
        "unbind " + std::to_string(unbound) + ", accepted " + std::to_string(accepted));

    std::vector<palw_cuda_trace_record_v3> records(MIXED_COUNT);
    const palw_cuda_trace_status finalized = b.api->producer_finalize(backend, producer, records.data(), records.size());
    record("finalize", finalized == PALW_CUDA_TRACE_OK && b.api->producer_count(producer) == steps.size() &&
        b.api->producer_committed_count(producer) == steps.size() && b.api->producer_faults(producer) == 0u &&
        b.api->producer_poisoned(producer) == 0,
        "finalize " + std::to_string(finalized) + ", faults " + std::to_string(b.api->producer_faults(producer)));

    for (size_t i = 0; i < steps.size() && finalized == PALW_CUDA_TRACE_OK; ++i) {
        const ggml_tensor * node = steps[i].node;
        const std::vector<float> traced = read_back(node);
        const uint32_t columns = static_cast<uint32_t>(node->ne[0]);
        const sketch_lanes expected = host_sketch(traced, steps[i].rows, columns, node->nb[1] / sizeof(float));
        bool lanes_match = true;
        for (uint32_t l = 0; l < PALW_CUDA_TRACE_SKETCH_LANES; ++l) {
            lanes_match = lanes_match && records[i].base.base.sketch[l] == expected[l];
        }
        palw_cuda_trace_record_v3 want = state.templates[i].semantic_template;
        std::memcpy(want.base.base.sketch, expected.data(), sizeof(want.base.base.sketch));
        std::array<uint8_t, PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3> got_bytes = {}, want_bytes = {};
        const bool encoded = b.api->encode_record(&records[i], got_bytes.data(), got_bytes.size()) == PALW_CUDA_TRACE_OK &&
            b.api->encode_record(&want, want_bytes.data(), want_bytes.size()) == PALW_CUDA_TRACE_OK;
        const bool unchanged = std::memcmp(traced.data(), untraced[i].data(), traced.size() * sizeof(float)) == 0;
        record(std::string("record_") + steps[i].name, lanes_match && encoded && got_bytes == want_bytes && unchanged,
            std::string(lanes_match ? "" : "sketch differs from the read-back; ") +
            (got_bytes == want_bytes ? "" : "record differs from template; ") +
            (unchanged ? "" : "traced output differs from the untraced one"));
    }
    b.api->producer_destroy(backend, producer);

    bool all = true;
    std::string checks;
    std::string failures;
    for (const result & r : results) {
        all = all && r.ok;
        checks += (checks.empty() ? "\"" : ",\"") + r.name + "\":" + (r.ok ? "true" : "false");
        if (!r.ok) {
            failures += (failures.empty() ? "{\"check\":\"" : ",{\"check\":\"") + r.name + "\",\"detail\":\"" + r.detail + "\"}";
        }
    }
    std::printf("{\"schema\":\"palw.ggml_trace_e2e.v1\",\"ok\":%s,\"checks\":{%s},\"failures\":[%s]}\n",
        all ? "true" : "false", checks.c_str(), failures.c_str());
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return all ? 0 : 1;
}
