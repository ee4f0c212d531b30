"""Repository-level pytest configuration: the plugin's own tests use pytester (a plugin must be
named here, in the root conftest). The fixtures the test packages share are in tests/conftest.py."""

pytest_plugins = ["pytester"]


# Not test code: model recipes, the native runtime, benchmarks (run on the device).
collect_ignore = ["fixtures", "native", "benchmarks", "patches"]
