/*
 * The caller side of one PALW trace, in C: the seed smoke's approve / launch_accepted / fault
 * callbacks (approve_callback(_v2), launch_accepted_callback(_v2), fault_callback(_v2) of
 * tools/palw-mmvq-smoke), with the attention geometry taken from the discovered candidates
 * instead of the smoke's Qwen3-8B literals, a reject index, and a record of what the runtime
 * handed to each callback for the cases to judge afterwards.
 *
 * The runtime calls these with `user_data` = a palw_trace_caller the Python side
 * (pytest_palw/runtime/caller.py) allocated, with its candidates, kernel infos, digests and
 * buffers. No Python runs per launch; at most one launch (`change_index`) calls `change`.
 * Not ported: the smoke's --authority-ids (R13) stamping; the suite never passes it.
 *
 * Include palw_cuda_llama_mmvq.h first. cffi reads this file for its declarations.
 */
#ifndef PALW_TRACE_CALLER_H
#define PALW_TRACE_CALLER_H

#ifdef __cplusplus
extern "C" {
#endif

#define PALW_TRACE_CALLER_NO_INDEX 0xFFFFFFFFFFFFFFFFull
#define PALW_TRACE_CALLER_NAME_SIZE 64

/* The smoke's callback_error. */
#define PALW_TRACE_CALLER_ERROR_NONE 0
#define PALW_TRACE_CALLER_ERROR_INVALID_ARGUMENT 1
#define PALW_TRACE_CALLER_ERROR_UNEXPECTED_COUNT 2
#define PALW_TRACE_CALLER_ERROR_ASSOCIATION_MISMATCH 3
#define PALW_TRACE_CALLER_ERROR_DUPLICATE_OPERATION_TOKEN 4
#define PALW_TRACE_CALLER_ERROR_LAUNCH_NOTIFICATION_MISMATCH 5

/* Kernel binary digests, by the class a launch binds. */
#define PALW_TRACE_CALLER_DIGEST_BINARY 0
#define PALW_TRACE_CALLER_DIGEST_Q4_K 1
#define PALW_TRACE_CALLER_DIGEST_Q6_K 2
#define PALW_TRACE_CALLER_DIGEST_QK 3
#define PALW_TRACE_CALLER_DIGEST_SOFTMAX 4
#define PALW_TRACE_CALLER_DIGEST_PV 5
#define PALW_TRACE_CALLER_DIGEST_COUNT 6

/* One launch as discovery found it (the smoke's candidate / mixed_candidate). */
typedef struct palw_trace_caller_candidate {
    const void * weight_data;
    uint64_t m;
    uint64_t n;
    uint64_t k;
    uint64_t batch;
    uint32_t output_rows;
    uint32_t output_columns;
    uint32_t layer_id;
    uint32_t physical_key_value_tokens;
    uint32_t query_heads;
    uint32_t key_value_heads;
    uint32_t head_dim;
    uint8_t kind;
    uint8_t quantization;
    uint8_t attention_stage;
} palw_trace_caller_candidate;

/* One fault callback. */
typedef struct palw_trace_caller_fault {
    int32_t status;
    int32_t fault;
    const void * operation_token;
    uint8_t with_association;
} palw_trace_caller_fault;

/* Alters the launch approved at change_index; nonzero when it failed (approve then refuses). */
typedef int (*palw_trace_caller_change_fn)(void * user_data, palw_cuda_producer_launch_v3 * launch);

typedef struct palw_trace_caller {
    /* set by the owner before attach */
    uint32_t version;
    const palw_trace_caller_candidate * candidates;
    uint64_t candidate_count;
    uint64_t limit;
    uint64_t reject_index;
    uint64_t change_index;
    palw_trace_caller_change_fn change;
    void * change_user_data;
    const palw_cuda_llama_mmvq_kernel_info_v1 * q4_info;
    const palw_cuda_llama_mmvq_kernel_info_v1 * q6_info;
    const palw_cuda_llama_attention_kernel_info_v1 * qk_info;
    const palw_cuda_llama_attention_kernel_info_v1 * softmax_info;
    const palw_cuda_llama_attention_kernel_info_v1 * pv_info;
    uint8_t digests[PALW_TRACE_CALLER_DIGEST_COUNT][32];
    /* buffers of candidate_count entries, owned by the owner */
    const void ** operation_tokens;
    uint8_t * associations;
    char * node_names;
    palw_trace_caller_fault * faults;
    uint64_t fault_capacity;
    /* what the callbacks did */
    uint64_t approved;
    uint64_t launch_notifications;
    uint64_t fault_count;
    uint32_t error;
    uint8_t rejection_triggered;
    uint8_t refused_present;
    uint8_t refused_weight_present;
    palw_cuda_llama_trace_association_v2 refused_v2;
    palw_cuda_llama_mmvq_association_v1 refused_v1;
    char refused_node[PALW_TRACE_CALLER_NAME_SIZE];
    char refused_weight[PALW_TRACE_CALLER_NAME_SIZE];
} palw_trace_caller;

palw_cuda_trace_status palw_trace_caller_approve_v1(
    void * user_data, const palw_cuda_llama_mmvq_association_v1 * actual, palw_cuda_producer_launch_v3 * expected);
void palw_trace_caller_launch_accepted_v1(
    void * user_data, const palw_cuda_llama_mmvq_association_v1 * actual, const palw_cuda_producer_launch_v3 * expected);
void palw_trace_caller_fault_v1(
    void * user_data, palw_cuda_trace_status status, palw_cuda_llama_mmvq_fault_v1 fault,
    const palw_cuda_llama_mmvq_association_v1 * actual);
palw_cuda_trace_status palw_trace_caller_approve_v2(
    void * user_data, const palw_cuda_llama_trace_association_v2 * actual, palw_cuda_producer_launch_v3 * expected);
void palw_trace_caller_launch_accepted_v2(
    void * user_data, const palw_cuda_llama_trace_association_v2 * actual, const palw_cuda_producer_launch_v3 * expected);
void palw_trace_caller_fault_v2(
    void * user_data, palw_cuda_trace_status status, palw_cuda_llama_mmvq_fault_v1 fault,
    const palw_cuda_llama_trace_association_v2 * actual);
/* The smoke's derive_diagnostic_id_v2 (v1 when version is 1); `actual` may be NULL. */
void palw_trace_caller_diagnostic_id(
    uint32_t version, const char * domain, uint64_t sequence, const void * actual, uint8_t * output);

#ifdef __cplusplus
}
#endif

#endif
