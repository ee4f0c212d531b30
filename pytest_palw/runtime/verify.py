"""The smoke's record checks (verify_record, verify_mixed_record) as lists of named mismatches."""

from __future__ import annotations

from typing import Any, cast

from pytest_palw.runtime.discovery import STAGE_CLASS, STAGE_NONE, STAGE_PV, STAGE_QK, STAGE_SOFTMAX, Candidate
from pytest_palw.topology import AttentionGeometry

STAGE_OF = {klass: stage for stage, klass in STAGE_CLASS.items()}


def quantization_of(lib, klass: str) -> int:
    """The ABI's quantization value of a launch class."""
    return {"q4_k": lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K,
            "q6_k": lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K}.get(klass, lib.PALW_CUDA_TRACE_QUANTIZATION_NONE)


def _id(ffi, array) -> bytes:
    return array if isinstance(array, bytes) else bytes(ffi.buffer(array, 32))


def identity_mismatches(ffi, record, identity, whose: str = "the kernel's") -> list[str]:
    """The record's three kernel ids against ``identity`` (a cffi actual identity or a
    KernelIdentity of bytes)."""
    problems = []
    for name, got in (("producer_variant_id", record.base.producer_variant_id),
                      ("work_entry_point_id", record.work_entry_point_id),
                      ("capture_implementation_id", record.capture_implementation_id)):
        got, want = _id(ffi, got), _id(ffi, getattr(identity, name))
        if got != want:
            problems.append(f"{name} {got.hex()[:16]}… is not {whose} {want.hex()[:16]}…")
    return problems


def record_mismatches(ffi, record, index: int, expected: Candidate, infos, lib) -> list[str]:
    """verify_mixed_record (V2) — for a V1 record pass a MMVQ candidate; V1's output_rows is 1."""
    base = record.base.base
    checks: dict[str, tuple[Any, Any]] = {
        "kernel_sequence": (base.kernel_sequence, index),
        "covered_schedule_index": (record.covered_schedule_index, index),
        "tile_index": (base.tile_index, 0), "tile_row": (base.tile_row, 0), "tile_column": (base.tile_column, 0),
        "m": (base.m, expected.m), "n": (base.n, expected.n), "k": (base.k, expected.k),
        "batch": (base.batch, expected.batch), "kind": (base.kind, expected.kind),
        "quantization": (base.quantization, expected.quantization),
        "output_rows": (base.output_rows, expected.output_rows),
        "output_columns": (base.output_columns, expected.output_columns),
    }
    if expected.attention_stage == STAGE_NONE:
        info = infos.mmvq(lib, expected.quantization)
        checks.update({"attention_group_present": (record.attention_group_present, 0),
                       "sublaunch_count": (record.sublaunch_count, 1)})
    else:
        info = infos.attention(expected.attention_stage)
        d, a = info.dimensions, cast(AttentionGeometry, expected.attention)
        checks.update({
            "layer_present": (record.layer_present, 1), "layer_id": (base.layer_id, expected.layer),
            "attention_group_present": (record.attention_group_present, 1),
            "attention_stage": (record.attention_stage, expected.attention_stage),
            "sublaunch_index": (record.sublaunch_index + 1, expected.attention_stage),
            "sublaunch_count": (record.sublaunch_count, 3),
            "query_heads": (record.query_heads, a.query_heads),
            "key_value_heads": (record.key_value_heads, a.key_value_heads),
            "head_dim": (record.head_dim, a.head_dim), "logical_batch": (record.logical_batch, 1),
            "physical_key_value_tokens": (record.physical_key_value_tokens, a.kv_cells),
            "grid_x": (record.grid_x, d.grid_x), "grid_y": (record.grid_y, d.grid_y),
            "block_x": (record.block_x, d.block_x),
        })
    problems = [f"{name} {got} != {want}" for name, (got, want) in checks.items() if got != want]
    return problems + identity_mismatches(ffi, record, info.actual_identity)


def table_mismatches(ffi, lib, record, launch, geometry, identity, weight=None, association=None,
                     weight_data: int | None = None) -> list[str]:
    """A committed record against what the runtime under test did not write: ``launch``, the
    launch table's launch at the record's index (fixtures/oracles/launch_table.py: position, class, layer,
    shapes), ``geometry`` (the model file's attention shapes and the pinned KV cells),
    ``identity`` (the seed patch's kernel identity of that class, fixtures/oracles/kernel_identities.py)
    and, for an MMVQ launch, ``weight`` = (ggml type name, [ne0, ne1]) of the launch's weight as
    the model file states it, with ``association``, the association the runtime approved for that
    launch (its src0 is the weight the kernel read: the file's type and shape) and ``weight_data``,
    the data address of the graph tensor that bears the weight's file name (a check by name, not
    by the file's bytes: the runtime's graph names its tensors after the file). Grid and block are
    the attention kernel's own launch dimensions; the table does not hold them (they are checked
    against the kernel's self-description: ``dimension_mismatches``)."""
    base = record.base.base
    stage = STAGE_OF.get(launch.klass, STAGE_NONE)
    checks = {
        "kernel_sequence": (base.kernel_sequence, launch.index),
        "covered_schedule_index": (record.covered_schedule_index, launch.index),
        "tile_index": (base.tile_index, 0), "tile_row": (base.tile_row, 0), "tile_column": (base.tile_column, 0),
        "m": (base.m, launch.m), "n": (base.n, launch.n), "k": (base.k, launch.k), "batch": (base.batch, launch.batch),
        "output_rows": (base.output_rows, launch.output_rows),
        "output_columns": (base.output_columns, launch.output_columns),
        "quantization": (base.quantization, quantization_of(lib, launch.klass)),
        "kind": (base.kind, lib.PALW_CUDA_TRACE_ATTENTION if stage == STAGE_SOFTMAX else lib.PALW_CUDA_TRACE_GEMM),
        "attention_stage": (record.attention_stage, stage),
    }
    if stage == STAGE_NONE:
        checks.update({"attention_group_present": (record.attention_group_present, 0),
                       "sublaunch_count": (record.sublaunch_count, 1)})
        file_type, (ne0, ne1) = weight
        checks.update({f"k = {launch.weight} ne0 (file)": (base.k, ne0),
                       f"m = {launch.weight} ne1 (file)": (base.m, ne1)})
        if association is not None and "src0" in association:  # V2: the weight's view
            src0 = association["src0"]
            abi_type = getattr(lib, f"PALW_CUDA_LLAMA_TENSOR_TYPE_{file_type}", f"none for {file_type}")
            checks.update({"approved src0 type (file)": (src0["type"], abi_type),
                           "approved src0 ne (file)": (src0["ne"][:2], [ne0, ne1])})
        if association is not None and weight_data is not None:
            data = association["src0"]["data"] if "src0" in association else association["weight_data"]
            checks[f"approved weight is the loaded {launch.weight}"] = (data, weight_data)
    else:
        owner = launch.index + {STAGE_QK: 1, STAGE_SOFTMAX: 0, STAGE_PV: -1}[stage]
        checks.update({
            "layer_present": (record.layer_present, 1), "layer_id": (base.layer_id, launch.layer),
            "attention_group_present": (record.attention_group_present, 1),
            "attention_owner_schedule_index": (record.attention_owner_schedule_index, owner),
            "sublaunch_index": (record.sublaunch_index + 1, stage), "sublaunch_count": (record.sublaunch_count, 3),
            "query_heads": (record.query_heads, geometry.query_heads),
            "key_value_heads": (record.key_value_heads, geometry.key_value_heads),
            "head_dim": (record.head_dim, geometry.head_dim), "logical_batch": (record.logical_batch, 1),
            "physical_key_value_tokens": (record.physical_key_value_tokens, geometry.kv_cells),
        })
    problems = [f"{name} {got} != {want}" for name, (got, want) in checks.items() if got != want]
    return problems + identity_mismatches(ffi, record, identity, f"the seed patch's {launch.klass}")


def dimension_mismatches(record, info) -> list[str]:
    """An attention record's launch grid and block against the kernel's own description of its
    launch (kernel info): the launch table holds no launch dimensions."""
    d = info.dimensions
    checks = {"grid_x": (record.grid_x, d.grid_x), "grid_y": (record.grid_y, d.grid_y),
              "block_x": (record.block_x, d.block_x)}
    return [f"{name} {got} != {want}" for name, (got, want) in checks.items() if got != want]
