"""The model profile check: is this GGUF the Qwen3-8B Q4_K_M topology the trace is pinned to?

Read from the GGUF header alone (gguf-py), before any runtime work, so a wrong model
stops the session with one line that lists every mismatch.
"""

from __future__ import annotations

import re
from pathlib import Path

from pytest_palw.cache import remembered
from pytest_palw.errors import ModelProfileError
from pytest_palw.fixtures.models.profiles import Profile
from pytest_palw.fixtures.oracles.launch_table import PINNED_CLASS_COUNTS
from pytest_palw.topology import ARCHITECTURE, FILE_TYPE_Q4_K_M, HEAD_DIM, N_HEAD, N_HEAD_KV, N_LAYER

# What a pinned model's header says (pytest_palw.topology); its Q4_K/Q6_K weight counts are the
# launch table's classes of the pinned topology.
EXPECTED = {
    "architecture": ARCHITECTURE,
    "n_layer": N_LAYER,
    "n_head": N_HEAD,
    "n_head_kv": N_HEAD_KV,
    "head_dim": HEAD_DIM,
    "file_type": FILE_TYPE_Q4_K_M,
    "q4_k": PINNED_CLASS_COUNTS["q4_k"],
    "q6_k": PINNED_CLASS_COUNTS["q6_k"],
}
_MATMUL_WEIGHT = re.compile(r"^(blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)|output)\.weight$")


def mismatches(profile: Profile) -> list[str]:
    """Each field of ``profile`` that differs from the pinned model's (EXPECTED), as one phrase."""
    found = {name: getattr(profile, name) for name in EXPECTED}
    return [f"{name} {found[name]} (expected {want})" for name, want in EXPECTED.items() if found[name] != want]


def read_profile(path: Path) -> Profile:
    """The profile of a GGUF, parsed once per file while its size and mtime stay (gguf-py reads a
    151 936-token vocabulary in seconds; the controller and each worker would all pay that)."""
    path = Path(path)
    if not path.is_file():
        raise ModelProfileError(f"model {path} does not exist: pass --palw-model=PATH.gguf or "
                                "--palw-model=profile:tiny|gpu|full")
    return Profile(path.name, **remembered(path, "profile-v2", _parse_profile))


def _parse_profile(path: Path) -> dict:
    from pytest_palw.fixtures.models.gguf_read import read_gguf  # imported late: numpy-heavy

    try:
        reader = read_gguf(path, "r")
    except Exception as error:  # gguf raises ValueError/struct.error/... on damaged files
        raise ModelProfileError(f"{path} is not a readable GGUF ({type(error).__name__}: {error}): "
                                "the file is truncated or damaged; re-download or regenerate it") from None

    def value(key: str):
        entry = reader.fields.get(key)
        return entry.contents() if entry is not None else None

    arch = value("general.architecture")
    prefix = f"{arch}." if arch else ""
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    weights = [t for t in reader.tensors if _MATMUL_WEIGHT.match(t.name)]
    return dict(
        architecture=arch,
        n_layer=value(prefix + "block_count"),
        n_head=value(prefix + "attention.head_count"),
        n_head_kv=value(prefix + "attention.head_count_kv"),
        head_dim=value(prefix + "attention.key_length"),
        file_type=value("general.file_type"),
        n_embd=value(prefix + "embedding_length"),
        n_ff=value(prefix + "feed_forward_length"),
        n_vocab=len(tokens.data) if tokens is not None else None,
        weight_types={t.name: t.tensor_type.name for t in weights},
        weight_shapes={t.name: [int(n) for n in t.shape] for t in weights},
    )


def check_profile(path: Path) -> Profile:
    """Raise ModelProfileError (one line, every mismatch) unless ``path`` has the pinned profile."""
    profile = read_profile(path)
    problems = mismatches(profile)
    if problems:
        raise ModelProfileError(
            f"{path.name} is not the Qwen3-8B Q4_K_M profile the PALW trace is pinned to: "
            + "; ".join(problems) + " — use a Qwen3-8B Q4_K_M GGUF or --palw-model=profile:tiny")
    return profile
