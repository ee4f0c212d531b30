"""The template-comparison cases (conformance/test_template_comparisons.py) change only what they
name: each changed template still passes the producer contract (so on a GPU only the backend's
comparison can refuse it) and differs from the caller's template in exactly the compared fields the
case names. Checked here, on the host ABI, with the templates the caller's own code builds."""

import pytest
from native_templates import PV, QK, SOFTMAX

from pytest_palw.conformance.test_template_comparisons import (
    CHANGES,
    COMPARED_FIELDS,
    CONTRACT_GUARDED,
    _field,
    _id,
)
from pytest_palw.runtime.names import status_name

STAGES = {"attention_qk": QK, "attention_softmax": SOFTMAX, "attention_pv": PV}


def _template(templates, item):
    if item.group == "mmvq":
        return templates.mmvq(item.index, mixed=item.stream == "v2")
    stage = STAGES[item.klass]
    return templates.attention(stage, softmax_index=item.index - (stage - SOFTMAX), layer=0)


def _validate(abi, item, launch):
    lib, ffi = abi.lib, abi.ffi
    validate = (lib.palw_cuda_producer_validate_launch_v3 if item.group == "mmvq"
                else lib.palw_cuda_producer_validate_grouped_final_output_launch_v3)
    return status_name(lib, validate(launch, ffi.new("uint64_t *")))


@pytest.mark.parametrize("item", CHANGES, ids=[_id(c) for c in CHANGES])
def test_a_change_keeps_the_template_valid_and_changes_what_it_names(abi, templates, item):
    launch = _template(templates, item)
    assert _validate(abi, item, launch) == "OK"
    before = {name: _field(launch.semantic_template, name) for name in COMPARED_FIELDS}
    item.apply(abi.lib, launch.semantic_template)
    after = {name: _field(launch.semantic_template, name) for name in COMPARED_FIELDS}
    assert {name for name in COMPARED_FIELDS if before[name] != after[name]} == item.compared
    assert _validate(abi, item, launch) == "OK"


GUARDED = [(stream, group, field) for (stream, group), fields in CONTRACT_GUARDED.items() for field in fields]
# A value each guarded field cannot take in its class (by the launch class the case is made for).
BREAKS = {"kind": lambda lib, group: lib.PALW_CUDA_TRACE_ATTENTION if group == "mmvq" else 99,
          "batch": lambda lib, group: 2,
          "attention_group_present": lambda lib, group: 1 if group == "mmvq" else 0,
          "attention_stage": lambda lib, group: SOFTMAX,
          "quantization": lambda lib, group: lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K,
          "layer_present": lambda lib, group: 0}


@pytest.mark.parametrize("stream, group, field", GUARDED, ids=["-".join(g) for g in GUARDED])
def test_a_guarded_comparison_cannot_be_reached_past_the_contract(abi, templates, stream, group, field):
    """What CONTRACT_GUARDED says: a template of that class that differs in that field alone is
    refused by the producer contract before the backend compares it."""
    item = next(c for c in CHANGES if (c.stream, c.group) == (stream, group))
    launch = _template(templates, item)
    template = launch.semantic_template
    owner = template.base.base if hasattr(template.base.base, field) else template
    setattr(owner, field, BREAKS[field](abi.lib, group))
    assert _validate(abi, item, launch) != "OK"
