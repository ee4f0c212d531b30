"""Claim: one-token discovery yields the 361 launches in the graph's fixed order (V1: 253).

One case per index; the expectation is the table in fixtures/oracles/launch_table.py,
derived from the Qwen3 graph and the Q4_K_M rule, not from the runtime.
"""

import pytest

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.marks import each_launch

pytestmark = pytest.mark.palw_cpu


def _shape(launch):
    return {"class": launch.klass, "m": launch.m, "n": launch.n, "k": launch.k, "batch": launch.batch,
            "output_rows": launch.output_rows, "output_columns": launch.output_columns}


def test_discovery_completes(palw_discovery):
    assert not palw_discovery.failed, "discovery decode failed or saw an out-of-order attention stage"
    assert palw_discovery.callback_errors == []
    assert len(palw_discovery.candidates) == V2_COUNT


@each_launch("order")
def test_mixed_launch(index, palw_discovery, launch_table):
    expected = launch_table[index]
    assert index < len(palw_discovery.candidates), f"stream ends at {len(palw_discovery.candidates)}"
    got = palw_discovery.candidates[index]
    assert _shape(got) == _shape(expected), f"launch {index} ({expected.role}, layer {expected.layer})"
    if expected.weight is not None:
        assert got.weight == expected.weight
        assert got.weight_data != 0
    else:
        assert got.node == expected.node
        assert got.layer == expected.layer


@each_launch("order V1", stream="v1")
def test_mmvq_launch(index, palw_discovery, mmvq_table):
    expected = mmvq_table[index]
    stream = palw_discovery.mmvq
    assert index < len(stream), f"V1 stream ends at {len(stream)}"
    got = stream[index]
    assert _shape(got) == _shape(expected)
    assert got.weight == expected.weight
