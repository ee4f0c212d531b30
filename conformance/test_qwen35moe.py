"""Claim (seed patch, src/models/qwen35moe.cpp): the Qwen3.5-MoE loader accepts 3- and 4-entry
rope.dimension_sections, ssm_dt with and without ".bias", bundled v.* / mtp.* sibling tensors,
and full-attention layers whose head counts differ from layer 0. Each fixture loads and decodes
one token on the patched runtime. On the unpatched 0.3.34 tree rope-sections-3, ssm-dt-plain,
bundled-v-mtp and per-layer-heads fail to load (tests/fixtures/models/test_gguf_runtime_load.py pins
each error); rope-sections-4 and ssm-dt-bias load there too and are the controls."""

import numpy as np
import pytest

pytestmark = pytest.mark.palw_cpu

VARIANTS = ["rope-sections-3", "rope-sections-4", "ssm-dt-bias", "ssm-dt-plain", "bundled-v-mtp",
            "per-layer-heads"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_loads_and_decodes_one_token(variant, palw_runtime):
    from pytest_palw.fixtures.models.catalog import ensure_qwen35moe

    model = palw_runtime.load_model(ensure_qwen35moe(variant))
    try:
        assert model.meta("general.architecture") == "qwen35moe"
        with model.context() as context:
            assert context.decode(model.default_token()) == 0
            logits = context.logits()
        assert np.isfinite(logits).all()
    finally:
        model.free()
