/*
 * PALW CUDA trace ABI: the one home of every struct, constant and function
 * that the seed patch (patches/llama.cpp-palw-full.patch) compiles against.
 *
 * Semantics live in native/SPEC.md. Python takes layouts from this file
 * through the compiler (cffi API mode); nothing re-declares them by hand.
 *
 * The header is C99 and C++17 clean and includes no CUDA header: libllama
 * compiles it with PALW_CUDA_TRACE_NO_CUDA_HEADERS=1, ggml-cuda without.
 * Streams cross it as palw_cuda_stream_t, which is cudaStream_t's own type.
 */
#ifndef PALW_CUDA_LLAMA_MMVQ_H
#define PALW_CUDA_LLAMA_MMVQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- fixed constants --------------------------------------------------- */

#define PALW_CUDA_PRODUCER_ID_SIZE 32u
#define PALW_CUDA_TRACE_SKETCH_LANES 4u
/* 420 fixed bytes + 8 per sketch lane (see record_codec.cpp / SPEC.md). */
#define PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3 452u

/* This build is diagnostic only: llama-context.cpp static_asserts all four. */
#define PALW_CUDA_TRACE_PRODUCTION_CAPABLE 0u
#define PALW_CUDA_PRODUCER_PRODUCTION_CAPABLE 0u
#define PALW_CUDA_PRODUCER_RECEIPT_MAPPING_AVAILABLE 0u
#define PALW_CUDA_LLAMA_MMVQ_PRODUCTION_CAPABLE 0u
#define PALW_CUDA_LLAMA_MMVQ_RECEIPT_MAPPING_AVAILABLE 0u

/* mul_mat_vec_q takes 20 arguments; the device view is the last one. */
#define PALW_CUDA_PRODUCER_MMVQ_KERNEL_ARGUMENT_COUNT_V3 20u
#define PALW_CUDA_PRODUCER_MMVQ_VIEW_ARGUMENT_INDEX_V3 19u

/* The pinned Qwen3-8B one-token stream: 253 MMVQ + 36 x (QK, softmax, PV). */
#define PALW_CUDA_LLAMA_TRACE_MIXED_LAUNCH_COUNT_V2 361u

/* ABI versions (struct abi_version fields). */
#define PALW_CUDA_LLAMA_MMVQ_REQUEST_ABI_VERSION_V1 1u
#define PALW_CUDA_LLAMA_TRACE_REQUEST_ABI_VERSION_V2 2u
#define PALW_CUDA_LLAMA_MMVQ_ASSOCIATION_ABI_VERSION_V1 1u
#define PALW_CUDA_LLAMA_TRACE_ASSOCIATION_ABI_VERSION_V2 2u
#define PALW_CUDA_LLAMA_MMVQ_KERNEL_INFO_ABI_VERSION_V1 1u
#define PALW_CUDA_LLAMA_ATTENTION_KERNEL_INFO_ABI_VERSION_V1 1u
#define PALW_CUDA_LLAMA_MMVQ_BACKEND_API_VERSION_V1 1u
#define PALW_CUDA_PRODUCER_GROUPED_CAPTURE_INFO_ABI_VERSION_V3 3u
#define PALW_CUDA_PRODUCER_DEVICE_VIEW_ABI_VERSION_V3 3u
#define PALW_CUDA_TRACE_SCHEMA_VERSION_V3 3u

/* record.kind */
#define PALW_CUDA_TRACE_KIND_NONE 0u
#define PALW_CUDA_TRACE_GEMM 1u
#define PALW_CUDA_TRACE_ATTENTION 2u

/* record.phase */
#define PALW_CUDA_TRACE_PHASE_NONE 0u
#define PALW_CUDA_TRACE_PREFILL 1u
#define PALW_CUDA_TRACE_DECODE 2u

/* record.dtype: the dtype of the traced output values */
#define PALW_CUDA_TRACE_DTYPE_NONE 0u
#define PALW_CUDA_TRACE_DTYPE_FP32 1u

/* record.quantization: the weight format of an MMVQ launch */
#define PALW_CUDA_TRACE_QUANTIZATION_NONE 0u
#define PALW_CUDA_TRACE_QUANTIZATION_Q4_K 1u
#define PALW_CUDA_TRACE_QUANTIZATION_Q6_K 2u

/* record.declared_origin: where the sketched values come from */
#define PALW_CUDA_TRACE_ORIGIN_NONE 0u
#define PALW_CUDA_TRACE_ORIGIN_PRODUCER_ACCUMULATOR 1u
#define PALW_CUDA_TRACE_ORIGIN_FINAL_OUTPUT 2u

/* record.accumulator_stage / accumulator_dtype */
#define PALW_CUDA_TRACE_ACCUMULATOR_STAGE_NONE 0u
#define PALW_CUDA_TRACE_ACCUMULATOR_STAGE_FULL_K_PRE_EPILOGUE 1u
#define PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_NONE 0u
#define PALW_CUDA_TRACE_ACCUMULATOR_DTYPE_FP32 1u

/* record.sketch_scheme */
#define PALW_CUDA_TRACE_SKETCH_NONE 0u
#define PALW_CUDA_TRACE_SKETCH_SCALAR_ACCUMULATOR_F32_V1 1u
#define PALW_CUDA_TRACE_SKETCH_FINAL_OUTPUT_TILE_F32_V1 2u

/* record.grouping_version */
#define PALW_CUDA_TRACE_GROUPING_VERSION_NONE 0u
#define PALW_CUDA_TRACE_GROUPING_VERSION_V1 1u

/* Attention stages. The smoke derives them as (seen % 3) + 1. */
#define PALW_CUDA_TRACE_ATTENTION_STAGE_NONE 0u
#define PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF 1u
#define PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX 2u
#define PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_VALUE_AGGREGATION_MMVF 3u

/* palw_cuda_llama_tensor_view_v1.type */
#define PALW_CUDA_LLAMA_TENSOR_TYPE_NONE 0u
#define PALW_CUDA_LLAMA_TENSOR_TYPE_F32 1u
#define PALW_CUDA_LLAMA_TENSOR_TYPE_F16 2u
#define PALW_CUDA_LLAMA_TENSOR_TYPE_Q4_K 3u
#define PALW_CUDA_LLAMA_TENSOR_TYPE_Q6_K 4u

/* association_v2.precision (ggml_prec of the attention matmul) */
#define PALW_CUDA_LLAMA_WORK_PRECISION_DEFAULT 0u
#define PALW_CUDA_LLAMA_WORK_PRECISION_F32 1u

/* association_v2.attention_mask */
#define PALW_CUDA_LLAMA_ATTENTION_MASK_NONE 0u
#define PALW_CUDA_LLAMA_ATTENTION_MASK_F32_CAUSAL 1u
#define PALW_CUDA_LLAMA_ATTENTION_MASK_F16_CAUSAL 2u

/* Producer fault bits (palw_cuda_producer_trace_faults_v3). Any bit poisons. */
#define PALW_CUDA_PRODUCER_FAULT_CAPTURE_OUT_OF_RANGE 0x01u
#define PALW_CUDA_PRODUCER_FAULT_DUPLICATE_CAPTURE 0x02u
#define PALW_CUDA_PRODUCER_FAULT_MISSING_CAPTURE 0x04u
#define PALW_CUDA_PRODUCER_FAULT_IDENTITY_MISMATCH 0x08u
#define PALW_CUDA_PRODUCER_FAULT_CAPACITY_OVERFLOW 0x10u
#define PALW_CUDA_PRODUCER_FAULT_CUDA_ERROR 0x20u

/* capture_implementation_id of the grouped final-output collector kernel. */
#define PALW_CUDA_PRODUCER_GROUPED_CAPTURE_ID_BYTES_V1 \
    0x5a, 0x1c, 0x7e, 0x93, 0x2f, 0xd4, 0x08, 0xb6, \
    0x61, 0xe5, 0x3a, 0x9c, 0x47, 0x0b, 0xf2, 0x8d, \
    0x14, 0xc9, 0x76, 0x2e, 0xa3, 0x58, 0xdb, 0x05, \
    0x9f, 0x3e, 0x81, 0x6a, 0xc7, 0x22, 0xbd, 0x49

/* Proc names resolved through ggml_backend_reg_get_proc_address(). */
#define PALW_CUDA_LLAMA_MMVQ_GET_API_PROC_V1 "palw_cuda_llama_mmvq_get_backend_api_v1"
#define PALW_CUDA_LLAMA_MMVQ_KERNEL_INFO_PROC_V1 "palw_cuda_llama_mmvq_kernel_info_v1"
#define PALW_CUDA_LLAMA_MMVQ_BIND_PROC_V1 "palw_cuda_llama_mmvq_bind_v1"
#define PALW_CUDA_LLAMA_MMVQ_ASSOCIATE_PROC_V1 "palw_cuda_llama_mmvq_associate_v1"
#define PALW_CUDA_LLAMA_MMVQ_COMPLETE_PROC_V1 "palw_cuda_llama_mmvq_complete_v1"
#define PALW_CUDA_LLAMA_MMVQ_UNBIND_PROC_V1 "palw_cuda_llama_mmvq_unbind_v1"
#define PALW_CUDA_LLAMA_TRACE_BIND_PROC_V2 "palw_cuda_llama_trace_bind_v2"
#define PALW_CUDA_LLAMA_TRACE_ASSOCIATE_PROC_V2 "palw_cuda_llama_trace_associate_v2"
#define PALW_CUDA_LLAMA_TRACE_COMPLETE_PROC_V2 "palw_cuda_llama_trace_complete_v2"
#define PALW_CUDA_LLAMA_TRACE_UNBIND_PROC_V2 "palw_cuda_llama_trace_unbind_v2"
#define PALW_CUDA_LLAMA_ATTENTION_KERNEL_INFO_PROC_V1 "palw_cuda_llama_attention_kernel_info_v1"
#define PALW_CUDA_LLAMA_GROUPED_CAPTURE_INFO_PROC_V1 "palw_cuda_llama_grouped_capture_info_v1"

/* ---- status and fault codes -------------------------------------------- */

typedef enum palw_cuda_trace_status {
    PALW_CUDA_TRACE_OK = 0,
    PALW_CUDA_TRACE_INVALID_ARGUMENT = 1,
    PALW_CUDA_TRACE_PENDING = 2,
    PALW_CUDA_TRACE_SEQUENCE_MISMATCH = 3,
    PALW_CUDA_TRACE_IDENTITY_MISMATCH = 4,
    PALW_CUDA_TRACE_INCOMPLETE = 5,
    PALW_CUDA_TRACE_CUDA_ERROR = 6,
    PALW_CUDA_TRACE_CAPACITY_EXCEEDED = 7,
    PALW_CUDA_TRACE_POISONED = 8
} palw_cuda_trace_status;

typedef enum palw_cuda_llama_mmvq_fault_v1 {
    PALW_CUDA_LLAMA_MMVQ_FAULT_NONE = 0,
    PALW_CUDA_LLAMA_MMVQ_FAULT_INVALID_REQUEST = 1,
    PALW_CUDA_LLAMA_MMVQ_FAULT_CONCURRENCY = 2,
    PALW_CUDA_LLAMA_MMVQ_FAULT_GRAPH = 3,
    PALW_CUDA_LLAMA_MMVQ_FAULT_ASSOCIATION_ORDER = 4,
    PALW_CUDA_LLAMA_MMVQ_FAULT_ASSOCIATION_MISMATCH = 5,
    PALW_CUDA_LLAMA_MMVQ_FAULT_UNSUPPORTED_DISPATCH = 6,
    PALW_CUDA_LLAMA_MMVQ_FAULT_PREPARE = 7,
    PALW_CUDA_LLAMA_MMVQ_FAULT_LAUNCH = 8,
    PALW_CUDA_LLAMA_MMVQ_FAULT_INCOMPLETE = 9
} palw_cuda_llama_mmvq_fault_v1;

/* ---- records ------------------------------------------------------------ */

/* Base record: shapes, position and sketch of one traced output tile. */
typedef struct palw_cuda_trace_record {
    uint64_t kernel_sequence;
    uint64_t tile_index;
    uint64_t decode_step;
    uint64_t m;
    uint64_t n;
    uint64_t k;
    uint64_t batch;
    uint64_t query_tokens;
    uint64_t key_value_tokens;
    uint64_t sketch[PALW_CUDA_TRACE_SKETCH_LANES];
    uint32_t layer_id;
    uint32_t tile_row;
    uint32_t tile_column;
    uint32_t tile_rows;
    uint32_t tile_columns;
    uint32_t output_rows;
    uint32_t output_columns;
    uint16_t schema_version;
    uint8_t kind;
    uint8_t phase;
    uint8_t dtype;
    uint8_t quantization;
    uint8_t causal;
} palw_cuda_trace_record;

/* V2 extension: origin of the sketched values and the producer variant. */
typedef struct palw_cuda_trace_record_v2 {
    palw_cuda_trace_record base;
    uint8_t declared_origin;
    uint8_t accumulator_stage;
    uint8_t accumulator_dtype;
    uint16_t sketch_scheme;
    uint32_t reduction_segment_index;
    uint32_t reduction_segment_count;
    uint8_t producer_variant_id[PALW_CUDA_PRODUCER_ID_SIZE];
} palw_cuda_trace_record_v2;

/* V3 record: schedule position, attention grouping, launch geometry, ids. */
typedef struct palw_cuda_trace_record_v3 {
    palw_cuda_trace_record_v2 base;
    uint64_t covered_schedule_index;
    uint64_t attention_owner_schedule_index;
    uint32_t sublaunch_index;
    uint32_t sublaunch_count;
    uint8_t layer_present;
    uint8_t attention_group_present;
    uint8_t attention_stage;
    uint8_t grouping_version;
    uint32_t query_heads;
    uint32_t key_value_heads;
    uint32_t head_dim;
    uint32_t logical_batch;
    uint32_t physical_key_value_tokens;
    uint32_t grid_x;
    uint32_t grid_y;
    uint32_t grid_z;
    uint32_t block_x;
    uint32_t block_y;
    uint32_t block_z;
    uint32_t dynamic_shared_memory_bytes;
    uint8_t operation_instance_id[PALW_CUDA_PRODUCER_ID_SIZE];
    uint8_t attention_group_instance_id[PALW_CUDA_PRODUCER_ID_SIZE];
    uint8_t decomposition_plan_id[PALW_CUDA_PRODUCER_ID_SIZE];
    uint8_t physical_layout_id[PALW_CUDA_PRODUCER_ID_SIZE];
    uint8_t work_entry_point_id[PALW_CUDA_PRODUCER_ID_SIZE];
    uint8_t capture_implementation_id[PALW_CUDA_PRODUCER_ID_SIZE];
} palw_cuda_trace_record_v3;

/* ---- producer launch description ---------------------------------------- */

/* The compile-time identity a kernel specialization claims for itself. */
typedef struct palw_cuda_producer_actual_identity_v3 {
    uint8_t producer_variant_id[PALW_CUDA_PRODUCER_ID_SIZE];
    uint8_t work_entry_point_id[PALW_CUDA_PRODUCER_ID_SIZE];
    uint8_t capture_implementation_id[PALW_CUDA_PRODUCER_ID_SIZE];
} palw_cuda_producer_actual_identity_v3;

/* The caller's binding of a launch to one kernel binary and its attributes. */
typedef struct palw_cuda_producer_kernel_binding_v3 {
    uint8_t kernel_binary_digest[PALW_CUDA_PRODUCER_ID_SIZE];
    uint32_t sm_arch;
    int32_t binary_version;
    int32_t ptx_version;
    int32_t num_regs;
    int32_t max_threads_per_block;
    uint64_t static_shared_memory_bytes;
    uint64_t local_memory_bytes;
} palw_cuda_producer_kernel_binding_v3;

/* What the caller approves for one launch (filled by the approve callback). */
typedef struct palw_cuda_producer_launch_v3 {
    uint64_t launch_nonce;
    palw_cuda_trace_record_v3 semantic_template;
    palw_cuda_producer_kernel_binding_v3 kernel_binding;
} palw_cuda_producer_launch_v3;

typedef struct palw_cuda_producer_launch_dimensions_v1 {
    uint32_t grid_x;
    uint32_t grid_y;
    uint32_t grid_z;
    uint32_t block_x;
    uint32_t block_y;
    uint32_t block_z;
    uint64_t dynamic_shared_memory_bytes;
} palw_cuda_producer_launch_dimensions_v1;

/* Device-side slot of one record: filled by captures, read at finalize. */
typedef struct palw_cuda_producer_device_slot_v3 {
    unsigned long long sketch[PALW_CUDA_TRACE_SKETCH_LANES];
    unsigned long long captures;
    unsigned int faults;
    unsigned int reserved;
} palw_cuda_producer_device_slot_v3;

/*
 * Passed by value as kernel argument PALW_CUDA_PRODUCER_MMVQ_VIEW_ARGUMENT_INDEX_V3.
 * All zero (abi_version 0) means capture off: the kernel skips the hook.
 */
typedef struct palw_cuda_producer_device_view_v3 {
    uint32_t abi_version;
    uint32_t record_index;
    uint32_t output_rows;
    uint32_t output_columns;
    palw_cuda_producer_device_slot_v3 * slot;
    unsigned int * capture_bitmap;
    palw_cuda_producer_actual_identity_v3 expected_identity;
} palw_cuda_producer_device_view_v3;

/* cudaFuncGetAttributes of the grouped final-output collector kernel. */
typedef struct palw_cuda_producer_grouped_capture_info_v3 {
    uint32_t abi_version;
    uint32_t struct_size;
    uint32_t sm_arch;
    int32_t binary_version;
    int32_t ptx_version;
    int32_t num_regs;
    int32_t max_threads_per_block;
    uint64_t static_shared_memory_bytes;
    uint64_t local_memory_bytes;
    uint8_t capture_implementation_id[PALW_CUDA_PRODUCER_ID_SIZE];
} palw_cuda_producer_grouped_capture_info_v3;

typedef struct palw_cuda_producer_trace_context_v3 palw_cuda_producer_trace_context_v3;

/* cudaStream_t is `struct CUstream_st *`; this is the same type, by name. */
typedef struct CUstream_st * palw_cuda_stream_t;

/* ---- llama bridge: associations and requests ---------------------------- */

typedef struct palw_cuda_llama_tensor_view_v1 {
    const void * data;
    uint8_t type;
    uint64_t ne[4];
    uint64_t nb[4];
} palw_cuda_llama_tensor_view_v1;

/* V1: one quantized MUL_MAT of the MMVQ-only stream. */
typedef struct palw_cuda_llama_mmvq_association_v1 {
    uint32_t abi_version;
    uint32_t struct_size;
    const void * operation_token;
    const void * weight_data;
    uint64_t m;
    uint64_t n;
    uint64_t k;
    uint64_t batch;
    uint32_t output_rows;
    uint32_t output_columns;
    uint8_t quantization;
} palw_cuda_llama_mmvq_association_v1;

/* V2: one launch of the mixed stream (MMVQ or one attention stage). */
typedef struct palw_cuda_llama_trace_association_v2 {
    uint32_t abi_version;
    uint32_t struct_size;
    const void * operation_token;
    palw_cuda_llama_tensor_view_v1 src0;
    palw_cuda_llama_tensor_view_v1 src1;
    palw_cuda_llama_tensor_view_v1 src2;
    palw_cuda_llama_tensor_view_v1 dst;
    uint64_t decode_step;
    uint64_t m;
    uint64_t n;
    uint64_t k;
    uint64_t batch;
    uint32_t output_rows;
    uint32_t output_columns;
    uint32_t layer_id;
    uint32_t query_tokens;
    uint32_t key_value_tokens;
    uint32_t physical_key_value_tokens;
    uint32_t query_heads;
    uint32_t key_value_heads;
    uint32_t head_dim;
    uint32_t logical_batch;
    uint32_t scale_bits;
    uint32_t max_bias_bits;
    uint8_t kind;
    uint8_t phase;
    uint8_t quantization;
    uint8_t causal;
    uint8_t layer_present;
    uint8_t attention_stage;
    uint8_t precision;
    uint8_t attention_mask;
} palw_cuda_llama_trace_association_v2;

typedef palw_cuda_trace_status (*palw_cuda_llama_mmvq_approve_fn_v1)(
    void * user_data,
    const palw_cuda_llama_mmvq_association_v1 * actual,
    palw_cuda_producer_launch_v3 * expected_launch);
typedef void (*palw_cuda_llama_mmvq_launch_accepted_fn_v1)(
    void * user_data,
    const palw_cuda_llama_mmvq_association_v1 * actual,
    const palw_cuda_producer_launch_v3 * expected_launch);
typedef void (*palw_cuda_llama_mmvq_fault_fn_v1)(
    void * user_data,
    palw_cuda_trace_status status,
    palw_cuda_llama_mmvq_fault_v1 fault,
    const palw_cuda_llama_mmvq_association_v1 * actual);

typedef struct palw_cuda_llama_mmvq_request_v1 {
    uint32_t abi_version;
    uint32_t struct_size;
    uint64_t expected_launch_count;
    palw_cuda_producer_trace_context_v3 * producer_context;
    void * user_data;
    palw_cuda_llama_mmvq_approve_fn_v1 approve;
    palw_cuda_llama_mmvq_launch_accepted_fn_v1 launch_accepted;
    palw_cuda_llama_mmvq_fault_fn_v1 fault;
} palw_cuda_llama_mmvq_request_v1;

typedef palw_cuda_trace_status (*palw_cuda_llama_trace_approve_fn_v2)(
    void * user_data,
    const palw_cuda_llama_trace_association_v2 * actual,
    palw_cuda_producer_launch_v3 * expected_launch);
typedef void (*palw_cuda_llama_trace_launch_accepted_fn_v2)(
    void * user_data,
    const palw_cuda_llama_trace_association_v2 * actual,
    const palw_cuda_producer_launch_v3 * expected_launch);
typedef void (*palw_cuda_llama_trace_fault_fn_v2)(
    void * user_data,
    palw_cuda_trace_status status,
    palw_cuda_llama_mmvq_fault_v1 fault,
    const palw_cuda_llama_trace_association_v2 * actual);

typedef struct palw_cuda_llama_trace_request_v2 {
    uint32_t abi_version;
    uint32_t struct_size;
    uint64_t expected_launch_count;
    palw_cuda_producer_trace_context_v3 * producer_context;
    void * user_data;
    palw_cuda_llama_trace_approve_fn_v2 approve;
    palw_cuda_llama_trace_launch_accepted_fn_v2 launch_accepted;
    palw_cuda_llama_trace_fault_fn_v2 fault;
} palw_cuda_llama_trace_request_v2;

/* ---- kernel self-description -------------------------------------------- */

typedef struct palw_cuda_llama_mmvq_kernel_info_v1 {
    uint32_t abi_version;
    uint32_t struct_size;
    uint8_t quantization;
    palw_cuda_producer_actual_identity_v3 actual_identity;
    uint32_t sm_arch;
    int32_t binary_version;
    int32_t ptx_version;
    int32_t num_regs;
    int32_t max_threads_per_block;
    uint64_t static_shared_memory_bytes;
    uint64_t local_memory_bytes;
} palw_cuda_llama_mmvq_kernel_info_v1;

typedef struct palw_cuda_llama_attention_kernel_info_v1 {
    uint32_t abi_version;
    uint32_t struct_size;
    uint8_t attention_stage;
    uint8_t work_tensor_type;
    uint8_t mask_tensor_type;
    palw_cuda_producer_actual_identity_v3 actual_identity;
    palw_cuda_producer_launch_dimensions_v1 dimensions;
    uint32_t sm_arch;
    int32_t binary_version;
    int32_t ptx_version;
    int32_t num_regs;
    int32_t max_threads_per_block;
    uint64_t static_shared_memory_bytes;
    uint64_t local_memory_bytes;
    uint64_t output_row_stride;
} palw_cuda_llama_attention_kernel_info_v1;

/* ---- backend API table and proc types ------------------------------------ */

typedef struct palw_cuda_llama_mmvq_backend_api_v1 {
    uint32_t version;
    uint32_t struct_size;
    palw_cuda_trace_status (*producer_create)(
        void * backend, uint64_t capacity, palw_cuda_producer_trace_context_v3 ** out_context);
    void (*producer_destroy)(void * backend, palw_cuda_producer_trace_context_v3 * context);
    palw_cuda_trace_status (*producer_finalize)(
        void * backend, palw_cuda_producer_trace_context_v3 * context,
        palw_cuda_trace_record_v3 * host_records, uint64_t host_capacity);
    uint64_t (*producer_count)(const palw_cuda_producer_trace_context_v3 * context);
    uint64_t (*producer_committed_count)(const palw_cuda_producer_trace_context_v3 * context);
    uint32_t (*producer_faults)(const palw_cuda_producer_trace_context_v3 * context);
    int (*producer_poisoned)(const palw_cuda_producer_trace_context_v3 * context);
    palw_cuda_trace_status (*encode_record)(
        const palw_cuda_trace_record_v3 * record, uint8_t * output, uint64_t output_size);
} palw_cuda_llama_mmvq_backend_api_v1;

typedef const palw_cuda_llama_mmvq_backend_api_v1 * (*palw_cuda_llama_mmvq_get_backend_api_v1)(void);
typedef palw_cuda_trace_status (*palw_cuda_llama_mmvq_kernel_info_backend_v1)(
    void * backend, uint8_t quantization, palw_cuda_llama_mmvq_kernel_info_v1 * out_info);
typedef palw_cuda_trace_status (*palw_cuda_llama_mmvq_bind_backend_v1)(
    void * backend, const palw_cuda_llama_mmvq_request_v1 * request);
typedef palw_cuda_trace_status (*palw_cuda_llama_mmvq_associate_backend_v1)(
    void * backend, const palw_cuda_llama_mmvq_association_v1 * actual);
typedef palw_cuda_trace_status (*palw_cuda_llama_mmvq_complete_backend_v1)(
    void * backend, const void * operation_token);
typedef palw_cuda_trace_status (*palw_cuda_llama_mmvq_unbind_backend_v1)(
    void * backend, const palw_cuda_llama_mmvq_request_v1 * request, uint64_t * accepted_launch_count);
typedef palw_cuda_trace_status (*palw_cuda_llama_trace_bind_backend_v2)(
    void * backend, const palw_cuda_llama_trace_request_v2 * request);
typedef palw_cuda_trace_status (*palw_cuda_llama_trace_associate_backend_v2)(
    void * backend, const palw_cuda_llama_trace_association_v2 * actual);
typedef palw_cuda_trace_status (*palw_cuda_llama_trace_complete_backend_v2)(
    void * backend, const void * operation_token);
typedef palw_cuda_trace_status (*palw_cuda_llama_trace_unbind_backend_v2)(
    void * backend, const palw_cuda_llama_trace_request_v2 * request, uint64_t * accepted_launch_count);
typedef palw_cuda_trace_status (*palw_cuda_llama_attention_kernel_info_backend_v1)(
    void * backend, const palw_cuda_llama_trace_association_v2 * actual,
    palw_cuda_llama_attention_kernel_info_v1 * out_info);
typedef palw_cuda_trace_status (*palw_cuda_llama_grouped_capture_info_backend_v1)(
    void * backend, palw_cuda_producer_grouped_capture_info_v3 * out_info);

/* ---- producer (producer_accumulator.cu, producer_contract.cpp, record_codec.cpp) */

palw_cuda_trace_status palw_cuda_producer_trace_create_v3(
    uint64_t capacity, palw_cuda_producer_trace_context_v3 ** out_context);
void palw_cuda_producer_trace_destroy_v3(palw_cuda_producer_trace_context_v3 * context);

palw_cuda_trace_status palw_cuda_producer_trace_prepare_v3(
    palw_cuda_producer_trace_context_v3 * context,
    palw_cuda_stream_t stream,
    const palw_cuda_producer_launch_v3 * expected_launch,
    const void * entry_point,
    const palw_cuda_producer_launch_dimensions_v1 * dimensions,
    uint32_t kernel_argument_count,
    uint32_t view_argument_index,
    palw_cuda_producer_device_view_v3 * out_view);
palw_cuda_trace_status palw_cuda_producer_trace_launch_v3(
    palw_cuda_producer_trace_context_v3 * context,
    palw_cuda_stream_t stream,
    const void * entry_point,
    void ** kernel_arguments);
palw_cuda_trace_status palw_cuda_producer_trace_enqueue_grouped_final_output_f32_v3(
    palw_cuda_producer_trace_context_v3 * context,
    palw_cuda_stream_t stream,
    const palw_cuda_producer_launch_v3 * expected_launch,
    const void * work_entry_point,
    const palw_cuda_producer_launch_dimensions_v1 * work_dimensions,
    const float * output,
    uint64_t output_row_stride,
    const palw_cuda_producer_actual_identity_v3 * actual_identity);
palw_cuda_trace_status palw_cuda_producer_trace_finalize_v3(
    palw_cuda_producer_trace_context_v3 * context,
    palw_cuda_stream_t stream,
    palw_cuda_trace_record_v3 * host_records,
    uint64_t host_capacity);

uint64_t palw_cuda_producer_trace_count_v3(const palw_cuda_producer_trace_context_v3 * context);
uint64_t palw_cuda_producer_trace_committed_count_v3(const palw_cuda_producer_trace_context_v3 * context);
uint32_t palw_cuda_producer_trace_faults_v3(const palw_cuda_producer_trace_context_v3 * context);
int palw_cuda_producer_trace_poisoned_v3(const palw_cuda_producer_trace_context_v3 * context);

palw_cuda_trace_status palw_cuda_producer_query_grouped_capture_info_v3(
    palw_cuda_producer_grouped_capture_info_v3 * out_info);

/* Host-only contract checks (producer_contract.cpp). */
palw_cuda_trace_status palw_cuda_producer_validate_launch_v3(
    const palw_cuda_producer_launch_v3 * launch, uint64_t * required_records);
palw_cuda_trace_status palw_cuda_producer_validate_grouped_final_output_launch_v3(
    const palw_cuda_producer_launch_v3 * launch, uint64_t * required_records);

/* Canonical big-endian V3 encoding (record_codec.cpp). */
palw_cuda_trace_status palw_cuda_trace_encode_record_v3(
    const palw_cuda_trace_record_v3 * record, uint8_t * output, uint64_t output_size);

/* ---- inline helpers shared by host, device and libllama ------------------- */

#if defined(__CUDACC__)
#define PALW_CUDA_TRACE_HD __host__ __device__
#else
#define PALW_CUDA_TRACE_HD
#endif

/* One term of a sketch lane for element e (row * output_columns + column). */
static inline PALW_CUDA_TRACE_HD uint64_t palw_cuda_trace_sketch_term_v1(
        uint32_t lane, uint64_t element_index, uint32_t value_bits) {
    /* NaN payloads are not part of the value: every NaN counts as 0x7fc00000. */
    if ((value_bits & 0x7f800000u) == 0x7f800000u && (value_bits & 0x007fffffu) != 0u) {
        value_bits = 0x7fc00000u;
    }
    uint64_t z = (element_index << 32) ^ (uint64_t) value_bits;
    z += UINT64_C(0x9e3779b97f4a7c15) * (uint64_t) (lane + 1u);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static inline bool palw_cuda_trace_id_is_zero(const uint8_t * id) {
    for (uint32_t i = 0; i < PALW_CUDA_PRODUCER_ID_SIZE; ++i) {
        if (id[i] != 0u) {
            return false;
        }
    }
    return true;
}

static inline bool palw_cuda_trace_identity_is_set(const palw_cuda_producer_actual_identity_v3 * id) {
    return id != NULL && !palw_cuda_trace_id_is_zero(id->producer_variant_id) &&
        !palw_cuda_trace_id_is_zero(id->work_entry_point_id) &&
        !palw_cuda_trace_id_is_zero(id->capture_implementation_id);
}

static inline bool palw_cuda_llama_mmvq_request_is_compatible_v1(
        const palw_cuda_llama_mmvq_request_v1 * request) {
    return request != NULL &&
        request->abi_version == PALW_CUDA_LLAMA_MMVQ_REQUEST_ABI_VERSION_V1 &&
        request->struct_size == sizeof(*request) && request->expected_launch_count != 0u &&
        request->producer_context != NULL && request->approve != NULL && request->fault != NULL;
}

/* Strict form for the owned copy: its producer exists and the count is the pinned 361. */
static inline bool palw_cuda_llama_trace_request_is_compatible_v2(
        const palw_cuda_llama_trace_request_v2 * request) {
    return request != NULL &&
        request->abi_version == PALW_CUDA_LLAMA_TRACE_REQUEST_ABI_VERSION_V2 &&
        request->struct_size == sizeof(*request) &&
        request->expected_launch_count == PALW_CUDA_LLAMA_TRACE_MIXED_LAUNCH_COUNT_V2 &&
        request->producer_context != NULL && request->approve != NULL && request->fault != NULL;
}

static inline bool palw_cuda_llama_quantization_is_supported(uint8_t quantization) {
    return quantization == PALW_CUDA_TRACE_QUANTIZATION_Q4_K ||
        quantization == PALW_CUDA_TRACE_QUANTIZATION_Q6_K;
}

static inline bool palw_cuda_llama_mmvq_association_is_supported_v1(
        const palw_cuda_llama_mmvq_association_v1 * actual) {
    return actual != NULL &&
        actual->abi_version == PALW_CUDA_LLAMA_MMVQ_ASSOCIATION_ABI_VERSION_V1 &&
        actual->struct_size == sizeof(*actual) && actual->operation_token != NULL &&
        actual->weight_data != NULL && actual->m != 0u && actual->n != 0u && actual->k != 0u &&
        actual->batch != 0u && actual->output_rows == actual->n &&
        actual->output_columns == actual->m &&
        palw_cuda_llama_quantization_is_supported(actual->quantization);
}

static inline bool palw_cuda_llama_trace_association_is_supported_v2(
        const palw_cuda_llama_trace_association_v2 * actual) {
    if (actual == NULL || actual->abi_version != PALW_CUDA_LLAMA_TRACE_ASSOCIATION_ABI_VERSION_V2 ||
            actual->struct_size != sizeof(*actual) || actual->operation_token == NULL ||
            actual->dst.data == NULL || actual->src0.data == NULL || actual->m == 0u ||
            actual->n == 0u || actual->k == 0u || actual->batch == 0u ||
            actual->output_rows == 0u || actual->output_columns != actual->m ||
            (actual->phase != PALW_CUDA_TRACE_PREFILL && actual->phase != PALW_CUDA_TRACE_DECODE)) {
        return false;
    }
    switch (actual->attention_stage) {
        case PALW_CUDA_TRACE_ATTENTION_STAGE_NONE:
            return actual->kind == PALW_CUDA_TRACE_GEMM && actual->output_rows == actual->n &&
                palw_cuda_llama_quantization_is_supported(actual->quantization);
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF:
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX:
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_VALUE_AGGREGATION_MMVF:
            return actual->kind == (actual->attention_stage ==
                        PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX
                    ? PALW_CUDA_TRACE_ATTENTION : PALW_CUDA_TRACE_GEMM) &&
                actual->quantization == PALW_CUDA_TRACE_QUANTIZATION_NONE &&
                actual->layer_present == 1u && actual->query_tokens != 0u &&
                actual->key_value_tokens != 0u &&
                actual->physical_key_value_tokens >= actual->key_value_tokens &&
                actual->query_heads != 0u && actual->key_value_heads != 0u &&
                actual->query_heads % actual->key_value_heads == 0u && actual->head_dim != 0u &&
                actual->logical_batch != 0u &&
                actual->output_rows == actual->query_heads * actual->logical_batch;
        default:
            return false;
    }
}

static inline bool palw_cuda_llama_kernel_attributes_are_set(
        uint32_t sm_arch, int32_t binary_version, int32_t num_regs, int32_t max_threads_per_block) {
    return sm_arch != 0u && binary_version > 0 && num_regs > 0 && max_threads_per_block > 0;
}

static inline bool palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(
        const palw_cuda_llama_mmvq_kernel_info_v1 * info) {
    return info != NULL && info->abi_version == PALW_CUDA_LLAMA_MMVQ_KERNEL_INFO_ABI_VERSION_V1 &&
        info->struct_size == sizeof(*info) &&
        palw_cuda_llama_quantization_is_supported(info->quantization) &&
        palw_cuda_trace_identity_is_set(&info->actual_identity) &&
        palw_cuda_llama_kernel_attributes_are_set(
            info->sm_arch, info->binary_version, info->num_regs, info->max_threads_per_block);
}

static inline bool palw_cuda_llama_attention_kernel_info_is_compatible_v1(
        const palw_cuda_llama_attention_kernel_info_v1 * info) {
    if (info == NULL || info->abi_version != PALW_CUDA_LLAMA_ATTENTION_KERNEL_INFO_ABI_VERSION_V1 ||
            info->struct_size != sizeof(*info) ||
            !palw_cuda_trace_identity_is_set(&info->actual_identity) ||
            !palw_cuda_llama_kernel_attributes_are_set(
                info->sm_arch, info->binary_version, info->num_regs, info->max_threads_per_block) ||
            info->dimensions.grid_x == 0u || info->dimensions.grid_y == 0u ||
            info->dimensions.grid_z == 0u || info->dimensions.block_x == 0u ||
            info->dimensions.block_y == 0u || info->dimensions.block_z == 0u ||
            info->output_row_stride == 0u) {
        return false;
    }
    switch (info->attention_stage) {
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_QK_SCORE_MMVF:
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_VALUE_AGGREGATION_MMVF:
            return info->work_tensor_type == PALW_CUDA_LLAMA_TENSOR_TYPE_F16 &&
                info->mask_tensor_type == PALW_CUDA_LLAMA_TENSOR_TYPE_NONE;
        case PALW_CUDA_TRACE_ATTENTION_STAGE_EAGER_MASKED_SCALED_SOFTMAX:
            return info->work_tensor_type == PALW_CUDA_LLAMA_TENSOR_TYPE_F32 &&
                (info->mask_tensor_type == PALW_CUDA_LLAMA_TENSOR_TYPE_F32 ||
                 info->mask_tensor_type == PALW_CUDA_LLAMA_TENSOR_TYPE_F16);
        default:
            return false;
    }
}

static inline bool palw_cuda_llama_mmvq_backend_api_is_compatible_v1(
        const palw_cuda_llama_mmvq_backend_api_v1 * api) {
    return api != NULL && api->version == PALW_CUDA_LLAMA_MMVQ_BACKEND_API_VERSION_V1 &&
        api->struct_size == sizeof(*api) && api->producer_create != NULL &&
        api->producer_destroy != NULL && api->producer_finalize != NULL &&
        api->producer_count != NULL && api->producer_committed_count != NULL &&
        api->producer_faults != NULL && api->producer_poisoned != NULL &&
        api->encode_record != NULL;
}

#ifdef __cplusplus
}
#endif

#endif /* PALW_CUDA_LLAMA_MMVQ_H */
