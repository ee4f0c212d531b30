"""pytest-palw: certify a PALW-patched llama.cpp runtime with pytest."""

__version__ = "0.1.0"
