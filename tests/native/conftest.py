"""Fixtures of the native host tests: launch templates over the host ABI (tests/conftest.py)."""

import pytest
from native_templates import Templates


@pytest.fixture(scope="session")
def templates(abi):
    return Templates(abi)
