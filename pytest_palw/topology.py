"""The pinned topology: the one Qwen3-8B Q4_K_M one-token decode the seed patch traces.

The patch fixes these: the seed tools' profile gates (qwen3, 36 layers, 32/8 heads, Q4_K_M) and the
attention metadata llama-context.cpp attaches (32 query heads, 8 KV heads, head dim 128, a KV view
padded to 256 cells for a one-token decode). Every consumer imports them from here: the model
check (runtime), the synthetic profiles, the launch table (oracle) and the cases. The launch and
class counts are not here: they are derived from the launch table (pytest_palw.fixtures.oracles.launch_table).
"""

from __future__ import annotations

from dataclasses import dataclass

ARCHITECTURE = "qwen3"
N_LAYER = 36
N_HEAD = 32
N_HEAD_KV = 8
HEAD_DIM = 128
FILE_TYPE_Q4_K_M = 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
# The one-token KV view the patch pads to (QWEN_KV_PADDING): KV cells of every attention stage.
KV_CELLS = 256


@dataclass(frozen=True)
class AttentionGeometry:
    """The attention shapes of a one-token decode: what discovery matches, what an approved
    attention launch and its record carry. Read from the model (``Profile.attention``)."""

    query_heads: int
    key_value_heads: int
    head_dim: int
    kv_cells: int = KV_CELLS


# The geometry the trace is pinned to (the header of a pinned model has these).
PINNED_ATTENTION = AttentionGeometry(query_heads=N_HEAD, key_value_heads=N_HEAD_KV, head_dim=HEAD_DIM)
