"""The smoke's record checks (verify_record, verify_mixed_record) as lists of named mismatches."""

from __future__ import annotations

from pytest_palw.runtime.discovery import STAGE_NONE, Candidate


def _id(ffi, array) -> bytes:
    return bytes(ffi.buffer(array, 32))


def identity_mismatches(ffi, record, identity) -> list[str]:
    problems = []
    for name, got in (("producer_variant_id", record.base.producer_variant_id),
                      ("work_entry_point_id", record.work_entry_point_id),
                      ("capture_implementation_id", record.capture_implementation_id)):
        if _id(ffi, got) != _id(ffi, getattr(identity, name)):
            problems.append(f"{name} {_id(ffi, got).hex()[:16]}… is not the kernel's {_id(ffi, getattr(identity, name)).hex()[:16]}…")
    return problems


def record_mismatches(ffi, record, index: int, expected: Candidate, infos, lib) -> list[str]:
    """verify_mixed_record (V2) — for a V1 record pass a MMVQ candidate; V1's output_rows is 1."""
    base = record.base.base
    checks = {
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
        d, a = info.dimensions, expected.attention
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
