"""Repository-level pytest configuration: the plugin's own tests use pytester, and the fixtures
several test packages share."""

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def cpu_build():
    """This host's cached CPU runtime build (its manifest), or a skip that says how to make one."""
    from pytest_palw.build import api

    manifest = api.find_manifest(variant="cpu")
    if manifest is None:
        pytest.skip("no CPU runtime built yet: run `palw build`")
    return manifest

# Not test code: model recipes, the native runtime, benchmarks (run on the device).
collect_ignore = ["fixtures", "native", "benchmarks", "patches"]
