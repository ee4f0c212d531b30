"""Readable names of the ABI's status and fault codes, for failure messages."""

from __future__ import annotations

STATUSES = ("OK", "INVALID_ARGUMENT", "PENDING", "SEQUENCE_MISMATCH", "IDENTITY_MISMATCH",
            "INCOMPLETE", "CUDA_ERROR", "CAPACITY_EXCEEDED", "POISONED")
FAULTS = ("NONE", "INVALID_REQUEST", "CONCURRENCY", "GRAPH", "ASSOCIATION_ORDER",
          "ASSOCIATION_MISMATCH", "UNSUPPORTED_DISPATCH", "PREPARE", "LAUNCH", "INCOMPLETE")


def status_name(lib, value) -> str:
    return next((n for n in STATUSES if getattr(lib, f"PALW_CUDA_TRACE_{n}") == value), str(value))


def fault_name(lib, value) -> str:
    return next((n for n in FAULTS if getattr(lib, f"PALW_CUDA_LLAMA_MMVQ_FAULT_{n}") == value), str(value))
