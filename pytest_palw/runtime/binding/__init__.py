"""Bindings: the PALW ABI through cffi (layouts from the compiler), llama via llama-cpp-python."""
