"""producer_contract.cpp: the two launch validators against the smoke's approved templates.

Each validator must accept exactly what approve_callback / approve_callback_v2 produce
for its class, and reject each malformed field with the status SPEC.md documents:
INVALID_ARGUMENT for a malformed template, IDENTITY_MISMATCH for a foreign one.
"""

import pytest
from native_templates import PV, QK, SOFTMAX, diagnostic_id, get_field, set_field

S = "semantic_template"
B = f"{S}.base.base"
V2 = f"{S}.base"
K = "kernel_binding"
ZERO_ID = bytes(32)

# (field path, broken value, expected status) valid for both classes.
COMMON_BREAKS = [
    (f"{B}.schema_version", 2, "INVALID_ARGUMENT"),
    ("launch_nonce", 0, "INVALID_ARGUMENT"),
    (f"{B}.phase", 0, "INVALID_ARGUMENT"),
    (f"{B}.phase", 3, "INVALID_ARGUMENT"),
    (f"{B}.dtype", 0, "INVALID_ARGUMENT"),
    (f"{B}.dtype", 2, "INVALID_ARGUMENT"),
    (f"{B}.causal", 2, "INVALID_ARGUMENT"),
    (f"{B}.m", 0, "INVALID_ARGUMENT"),
    (f"{B}.n", 0, "INVALID_ARGUMENT"),
    (f"{B}.k", 0, "INVALID_ARGUMENT"),
    (f"{B}.batch", 0, "INVALID_ARGUMENT"),
    (f"{B}.output_rows", 0, "INVALID_ARGUMENT"),
    (f"{B}.output_columns", 0, "INVALID_ARGUMENT"),
    (f"{B}.tile_index", 1, "INVALID_ARGUMENT"),
    (f"{B}.tile_row", 1, "INVALID_ARGUMENT"),
    (f"{B}.tile_column", 1, "INVALID_ARGUMENT"),
    (f"{B}.tile_rows", 2, "INVALID_ARGUMENT"),
    (f"{B}.tile_columns", 1, "INVALID_ARGUMENT"),
    (f"{B}.sketch[0]", 1, "INVALID_ARGUMENT"),
    (f"{B}.sketch[3]", 1 << 63, "INVALID_ARGUMENT"),
    (f"{S}.covered_schedule_index", 9999, "INVALID_ARGUMENT"),
    (f"{S}.layer_present", 2, "INVALID_ARGUMENT"),
    (f"{S}.grid_x", 0, "INVALID_ARGUMENT"),
    (f"{S}.grid_y", 0, "INVALID_ARGUMENT"),
    (f"{S}.grid_z", 0, "INVALID_ARGUMENT"),
    (f"{S}.block_x", 0, "INVALID_ARGUMENT"),
    (f"{S}.block_y", 0, "INVALID_ARGUMENT"),
    (f"{S}.block_z", 0, "INVALID_ARGUMENT"),
    (f"{S}.block_z", 64, "INVALID_ARGUMENT"),  # more threads than the kernel's maximum
    (f"{V2}.producer_variant_id", ZERO_ID, "IDENTITY_MISMATCH"),
    (f"{S}.work_entry_point_id", ZERO_ID, "IDENTITY_MISMATCH"),
    (f"{S}.capture_implementation_id", ZERO_ID, "IDENTITY_MISMATCH"),
    (f"{S}.operation_instance_id", ZERO_ID, "IDENTITY_MISMATCH"),
    (f"{S}.decomposition_plan_id", ZERO_ID, "IDENTITY_MISMATCH"),
    (f"{S}.physical_layout_id", ZERO_ID, "IDENTITY_MISMATCH"),
    (f"{K}.kernel_binary_digest", ZERO_ID, "IDENTITY_MISMATCH"),
    (f"{K}.sm_arch", 0, "IDENTITY_MISMATCH"),
    (f"{K}.binary_version", 0, "IDENTITY_MISMATCH"),
    (f"{K}.binary_version", -90, "IDENTITY_MISMATCH"),
    (f"{K}.num_regs", 0, "IDENTITY_MISMATCH"),
    (f"{K}.max_threads_per_block", 0, "IDENTITY_MISMATCH"),
]

MMVQ_BREAKS = COMMON_BREAKS + [
    (f"{B}.layer_id", 5, "INVALID_ARGUMENT"),  # a layer id without layer_present
    (f"{V2}.reduction_segment_index", 1, "INVALID_ARGUMENT"),
    (f"{V2}.reduction_segment_count", 0, "INVALID_ARGUMENT"),
    (f"{V2}.reduction_segment_count", 2, "INVALID_ARGUMENT"),
    (f"{S}.sublaunch_index", 1, "INVALID_ARGUMENT"),
    (f"{S}.sublaunch_count", 3, "INVALID_ARGUMENT"),
    (f"{B}.n", 2, "INVALID_ARGUMENT"),      # output_rows != n
    (f"{B}.m", 4097, "INVALID_ARGUMENT"),   # output_columns != m
    (f"{B}.batch", 2, "INVALID_ARGUMENT"),
    (f"{B}.k", 4095, "INVALID_ARGUMENT"),   # not whole Q4_K/Q6_K super-blocks
    (f"{B}.kind", 2, "IDENTITY_MISMATCH"),
    (f"{B}.kind", 0, "IDENTITY_MISMATCH"),
    (f"{B}.quantization", 0, "IDENTITY_MISMATCH"),
    (f"{B}.quantization", 3, "IDENTITY_MISMATCH"),
    (f"{V2}.declared_origin", 2, "IDENTITY_MISMATCH"),
    (f"{V2}.accumulator_stage", 0, "IDENTITY_MISMATCH"),
    (f"{V2}.accumulator_dtype", 0, "IDENTITY_MISMATCH"),
    (f"{V2}.sketch_scheme", 2, "IDENTITY_MISMATCH"),
    (f"{S}.attention_group_present", 1, "IDENTITY_MISMATCH"),
    (f"{S}.attention_stage", 2, "IDENTITY_MISMATCH"),
    (f"{S}.grouping_version", 1, "IDENTITY_MISMATCH"),
    (f"{S}.attention_group_instance_id", diagnostic_id("group"), "IDENTITY_MISMATCH"),
    (f"{S}.attention_owner_schedule_index", 1, "IDENTITY_MISMATCH"),
    (f"{S}.query_heads", 32, "IDENTITY_MISMATCH"),
    (f"{S}.key_value_heads", 8, "IDENTITY_MISMATCH"),
    (f"{S}.head_dim", 128, "IDENTITY_MISMATCH"),
    (f"{S}.logical_batch", 1, "IDENTITY_MISMATCH"),
    (f"{S}.physical_key_value_tokens", 256, "IDENTITY_MISMATCH"),
]

ATTENTION_BREAKS = COMMON_BREAKS + [
    (f"{V2}.reduction_segment_index", 1, "INVALID_ARGUMENT"),
    (f"{V2}.reduction_segment_count", 1, "INVALID_ARGUMENT"),
    (f"{S}.sublaunch_count", 1, "INVALID_ARGUMENT"),
    (f"{S}.sublaunch_index", 3, "INVALID_ARGUMENT"),
    (f"{S}.attention_owner_schedule_index", 9999, "INVALID_ARGUMENT"),
    (f"{S}.layer_present", 0, "INVALID_ARGUMENT"),
    (f"{B}.query_tokens", 0, "INVALID_ARGUMENT"),
    (f"{B}.key_value_tokens", 0, "INVALID_ARGUMENT"),
    (f"{B}.key_value_tokens", 257, "INVALID_ARGUMENT"),  # more than the physical KV
    (f"{S}.physical_key_value_tokens", 0, "INVALID_ARGUMENT"),
    (f"{S}.query_heads", 0, "INVALID_ARGUMENT"),
    (f"{S}.key_value_heads", 0, "INVALID_ARGUMENT"),
    (f"{S}.key_value_heads", 7, "INVALID_ARGUMENT"),  # GQA: heads must group evenly
    (f"{S}.head_dim", 0, "INVALID_ARGUMENT"),
    (f"{S}.logical_batch", 0, "INVALID_ARGUMENT"),
    (f"{S}.logical_batch", 2, "INVALID_ARGUMENT"),  # rows != heads * batch
    (f"{B}.n", 2, "INVALID_ARGUMENT"),              # n != query tokens
    (f"{B}.batch", 64, "INVALID_ARGUMENT"),         # batch != rows
    (f"{B}.k", 3, "INVALID_ARGUMENT"),              # the stage's k
    (f"{S}.physical_key_value_tokens", 512, "INVALID_ARGUMENT"),  # the stage's m or k
    (f"{S}.attention_group_present", 0, "IDENTITY_MISMATCH"),
    (f"{S}.attention_stage", 0, "IDENTITY_MISMATCH"),
    (f"{S}.attention_stage", 4, "IDENTITY_MISMATCH"),
    (f"{S}.grouping_version", 0, "IDENTITY_MISMATCH"),
    (f"{S}.grouping_version", 2, "IDENTITY_MISMATCH"),
    (f"{B}.kind", "swapped", "IDENTITY_MISMATCH"),
    (f"{B}.quantization", 1, "IDENTITY_MISMATCH"),
    (f"{V2}.declared_origin", 1, "IDENTITY_MISMATCH"),
    (f"{V2}.accumulator_stage", 1, "IDENTITY_MISMATCH"),
    (f"{V2}.accumulator_dtype", 1, "IDENTITY_MISMATCH"),
    (f"{V2}.sketch_scheme", 1, "IDENTITY_MISMATCH"),
    (f"{S}.capture_implementation_id", diagnostic_id("other capture"), "IDENTITY_MISMATCH"),
    (f"{S}.attention_group_instance_id", ZERO_ID, "IDENTITY_MISMATCH"),
]


def _ids(breaks):
    return [f"{path.rsplit('.', 1)[-1]}={value if not isinstance(value, bytes) else 'id'}"
            for path, value, _ in breaks]


def _validate(abi, validator, launch):
    required = abi.ffi.new("uint64_t *", 77)
    status = getattr(abi.lib, validator)(launch, required)
    return status, required[0]


MMVQ = "palw_cuda_producer_validate_launch_v3"
GROUPED = "palw_cuda_producer_validate_grouped_final_output_launch_v3"


def _mmvq_variants(templates, abi):
    lib = abi.lib
    return {
        "v1-q4_k": templates.mmvq(0, lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K, mixed=False),
        "v1-q6_k": templates.mmvq(7, lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K, 1024, 4096, mixed=False),
        "v2-q4_k-ffn-down": templates.mmvq(11, lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K, 4096, 12288),
        "v2-q6_k-output": templates.mmvq(360, lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K, 151936, 4096),
    }


@pytest.mark.parametrize("variant", ["v1-q4_k", "v1-q6_k", "v2-q4_k-ffn-down", "v2-q6_k-output"])
def test_mmvq_template_as_the_smoke_approves_it_is_accepted(abi, templates, variant):
    status, required = _validate(abi, MMVQ, _mmvq_variants(templates, abi)[variant])
    assert (status, required) == (abi.lib.PALW_CUDA_TRACE_OK, 1)


@pytest.mark.parametrize("stage", [QK, SOFTMAX, PV])
@pytest.mark.parametrize("softmax_index, layer", [(4, 0), (26, 2), (358, 35)])
def test_attention_template_as_the_smoke_approves_it_is_accepted(abi, templates, stage, softmax_index, layer):
    status, required = _validate(abi, GROUPED, templates.attention(stage, softmax_index, layer))
    assert (status, required) == (abi.lib.PALW_CUDA_TRACE_OK, 1)


def _break(abi, launch, path, value):
    if value == "swapped":
        current = get_field(launch[0], path)
        value = abi.lib.PALW_CUDA_TRACE_GEMM if current == abi.lib.PALW_CUDA_TRACE_ATTENTION \
            else abi.lib.PALW_CUDA_TRACE_ATTENTION
    set_field(abi.ffi, launch[0], path, value)


@pytest.mark.parametrize("path, value, expected", MMVQ_BREAKS, ids=_ids(MMVQ_BREAKS))
def test_mmvq_template_with_one_broken_field_is_rejected(abi, templates, path, value, expected):
    launch = templates.mmvq(5)
    _break(abi, launch, path, value)
    status, required = _validate(abi, MMVQ, launch)
    assert (status, required) == (getattr(abi.lib, f"PALW_CUDA_TRACE_{expected}"), 0)


@pytest.mark.parametrize("stage", [QK, SOFTMAX, PV])
@pytest.mark.parametrize("path, value, expected", ATTENTION_BREAKS, ids=_ids(ATTENTION_BREAKS))
def test_attention_template_with_one_broken_field_is_rejected(abi, templates, stage, path, value, expected):
    launch = templates.attention(stage)
    _break(abi, launch, path, value)
    status, required = _validate(abi, GROUPED, launch)
    assert (status, required) == (getattr(abi.lib, f"PALW_CUDA_TRACE_{expected}"), 0)


@pytest.mark.parametrize("stage", [QK, PV])
def test_attention_owner_index_cannot_wrap(abi, templates, stage):
    """QK at the last index or PV at index 0 would need an owner outside uint64."""
    launch = templates.attention(stage)
    semantic = launch.semantic_template
    index = 2**64 - 1 if stage == QK else 0
    semantic.base.base.kernel_sequence = semantic.covered_schedule_index = index
    semantic.attention_owner_schedule_index = (index + 1 if stage == QK else index - 1) % 2**64
    assert _validate(abi, GROUPED, launch) == (abi.lib.PALW_CUDA_TRACE_INVALID_ARGUMENT, 0)


def test_each_validator_rejects_the_other_class(abi, templates):
    mismatch = abi.lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH
    assert _validate(abi, GROUPED, templates.mmvq(0)) == (mismatch, 0)
    for stage in (QK, SOFTMAX, PV):
        assert _validate(abi, MMVQ, templates.attention(stage)) == (mismatch, 0)


@pytest.mark.parametrize("validator", [MMVQ, GROUPED])
def test_null_arguments_are_rejected(abi, templates, validator):
    lib, ffi = abi.lib, abi.ffi
    launch = templates.mmvq(0) if validator == MMVQ else templates.attention(SOFTMAX)
    required = ffi.new("uint64_t *", 77)
    assert getattr(lib, validator)(ffi.NULL, required) == lib.PALW_CUDA_TRACE_INVALID_ARGUMENT
    assert required[0] == 0
    assert getattr(lib, validator)(launch, ffi.NULL) == lib.PALW_CUDA_TRACE_INVALID_ARGUMENT


def test_validation_does_not_modify_the_template(abi, templates):
    for launch, validator in ((templates.mmvq(3), MMVQ), (templates.attention(QK), GROUPED)):
        before = bytes(abi.ffi.buffer(launch))
        _validate(abi, validator, launch)
        assert bytes(abi.ffi.buffer(launch)) == before
