"""Every test of this package keeps $PALW_CACHE_DIR on this host's pytest-palw cache
(tests/conftest.py's ``shared_palw_cache``): pytester gives each subprocess a fresh HOME, and the
sessions it starts must reuse the `palw build` runtime and the models instead of rebuilding them.

Autouse here only: every test of this package needs the shared cache, not a fresh one; elsewhere
some need a private cache (``private_cache``), so tests there that start pytest with pytester ask
for ``shared_palw_cache`` by name."""

import pytest


@pytest.fixture(autouse=True)
def _shared_palw_cache(shared_palw_cache):
    return shared_palw_cache
