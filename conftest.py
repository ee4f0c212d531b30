"""Repository-level pytest configuration: the plugin's own tests use pytester, and the fixtures
several test packages share."""

import os
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def run_palw():
    """``run_palw("build", "--source", x)``: the CLI in a child process, as a user runs it."""

    def run(*args, env: dict | None = None, timeout: int = 900, cwd=None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest_palw.cli", *map(str, args)],
                              capture_output=True, text=True, env={**os.environ, **(env or {})},
                              timeout=timeout, cwd=cwd)

    return run


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
