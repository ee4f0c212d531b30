"""pytest-palw: certify a PALW-patched llama.cpp runtime with pytest.

PYTEST_DONT_REWRITE: `palw certify` imports this package before it starts pytest, which would
then warn that it cannot rewrite an installed plugin's package (nothing here asserts).
"""

__version__ = "0.1.0"
