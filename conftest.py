"""Repository-level pytest configuration: the plugin's own tests use pytester."""

pytest_plugins = ["pytester"]

# Not test code: model recipes, the native runtime, benchmarks (run on the device).
collect_ignore = ["fixtures", "native", "benchmarks", "patches"]
