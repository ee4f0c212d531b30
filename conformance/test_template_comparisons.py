"""Claim (seed patch, ggml-cuda.cu: ggml_backend_cuda_palw_trace_associate_v1 and
ggml_backend_cuda_palw_expected_matches_v2): the backend compares every field of an approved
template with the launch it associates, and a template that differs in compared fields fails the
trace closed at that launch, even when the producer contract accepts it.

One case per change in CHANGES (pinned tier): at one MMVQ launch and one attention launch where a
field applies, the caller approves its normal template changed in exactly the named compared
fields (and in uncompared fields where the producer contract ties them, e.g. the tile to the
output); the case checks that the changed template still passes the runtime's own launch validator
(palw_cuda_producer_validate_*_v3), so only the comparison can refuse it; that the trace fails at
that index with IDENTITY_MISMATCH / ASSOCIATION_MISMATCH, nothing accepted from it on, nothing
committed, the producer clean and the context destroyed; and that the unchanged template on a fresh
context commits every record. The oracle of the field list is the patch source: a comparison in
the patch without a case here (or a class rule of the producer contract that makes it unreachable,
CONTRACT_GUARDED) fails test_every_comparison_of_the_patch_has_a_case (CPU tier).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT, V2_FIRST
from pytest_palw.paths import SEED_PATCH
from pytest_palw.runtime.names import fault_name, status_name
from pytest_palw.runtime.run import run_trace

V2_MATCH = "static bool ggml_backend_cuda_palw_expected_matches_v2("
V1_ASSOCIATE = "static palw_cuda_trace_status ggml_backend_cuda_palw_trace_associate_v1("


def _function(text: str, signature: str) -> str:
    start = text.index(signature)
    return text[start:text.index("\n+}\n", start)]


def patch_comparisons(text: str) -> dict[tuple[str, str], set[str]]:
    """The template fields each association check of the patch compares, by (stream, launch class):
    a field compared with the association (``base.f != actual.f``), or a class rule on the template
    (``semantic.f == PALW_...``)."""
    v2 = _function(text, V2_MATCH)
    head, _, tail = v2.partition("if (actual.attention_stage == PALW_CUDA_TRACE_ATTENTION_STAGE_NONE)")
    mmvq_branch, _, attention_branch = tail.partition("return semantic.attention_group_present == 1")
    attention_branch = "semantic.attention_group_present == 1" + attention_branch
    both = set(re.findall(r"(?:base|semantic)\.(\w+) != actual\.\1", head))
    layer_gated = set(re.findall(r"actual\.layer_present != 0 && base\.(\w+) != actual\.\1", head))
    class_rule = r"semantic\.(\w+) == (?:PALW_\w+|\d+)"
    attention = set(re.findall(r"semantic\.(\w+) == actual\.\1", attention_branch))
    v1 = _function(text, V1_ASSOCIATE)
    return {
        ("v2", "mmvq"): (both - layer_gated) | set(re.findall(class_rule, mmvq_branch)),
        ("v2", "attention"): both | attention | set(re.findall(class_rule, attention_branch)),
        ("v1", "mmvq"): set(re.findall(r"base\.(\w+) != actual->\1", v1)),
    }


def _owner(template, name: str):
    base = template.base.base
    return base if hasattr(base, name) else template


def _field(template, name: str) -> int:
    return int(getattr(_owner(template, name), name))


@dataclass(frozen=True)
class Change:
    """Compared fields a template differs in at one launch, and how (``to`` takes the old value)."""

    name: str
    stream: str  # v2 | v1
    klass: str  # the launch class of the index it is made at (the first of that class)
    compared: frozenset[str]  # the compared fields it changes (the patch's names)
    edits: tuple[tuple[str, object], ...]  # (field, new value or function of (lib, old value))

    @property
    def index(self) -> int:
        return V2_FIRST[self.klass] if self.stream == "v2" else 0  # V1: the first MMVQ launch

    @property
    def group(self) -> str:
        return "mmvq" if self.klass in ("q4_k", "q6_k") else "attention"

    def apply(self, lib, template) -> None:
        for name, value in self.edits:
            old = _field(template, name)
            setattr(_owner(template, name), name, value(lib, old) if callable(value) else value)


def change(name: str, stream: str, klass: str, compared: str, **edits) -> Change:
    return Change(name, stream, klass, frozenset(compared.split()), tuple(edits.items()))


def plus(n):
    return lambda lib, old: old + n


def times(n):
    return lambda lib, old: old * n


def other_phase(lib, old):
    return lib.PALW_CUDA_TRACE_DECODE if old == lib.PALW_CUDA_TRACE_PREFILL else lib.PALW_CUDA_TRACE_PREFILL


def other_quantization(lib, old):
    q4, q6 = lib.PALW_CUDA_TRACE_QUANTIZATION_Q4_K, lib.PALW_CUDA_TRACE_QUANTIZATION_Q6_K
    return q6 if old == q4 else q4


def flipped(lib, old):
    return 1 - old


def stage(name):
    return lambda lib, old: getattr(lib, f"PALW_CUDA_TRACE_ATTENTION_STAGE_{name}")


def kind(name):
    return lambda lib, old: getattr(lib, f"PALW_CUDA_TRACE_{name}")


# One line per case. Q = Q4_K MMVQ launch; attention stages at layer 0. The uncompared fields an
# edit also sets (tile_*, grid_x, sublaunch_index, attention_owner_schedule_index) are those the
# producer contract ties to the compared ones (native/SPEC.md section 3).
CHANGES = [
    change("decode_step", "v2", "q4_k", "decode_step", decode_step=plus(1)),
    change("k", "v2", "q4_k", "k", k=plus(256)),  # K stays a multiple of the 256-value super-block
    change("phase", "v2", "q4_k", "phase", phase=other_phase),
    change("quantization", "v2", "q4_k", "quantization", quantization=other_quantization),
    change("causal", "v2", "q4_k", "causal", causal=flipped),
    change("query_tokens", "v2", "q4_k", "query_tokens", query_tokens=plus(1)),
    change("key_value_tokens", "v2", "q4_k", "key_value_tokens", key_value_tokens=plus(1)),
    change("layer_present", "v2", "q4_k", "layer_present", layer_present=1),
    change("m", "v2", "q4_k", "m output_columns", m=plus(256), output_columns=plus(256), tile_columns=plus(256),
           grid_x=plus(256)),
    change("n", "v2", "q4_k", "n output_rows", n=plus(1), output_rows=plus(1), tile_rows=plus(1)),
    change("decode_step", "v2", "attention_softmax", "decode_step", decode_step=plus(1)),
    change("phase", "v2", "attention_softmax", "phase", phase=other_phase),
    change("causal", "v2", "attention_softmax", "causal", causal=flipped),
    change("key_value_tokens", "v2", "attention_softmax", "key_value_tokens", key_value_tokens=plus(1)),
    change("layer_id", "v2", "attention_softmax", "layer_id", layer_id=plus(1)),
    change("key_value_heads", "v2", "attention_softmax", "key_value_heads", key_value_heads=times(2)),
    change("head_dim", "v2", "attention_softmax", "head_dim", head_dim=lambda lib, old: old // 2),
    change("query_tokens", "v2", "attention_softmax", "query_tokens n", query_tokens=plus(1), n=plus(1)),
    change("logical_batch", "v2", "attention_softmax", "logical_batch batch output_rows", logical_batch=times(2),
           batch=times(2), output_rows=times(2), tile_rows=times(2)),
    change("query_heads", "v2", "attention_softmax", "query_heads batch output_rows", query_heads=times(2),
           batch=times(2), output_rows=times(2), tile_rows=times(2)),
    change("physical_key_value_tokens", "v2", "attention_softmax", "physical_key_value_tokens m output_columns",
           physical_key_value_tokens=times(2), m=times(2), output_columns=times(2), tile_columns=times(2)),
    change("k", "v2", "attention_qk", "k head_dim", k=lambda lib, old: old // 2, head_dim=lambda lib, old: old // 2),
    change("attention_stage", "v2", "attention_qk", "attention_stage kind k",  # QK's launch, a softmax template
           attention_stage=stage("EAGER_MASKED_SCALED_SOFTMAX"), kind=kind("ATTENTION"), k=1, sublaunch_index=1,
           attention_owner_schedule_index=lambda lib, old: old - 1),
    change("k", "v1", "q4_k", "k", k=plus(256)),
    change("quantization", "v1", "q4_k", "quantization", quantization=other_quantization),
    change("m", "v1", "q4_k", "m output_columns", m=plus(256), output_columns=plus(256), tile_columns=plus(256),
           grid_x=plus(256)),
    change("n", "v1", "q4_k", "n output_rows", n=plus(1), output_rows=plus(1), tile_rows=plus(1)),
]
# Compared fields no template the producer contract accepts can change for that launch class: the
# contract refuses it first (tests/native/test_native_launch_contract.py breaks each), so dropping
# the comparison alone changes nothing a caller can reach.
CONTRACT_GUARDED = {
    ("v2", "mmvq"): {"kind": "an MMVQ template is GEMM", "batch": "MMVQ batch is 1",
                     "attention_group_present": "an MMVQ launch belongs to no attention group",
                     "attention_stage": "an MMVQ launch has no attention stage"},
    ("v2", "attention"): {"quantization": "attention is not quantized",
                          "layer_present": "an attention stage has a layer",
                          "attention_group_present": "an attention stage belongs to its group"},
    ("v1", "mmvq"): {"batch": "MMVQ batch is 1"},
}


def _id(item: Change) -> str:
    return f"{item.stream}-{item.klass}-{item.name}"


def test_every_comparison_of_the_patch_has_a_case():
    """The patch source is the oracle of the list: each comparison of each association check, per
    launch class it applies to, is changed by a case or guarded by the producer contract."""
    found = patch_comparisons(SEED_PATCH.read_text())
    assert found[("v2", "mmvq")] and found[("v2", "attention")] and found[("v1", "mmvq")], found
    for (stream, group), fields in found.items():
        changed = set().union(*(c.compared for c in CHANGES if (c.stream, c.group) == (stream, group)))
        guarded = set(CONTRACT_GUARDED.get((stream, group), {}))
        assert fields - changed - guarded == set(), f"{stream} {group}: compared in the patch, no case"
        assert (changed | guarded) - fields == set(), f"{stream} {group}: a case for a field the patch does not compare"


@pytest.mark.palw_pinned
@pytest.mark.parametrize("item", CHANGES, ids=[_id(c) for c in CHANGES])
def test_a_template_differing_in_compared_fields_fails_closed(item, palw_runtime, palw_context, palw_caller,
                                                              palw_token, palw_discovery):
    lib, ffi = palw_runtime.lib, palw_runtime.ffi
    version = int(item.stream[1])
    index = item.index
    candidates = palw_discovery.candidates if version == 2 else palw_discovery.mmvq
    assert candidates[index].klass == item.klass, f"launch {index} is {candidates[index].klass}, not {item.klass}"
    caller = palw_caller(version=version, change=(index, item.apply))
    run = run_trace(palw_context(), caller, palw_token)

    assert caller.changed is not None, f"the trace never reached launch {index}"
    before, after = (ffi.from_buffer("palw_cuda_producer_launch_v3 *", raw) for raw in caller.changed)
    differing = {name for name in COMPARED_FIELDS if _field(before.semantic_template, name)
                 != _field(after.semantic_template, name)}
    assert differing == item.compared, "the change is not the one the case names"
    validate = (lib.palw_cuda_producer_validate_launch_v3 if item.group == "mmvq"
                else lib.palw_cuda_producer_validate_grouped_final_output_launch_v3)
    required = ffi.new("uint64_t *")
    assert status_name(lib, validate(after, required)) == "OK", "the producer contract refuses the changed template"

    assert run.attach_status == lib.PALW_CUDA_TRACE_OK
    assert run.decode_status != 0, "decode succeeded with a template that differs from its launch"
    faults = [(status_name(lib, f.status), fault_name(lib, f.fault)) for f in caller.faults]
    assert faults == [("IDENTITY_MISMATCH", "ASSOCIATION_MISMATCH")]
    diagnostics = run.before_finalize
    counts = {"approved": caller.approved, "accepted": run.accepted, "producer_count": diagnostics.count,
              "launch_notifications": caller.launch_notifications}
    assert counts == {"approved": index + 1, "accepted": index, "producer_count": index,
                      "launch_notifications": index}
    assert diagnostics.committed == 0 and diagnostics.faults == 0 and diagnostics.poisoned == 0
    assert run.destroy_status == lib.PALW_CUDA_TRACE_OK

    control = run_trace(palw_context(), palw_caller(version=version), palw_token)
    assert status_name(lib, control.finalize_status) == "OK", "the unchanged template is refused too"
    assert control.record_count == (V2_COUNT if version == 2 else len(palw_discovery.mmvq))


COMPARED_FIELDS = sorted(set().union(*patch_comparisons(SEED_PATCH.read_text()).values()))
