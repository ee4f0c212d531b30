"""The conformance suite: one module per claim of the seed patch.

A package so that an installed suite can be named by import path: ``pytest --pyargs
pytest_palw.conformance`` (a wheel installs this directory as ``pytest_palw/conformance``).
"""
