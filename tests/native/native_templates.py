"""Launch templates and field helpers for the native host tests.

Templates are built field by field the way the seed smoke's approve callbacks
(approve_callback, approve_callback_v2 in tools/palw-mmvq-smoke) build them, so
the launch validators are checked against exactly what the real caller approves.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from types import SimpleNamespace

from pytest_palw.runtime import templates
from pytest_palw.runtime.binding.hostabi import HEADER
from pytest_palw.runtime.discovery import STAGE_PV as PV
from pytest_palw.runtime.discovery import STAGE_QK as QK
from pytest_palw.runtime.discovery import STAGE_SOFTMAX as SOFTMAX
from pytest_palw.topology import PINNED_ATTENTION


def header_id_macro(name: str) -> bytes:
    """A 32-byte id macro of the header (a byte list cffi cannot expose as a constant)."""
    match = re.search(rf"#define {name}\s*\\?\s*((?:0x[0-9a-fA-F]{{2}},?\s*\\?\s*)+)", HEADER.read_text())
    assert match, f"{name} not found in {HEADER}"
    value = bytes(int(b, 16) for b in re.findall(r"0x([0-9a-fA-F]{2})", match.group(1)))
    assert len(value) == 32
    return value


GROUPED_CAPTURE_ID = header_id_macro("PALW_CUDA_PRODUCER_GROUPED_CAPTURE_ID_BYTES_V1")


def diagnostic_id(*parts: object) -> bytes:
    """A deterministic nonzero 32-byte id (the smoke derives its ids by hashing too)."""
    return hashlib.sha256(repr(parts).encode()).digest()


def set_field(ffi, cdata, path: str, value) -> None:
    """Assign ``value`` to a dotted field path; ids take bytes, ``name[i]`` indexes arrays."""
    *parents, leaf = path.split(".")
    target = cdata
    for part in parents:
        target = getattr(target, part)
    if match := re.fullmatch(r"(\w+)\[(\d+)\]", leaf):
        getattr(target, match.group(1))[int(match.group(2))] = value
    elif isinstance(value, bytes):
        ffi.memmove(getattr(target, leaf), value, len(value))
    else:
        setattr(target, leaf, value)


def get_field(cdata, path: str):
    for part in path.split("."):
        cdata = getattr(cdata, part)
    return cdata


@dataclass(frozen=True)
class Templates:
    """Factories for approved launches (palw_cuda_producer_launch_v3 *), built by the caller's own
    template code (pytest_palw.runtime.templates) with test ids and a test kernel binding."""

    abi: object

    def _binding(self, launch, max_threads: int, digest_tag: str) -> None:
        attributes = SimpleNamespace(sm_arch=90, binary_version=90, ptx_version=90, num_regs=40,
                                     max_threads_per_block=max_threads, static_shared_memory_bytes=0,
                                     local_memory_bytes=0)
        templates.bind_kernel(self.abi.ffi, launch, attributes, diagnostic_id("cubin", digest_tag))

    def mmvq(self, index: int = 0, quantization: int | None = None, m: int = 4096,
             k: int = 4096, *, mixed: bool = True):
        """An MMVQ launch as approve_callback (mixed=False) or approve_callback_v2 builds it."""
        lib, ffi = self.abi.lib, self.abi.ffi
        quantization = lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K if quantization is None else quantization
        launch = ffi.new("palw_cuda_producer_launch_v3 *")
        semantic = templates.start(ffi, lib, launch, index, m=m, n=1, k=k, batch=1, output_rows=1,
                                   output_columns=m, quantization=quantization,
                                   kind=lib.PALW_CUDA_TRACE_GEMM, phase=lib.PALW_CUDA_TRACE_PREFILL)
        templates.mmvq(lib, semantic, m)
        templates.ids(ffi, semantic, {"producer_variant_id": diagnostic_id("variant", quantization),
                                      "work_entry_point_id": diagnostic_id("work", quantization),
                                      "capture_implementation_id": diagnostic_id("mmvq capture")},
                      operation=diagnostic_id("operation", index),
                      plan=diagnostic_id("plan", index) if mixed else diagnostic_id("direct_plan"),
                      layout=diagnostic_id("layout", index))
        self._binding(launch, 128, f"mmvq{quantization}")  # 4 warps of 32 (templates.MMVQ_BLOCK)
        return launch

    def attention(self, stage: int, softmax_index: int = 26, layer: int = 2):
        """One stage of an eager attention group as approve_callback_v2 builds it.

        The group is QK, softmax, PV at consecutive schedule indices around ``softmax_index``.
        """
        lib, ffi = self.abi.lib, self.abi.ffi
        a = PINNED_ATTENTION
        index = softmax_index + (stage - SOFTMAX)
        m, k = {QK: (a.kv_cells, a.head_dim), SOFTMAX: (a.kv_cells, 1), PV: (a.head_dim, a.kv_cells)}[stage]
        launch = ffi.new("palw_cuda_producer_launch_v3 *")
        kind = lib.PALW_CUDA_TRACE_ATTENTION if stage == SOFTMAX else lib.PALW_CUDA_TRACE_GEMM
        semantic = templates.start(ffi, lib, launch, index, m=m, n=1, k=k, batch=a.query_heads,
                                   output_rows=a.query_heads, output_columns=m,
                                   quantization=lib.PALW_CUDA_TRACE_QUANTIZATION_NONE, kind=kind,
                                   phase=lib.PALW_CUDA_TRACE_PREFILL, causal=1, layer_id=layer,
                                   query_tokens=1, key_value_tokens=1, tile_rows=a.query_heads)
        templates.attention(lib, semantic, stage, softmax_index,
                            (a.query_heads, a.key_value_heads, a.head_dim, 1, a.kv_cells),
                            templates.attention_dimensions(stage, a))
        templates.ids(ffi, semantic, {"producer_variant_id": diagnostic_id("variant", stage),
                                      "work_entry_point_id": diagnostic_id("work", stage),
                                      "capture_implementation_id": GROUPED_CAPTURE_ID},
                      operation=diagnostic_id("operation", index),
                      plan=diagnostic_id("attention_plan", softmax_index),
                      layout=diagnostic_id("layout", index), group=diagnostic_id("group", softmax_index))
        self._binding(launch, 1024, f"attention{stage}")
        return launch
