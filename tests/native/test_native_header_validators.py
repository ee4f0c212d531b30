"""The header's inline validators: each accepts a well-formed input and rejects each broken field.

Inputs are built the way the patch builds them (llama-context.cpp associations, the
kernel-info queries of mmvq.cu / mmvf.cu / softmax.cu, the seed smoke's requests).
"""

import pytest
from native_templates import PV, QK, SOFTMAX, diagnostic_id, set_field

from pytest_palw.topology import PINNED_ATTENTION

NONNULL = 0x1000  # any non-NULL address: the validators compare pointers, never follow them


def _pointer(abi, ctype="void *"):
    return abi.ffi.cast(ctype, NONNULL)


def _function_pointer(abi, holder, field):
    return abi.ffi.cast(abi.ffi.typeof(getattr(holder, field)), NONNULL)


# ---- requests ----------------------------------------------------------------

def _request(abi, version):
    ffi, lib = abi.ffi, abi.lib
    ctype = "palw_cuda_llama_mmvq_request_v1" if version == 1 else "palw_cuda_llama_trace_request_v2"
    request = ffi.new(ctype + " *")
    request.abi_version = (lib.PALW_CUDA_LLAMA_MMVQ_REQUEST_ABI_VERSION_V1 if version == 1
                           else lib.PALW_CUDA_LLAMA_TRACE_REQUEST_ABI_VERSION_V2)
    request.struct_size = ffi.sizeof(ctype)
    request.expected_launch_count = 253 if version == 1 else lib.PALW_CUDA_LLAMA_TRACE_MIXED_LAUNCH_COUNT_V2
    request.producer_context = _pointer(abi, "palw_cuda_producer_trace_context_v3 *")
    request.approve = _function_pointer(abi, request, "approve")
    request.fault = _function_pointer(abi, request, "fault")
    # launch_accepted is optional: the bridge checks it for NULL before each call.
    return request


def _request_valid(abi, version, request):
    lib = abi.lib
    check = (lib.palw_cuda_llama_mmvq_request_is_compatible_v1 if version == 1
             else lib.palw_cuda_llama_trace_request_is_compatible_v2)
    return check(request)


REQUEST_BREAKS = [
    ("abi_version", lambda abi, v: 3),
    ("struct_size", lambda abi, v: 8),
    ("expected_launch_count", lambda abi, v: 0),
    ("producer_context", lambda abi, v: abi.ffi.NULL),
    ("approve", lambda abi, v: abi.ffi.NULL),
    ("fault", lambda abi, v: abi.ffi.NULL),
]


@pytest.mark.parametrize("version", [1, 2])
def test_request_well_formed_is_accepted(abi, version):
    request = _request(abi, version)
    assert _request_valid(abi, version, request)
    request.launch_accepted = _function_pointer(abi, request, "launch_accepted")
    assert _request_valid(abi, version, request)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("field, broken", REQUEST_BREAKS, ids=[b[0] for b in REQUEST_BREAKS])
def test_request_broken_field_is_rejected(abi, version, field, broken):
    request = _request(abi, version)
    setattr(request, field, broken(abi, version))
    assert not _request_valid(abi, version, request)


def test_v2_request_needs_the_pinned_361_count(abi):
    request = _request(abi, 2)
    for count in (253, 360, 362):
        request.expected_launch_count = count
        assert not _request_valid(abi, 2, request)


@pytest.mark.parametrize("version", [1, 2])
def test_null_request_is_rejected(abi, version):
    assert not _request_valid(abi, version, abi.ffi.NULL)


# ---- quantization and kernel attributes -------------------------------------

def test_quantization_support_is_q4_k_and_q6_k_only(abi):
    lib = abi.lib
    supported = {q for q in range(256) if lib.palw_cuda_llama_quantization_is_supported(q)}
    assert supported == {lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K, lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K}


@pytest.mark.parametrize("arguments, expected", [
    ((89, 89, 40, 128), True),
    ((0, 89, 40, 128), False),
    ((89, 0, 40, 128), False),
    ((89, -1, 40, 128), False),
    ((89, 89, 0, 128), False),
    ((89, 89, 40, 0), False),
    ((89, 89, 40, -128), False),
])
def test_kernel_attributes_are_set(abi, arguments, expected):
    assert abi.lib.palw_cuda_llama_kernel_attributes_are_set(*arguments) is expected


# ---- ids ---------------------------------------------------------------------

def test_id_is_zero_looks_at_all_32_bytes(abi):
    ffi, lib = abi.ffi, abi.lib
    assert lib.palw_cuda_trace_id_is_zero(ffi.new("uint8_t[32]"))
    for position in (0, 17, 31):
        raw = bytearray(32)
        raw[position] = 1
        assert not lib.palw_cuda_trace_id_is_zero(ffi.new("uint8_t[32]", bytes(raw)))


def _identity(abi):
    identity = abi.ffi.new("palw_cuda_producer_actual_identity_v3 *")
    for field in ("producer_variant_id", "work_entry_point_id", "capture_implementation_id"):
        abi.ffi.memmove(getattr(identity, field), diagnostic_id(field), 32)
    return identity


def test_identity_is_set_needs_all_three_ids(abi):
    lib = abi.lib
    assert lib.palw_cuda_trace_identity_is_set(_identity(abi))
    assert not lib.palw_cuda_trace_identity_is_set(abi.ffi.NULL)
    for field in ("producer_variant_id", "work_entry_point_id", "capture_implementation_id"):
        identity = _identity(abi)
        abi.ffi.memmove(getattr(identity, field), bytes(32), 32)
        assert not lib.palw_cuda_trace_identity_is_set(identity)


# ---- associations -------------------------------------------------------------

def _mmvq_association_v1(abi):
    ffi, lib = abi.ffi, abi.lib
    actual = ffi.new("palw_cuda_llama_mmvq_association_v1 *")
    actual.abi_version = lib.PALW_CUDA_LLAMA_MMVQ_ASSOCIATION_ABI_VERSION_V1
    actual.struct_size = ffi.sizeof("palw_cuda_llama_mmvq_association_v1")
    actual.operation_token = _pointer(abi)
    actual.weight_data = _pointer(abi)
    actual.m, actual.n, actual.k, actual.batch = 4096, 1, 4096, 1
    actual.output_rows, actual.output_columns = 1, 4096
    actual.quantization = lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K
    return actual


MMVQ_ASSOCIATION_BREAKS = [
    ("abi_version", 2), ("struct_size", 1), ("operation_token", None), ("weight_data", None),
    ("m", 0), ("n", 0), ("k", 0), ("batch", 0), ("output_rows", 2), ("output_columns", 4095),
    ("quantization", 0), ("quantization", 3),
]


def test_mmvq_association_v1_well_formed_is_accepted(abi):
    assert abi.lib.palw_cuda_llama_mmvq_association_is_supported_v1(_mmvq_association_v1(abi))


@pytest.mark.parametrize("field, value", MMVQ_ASSOCIATION_BREAKS,
                         ids=[f"{f}={v}" for f, v in MMVQ_ASSOCIATION_BREAKS])
def test_mmvq_association_v1_broken_field_is_rejected(abi, field, value):
    actual = _mmvq_association_v1(abi)
    setattr(actual, field, abi.ffi.NULL if value is None else value)
    assert not abi.lib.palw_cuda_llama_mmvq_association_is_supported_v1(actual)
    assert not abi.lib.palw_cuda_llama_mmvq_association_is_supported_v1(abi.ffi.NULL)


def _tensor_view(abi, view, type_name, ne):
    lib = abi.lib
    view.data = _pointer(abi)
    view.type = getattr(lib, f"PALW_CUDA_LLAMA_TENSOR_TYPE_{type_name}")
    size = 2 if type_name == "F16" else 4
    strides = [size, size * ne[0], size * ne[0] * ne[1], size * ne[0] * ne[1] * ne[2]]
    for i in range(4):
        view.ne[i], view.nb[i] = ne[i], strides[i]


def _trace_association_v2(abi, stage):
    """As llama_context::palw_cuda_trace_eval builds it for one Qwen3-8B launch."""
    ffi, lib = abi.ffi, abi.lib
    actual = ffi.new("palw_cuda_llama_trace_association_v2 *")
    actual.abi_version = lib.PALW_CUDA_LLAMA_TRACE_ASSOCIATION_ABI_VERSION_V2
    actual.struct_size = ffi.sizeof("palw_cuda_llama_trace_association_v2")
    actual.operation_token = _pointer(abi)
    actual.phase = lib.PALW_CUDA_TRACE_PREFILL
    actual.attention_stage = stage
    if stage == 0:
        _tensor_view(abi, actual.src0, "Q4_K", (4096, 4096, 1, 1))
        _tensor_view(abi, actual.src1, "F32", (4096, 1, 1, 1))
        _tensor_view(abi, actual.dst, "F32", (4096, 1, 1, 1))
        actual.kind = lib.PALW_CUDA_TRACE_GEMM
        actual.m, actual.n, actual.k, actual.batch = 4096, 1, 4096, 1
        actual.output_rows, actual.output_columns = 1, 4096
        actual.quantization = lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K
        return actual
    a = PINNED_ATTENTION
    cells, heads, kv_heads, dim = a.kv_cells, a.query_heads, a.key_value_heads, a.head_dim
    m, k = {QK: (cells, dim), SOFTMAX: (cells, 1), PV: (dim, cells)}[stage]
    src0 = {QK: ("F16", (dim, cells, kv_heads, 1)), SOFTMAX: ("F32", (cells, 1, heads, 1)),
            PV: ("F16", (cells, dim, kv_heads, 1))}
    _tensor_view(abi, actual.src0, *src0[stage])
    _tensor_view(abi, actual.src1, "F32", (cells, 1, 1, 1) if stage == SOFTMAX else (k, 1, heads, 1))
    _tensor_view(abi, actual.dst, "F32", (m, 1, heads, 1))
    actual.kind = lib.PALW_CUDA_TRACE_ATTENTION if stage == SOFTMAX else lib.PALW_CUDA_TRACE_GEMM
    actual.m, actual.n, actual.k, actual.batch = m, 1, k, heads
    actual.output_rows, actual.output_columns = heads, m
    actual.layer_id, actual.layer_present = 3, 1
    actual.query_tokens, actual.key_value_tokens, actual.physical_key_value_tokens = 1, 1, cells
    actual.query_heads, actual.key_value_heads, actual.head_dim, actual.logical_batch = heads, kv_heads, dim, 1
    actual.causal = 1
    actual.quantization = lib.PALW_CUDA_TRACE_QUANTIZATION_NONE
    return actual


ASSOCIATION_V2_COMMON_BREAKS = [
    ("abi_version", 1), ("struct_size", 1), ("operation_token", None), ("dst.data", None),
    ("src0.data", None), ("m", 0), ("n", 0), ("k", 0), ("batch", 0), ("output_rows", 0),
    ("output_columns", 7), ("phase", 0), ("phase", 3), ("attention_stage", 4),
]
ASSOCIATION_V2_MMVQ_BREAKS = [("kind", 2), ("output_rows", 2), ("quantization", 0)]
ASSOCIATION_V2_ATTENTION_BREAKS = [
    ("quantization", 1), ("layer_present", 0), ("query_tokens", 0), ("key_value_tokens", 0),
    ("physical_key_value_tokens", 0), ("query_heads", 0), ("key_value_heads", 0),
    ("key_value_heads", 7), ("head_dim", 0), ("logical_batch", 0), ("output_rows", 16),
]
STAGES = [0, QK, SOFTMAX, PV]


def _association_cases():
    for stage in STAGES:
        specific = ASSOCIATION_V2_MMVQ_BREAKS if stage == 0 else ASSOCIATION_V2_ATTENTION_BREAKS
        for field, value in ASSOCIATION_V2_COMMON_BREAKS + specific:
            yield pytest.param(stage, field, value, id=f"stage{stage}-{field}={value}")
        if stage:
            yield pytest.param(stage, "kind", "swapped", id=f"stage{stage}-kind-swapped")


@pytest.mark.parametrize("stage", STAGES)
def test_trace_association_v2_well_formed_is_accepted(abi, stage):
    assert abi.lib.palw_cuda_llama_trace_association_is_supported_v2(_trace_association_v2(abi, stage))


@pytest.mark.parametrize("stage, field, value", list(_association_cases()))
def test_trace_association_v2_broken_field_is_rejected(abi, stage, field, value):
    actual = _trace_association_v2(abi, stage)
    if value == "swapped":
        # The stage's other kind: softmax is ATTENTION, QK and PV are GEMM.
        value = abi.lib.PALW_CUDA_TRACE_GEMM if stage == SOFTMAX else abi.lib.PALW_CUDA_TRACE_ATTENTION
    set_field(abi.ffi, actual[0], field, abi.ffi.NULL if value is None else value)
    assert not abi.lib.palw_cuda_llama_trace_association_is_supported_v2(actual)


def test_trace_association_v2_physical_kv_below_logical_is_rejected(abi):
    actual = _trace_association_v2(abi, QK)
    actual.key_value_tokens = 257
    assert not abi.lib.palw_cuda_llama_trace_association_is_supported_v2(actual)
    assert not abi.lib.palw_cuda_llama_trace_association_is_supported_v2(abi.ffi.NULL)


# ---- kernel self-description ----------------------------------------------------

def _mmvq_kernel_info(abi):
    ffi, lib = abi.ffi, abi.lib
    info = ffi.new("palw_cuda_llama_mmvq_kernel_info_v1 *")
    info.abi_version = lib.PALW_CUDA_LLAMA_MMVQ_KERNEL_INFO_ABI_VERSION_V1
    info.struct_size = ffi.sizeof("palw_cuda_llama_mmvq_kernel_info_v1")
    info.quantization = lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K
    info.actual_identity = _identity(abi)[0]
    info.sm_arch, info.binary_version, info.ptx_version = 89, 89, 89
    info.num_regs, info.max_threads_per_block = 40, 128
    return info


KERNEL_INFO_BREAKS = [
    ("abi_version", 2), ("struct_size", 4), ("actual_identity.producer_variant_id", bytes(32)),
    ("actual_identity.work_entry_point_id", bytes(32)),
    ("actual_identity.capture_implementation_id", bytes(32)), ("sm_arch", 0),
    ("binary_version", 0), ("num_regs", 0), ("max_threads_per_block", 0),
]


def test_mmvq_kernel_info_well_formed_is_accepted(abi):
    assert abi.lib.palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(_mmvq_kernel_info(abi))


@pytest.mark.parametrize("field, value", KERNEL_INFO_BREAKS + [("quantization", 0)],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_mmvq_kernel_info_broken_field_is_rejected(abi, field, value):
    info = _mmvq_kernel_info(abi)
    set_field(abi.ffi, info[0], field, value)
    assert not abi.lib.palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(info)
    assert not abi.lib.palw_cuda_llama_mmvq_kernel_info_is_compatible_v1(abi.ffi.NULL)


def _attention_kernel_info(abi, stage):
    """As ggml_cuda_palw_{mmvf,softmax}_attention_kernel_info_v1 fill it."""
    ffi, lib = abi.ffi, abi.lib
    info = ffi.new("palw_cuda_llama_attention_kernel_info_v1 *")
    info.abi_version = lib.PALW_CUDA_LLAMA_ATTENTION_KERNEL_INFO_ABI_VERSION_V1
    info.struct_size = ffi.sizeof("palw_cuda_llama_attention_kernel_info_v1")
    info.attention_stage = stage
    softmax = stage == SOFTMAX
    info.work_tensor_type = lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F32 if softmax else lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F16
    info.mask_tensor_type = lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F32 if softmax else lib.PALW_CUDA_LLAMA_TENSOR_TYPE_NONE
    info.actual_identity = _identity(abi)[0]
    dims = info.dimensions
    dims.grid_x, block_x, shared = {QK: (256, 64, 128), SOFTMAX: (1, 256, 1152), PV: (128, 128, 128)}[stage]
    dims.grid_y, dims.grid_z = 32, 1
    dims.block_x, dims.block_y, dims.block_z = block_x, 1, 1
    dims.dynamic_shared_memory_bytes = shared
    info.sm_arch, info.binary_version, info.ptx_version = 90, 90, 90
    info.num_regs, info.max_threads_per_block = 32, 1024
    info.output_row_stride = 256 if stage != PV else 128
    return info


ATTENTION_INFO_BREAKS = KERNEL_INFO_BREAKS + [
    (f"dimensions.{axis}", 0) for axis in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
] + [("output_row_stride", 0), ("attention_stage", 0), ("attention_stage", 4)]


@pytest.mark.parametrize("stage", [QK, SOFTMAX, PV])
def test_attention_kernel_info_well_formed_is_accepted(abi, stage):
    assert abi.lib.palw_cuda_llama_attention_kernel_info_is_compatible_v1(_attention_kernel_info(abi, stage))


def test_softmax_kernel_info_accepts_an_f16_mask(abi):
    info = _attention_kernel_info(abi, SOFTMAX)
    info.mask_tensor_type = abi.lib.PALW_CUDA_LLAMA_TENSOR_TYPE_F16
    assert abi.lib.palw_cuda_llama_attention_kernel_info_is_compatible_v1(info)


@pytest.mark.parametrize("stage", [QK, SOFTMAX, PV])
@pytest.mark.parametrize("field, value", ATTENTION_INFO_BREAKS, ids=lambda v: v if isinstance(v, str) else None)
def test_attention_kernel_info_broken_field_is_rejected(abi, stage, field, value):
    info = _attention_kernel_info(abi, stage)
    set_field(abi.ffi, info[0], field, value)
    assert not abi.lib.palw_cuda_llama_attention_kernel_info_is_compatible_v1(info)


@pytest.mark.parametrize("stage, field, type_name", [
    (QK, "work_tensor_type", "F32"), (QK, "mask_tensor_type", "F32"),
    (PV, "work_tensor_type", "Q4_K"), (PV, "mask_tensor_type", "F16"),
    (SOFTMAX, "work_tensor_type", "F16"), (SOFTMAX, "mask_tensor_type", "NONE"),
])
def test_attention_kernel_info_wrong_tensor_type_is_rejected(abi, stage, field, type_name):
    info = _attention_kernel_info(abi, stage)
    setattr(info, field, getattr(abi.lib, f"PALW_CUDA_LLAMA_TENSOR_TYPE_{type_name}"))
    assert not abi.lib.palw_cuda_llama_attention_kernel_info_is_compatible_v1(info)
    assert not abi.lib.palw_cuda_llama_attention_kernel_info_is_compatible_v1(abi.ffi.NULL)


# ---- backend API table --------------------------------------------------------------

API_FUNCTIONS = ("producer_create", "producer_destroy", "producer_finalize", "producer_count",
                 "producer_committed_count", "producer_faults", "producer_poisoned", "encode_record")


def _backend_api(abi):
    ffi, lib = abi.ffi, abi.lib
    api = ffi.new("palw_cuda_llama_mmvq_backend_api_v1 *")
    api.version = lib.PALW_CUDA_LLAMA_MMVQ_BACKEND_API_VERSION_V1
    api.struct_size = ffi.sizeof("palw_cuda_llama_mmvq_backend_api_v1")
    for name in API_FUNCTIONS:
        setattr(api, name, _function_pointer(abi, api, name))
    return api


def test_backend_api_well_formed_is_accepted(abi):
    assert abi.lib.palw_cuda_llama_mmvq_backend_api_is_compatible_v1(_backend_api(abi))


@pytest.mark.parametrize("field", ("version", "struct_size") + API_FUNCTIONS)
def test_backend_api_broken_field_is_rejected(abi, field):
    api = _backend_api(abi)
    setattr(api, field, 2 if field in ("version", "struct_size") else abi.ffi.NULL)
    assert not abi.lib.palw_cuda_llama_mmvq_backend_api_is_compatible_v1(api)
    assert not abi.lib.palw_cuda_llama_mmvq_backend_api_is_compatible_v1(abi.ffi.NULL)
