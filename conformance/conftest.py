"""Shared helpers of the conformance suite; the plugin (pytest_palw) provides the fixtures."""

from __future__ import annotations

import pytest

from pytest_palw.fixtures.oracles.launch_table import expected_launches, expected_mmvq_launches


def pytest_configure(config):
    """The goldens of every profile and device class sit side by side (fixtures/goldens/): a run
    checks its own, the others stay unused by design, so syrupy's unused-snapshot accounting
    (each worker reports its items, the controller merges them) says nothing here and is off.
    Set here, with the suite, so that an installed suite (no pyproject.toml addopts) does the same."""
    if hasattr(config.option, "disable_unused_snapshots"):  # syrupy's --snapshot-disable-unused
        config.option.disable_unused_snapshots = True


@pytest.fixture(scope="session")
def lib(palw_runtime):
    """The PALW ABI's constants and functions (cffi, from the header)."""
    return palw_runtime.lib


@pytest.fixture(scope="session")
def ffi(palw_runtime):
    return palw_runtime.ffi


@pytest.fixture(scope="session")
def launch_table(palw_session, palw_model):
    """The expected 361-launch order for this model's widths (fixtures/oracles/launch_table.py)."""
    return expected_launches(palw_session.model_profile)


@pytest.fixture(scope="session")
def mmvq_table(palw_session, palw_model):
    """The expected 253-launch V1 (MMVQ-only) order."""
    return expected_mmvq_launches(palw_session.model_profile)
