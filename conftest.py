"""Repository-level pytest configuration: the plugin's own tests use pytester (a plugin must be
named here, in the root conftest). The fixtures the test packages share are in tests/conftest.py."""

import os

pytest_plugins = ["pytester"]


# Not test code: model recipes, the native runtime, benchmarks (run on the device).
collect_ignore = ["fixtures", "native", "benchmarks", "patches"]

# PYTEST_ADDOPTS (a developer's `--durations=50`, say) applies to this run, read before this file is;
# the `palw certify` and pytest runs the tests start are their own and refuse or misread it.
os.environ.pop("PYTEST_ADDOPTS", None)
