"""pytester gives each subprocess a fresh HOME; keep it on this host's pytest-palw cache so the
sessions it starts reuse the `palw build` runtime and the models instead of rebuilding them."""

import pytest

from pytest_palw.paths import cache_root


@pytest.fixture(autouse=True)
def _shared_palw_cache(monkeypatch):
    monkeypatch.setenv("PALW_CACHE_DIR", str(cache_root()))
