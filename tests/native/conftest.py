"""Fixtures of the native host tests: the compiled host ABI and launch templates."""

import pytest
from native_templates import Templates

from pytest_palw.runtime.binding.hostabi import load_host_abi


@pytest.fixture(scope="session")
def abi():
    return load_host_abi()


@pytest.fixture(scope="session")
def templates(abi):
    return Templates(abi)
