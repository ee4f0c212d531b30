"""pytester gives each subprocess a fresh HOME; keep it on this host's pytest-palw cache so the
sessions it starts reuse the `palw build` runtime and the models instead of rebuilding them.

The opposite of tests/conftest.py's ``private_cache`` (an empty cache of the test's own), so it
stays here: every test of this package needs the shared cache, not a fresh one."""

import pytest

from pytest_palw.paths import cache_root


@pytest.fixture(autouse=True)
def _shared_palw_cache(monkeypatch):
    monkeypatch.setenv("PALW_CACHE_DIR", str(cache_root()))
