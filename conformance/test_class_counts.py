"""Claim: 361 = 216 Q4_K + 37 Q6_K + 108 attention (36 per stage); V1 = 253; first indices."""

import pytest

from pytest_palw.fixtures.oracles.launch_table import class_counts
from pytest_palw.fixtures.oracles.seed_counts import claimed_class_counts, smoke_constants

pytestmark = pytest.mark.palw_cpu

EXPECTED = claimed_class_counts()  # the seed smoke's EXPECTED_*_COUNT constants, per class


@pytest.mark.parametrize("klass", sorted(EXPECTED))
def test_class_count(klass, palw_discovery):
    assert palw_discovery.class_counts().get(klass, 0) == EXPECTED[klass]


def test_no_other_class(palw_discovery):
    others = {k: v for k, v in palw_discovery.class_counts().items() if k not in EXPECTED and v}
    assert others == {}, f"quantized matmuls outside Q4_K/Q6_K: {others}"


def test_table_agrees_with_claim(launch_table):
    assert class_counts(launch_table) == EXPECTED


def test_v1_stream_count(palw_discovery):
    mmvq = palw_discovery.mmvq
    assert len(mmvq) == smoke_constants()["LAUNCH"]
    assert sum(c.klass == "q4_k" for c in mmvq) == EXPECTED["q4_k"]
    assert sum(c.klass == "q6_k" for c in mmvq) == EXPECTED["q6_k"]


@pytest.mark.parametrize("klass", sorted(EXPECTED))
def test_first_index(klass, palw_discovery, launch_table):
    expected = next(e.index for e in launch_table if e.klass == klass)
    assert palw_discovery.first_index()[klass] == expected
