"""Claim (seed patch, tools/palw-observer/palw-observer.cpp validate_qwen3_8b_profile and
tools/palw-mmvq-smoke/palw-mmvq-smoke.cpp valid_qwen3_8b_q4_k_m): each seed tool refuses a model
that differs from the pinned Qwen3-8B profile in any one field its profile gate compares, with its
own message, exit status 3 and nothing on stdout, and gets past the gate on the same model with no
field changed.

The models are pytest_palw.fixtures.models.catalog's gate models, each negative changed in one field
alone (GATE_NEGATIVES), the control changed in none. One case per (tool, gated field) runs the tool on
that field's negative; the control case runs it on the control. Both tools refuse after loading the
model (mmap, check_tensors), so a negative is a model llama.cpp loads: only the gate refuses it.

The smoke's models are the full profile (Qwen3-8B shapes, Q4_K_M layout) with zero tensor data in a
sparse file. The observer's (ensure_observer_gate_model) are the full profile in every field its gate
compares and the smallest llama.cpp loads in the fields it does not (head dim, feed-forward width,
tensor types, a tied LM head): it loads with check_tensors, which reads every byte of tensor data, so a
5 GB file cost a refusal 2-4 s and 5 GB of memory; these are under 300 MB.

The observer (CPU tier: the CPU build has it) runs with --n-predict 1; it does not gate the file type,
so it must accept the file-type negative as it accepts the control. The smoke (GPU tier: only a CUDA
build has it) runs as test_positive_trace runs it (--mixed, the session's kernel digests); past its
gate it traces one decode, which commits on a device of the pinned cc and fails closed elsewhere
(test_device_pin): the control case holds it to exit 0 and an "ok" report where the device is pinned.

The oracle of the field lists is the patch source: a field either gate compares with no negative
here (or a reason it cannot be provoked, UNPROVOKABLE) fails test_every_gated_field_has_a_negative
(CPU tier).
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from pytest_palw.ahead import ahead
from pytest_palw.fixtures.models.catalog import (
    GATE_CONTROL,
    GATE_NEGATIVES,
    GATE_VALUES,
    OBSERVER_GATE_FIELDS,
    OBSERVER_GATED_FIELDS,
    ensure_gate_model,
    ensure_observer_gate_model,
)
from pytest_palw.fixtures.models.profiles import PROFILES
from pytest_palw.paths import SEED_PATCH
from pytest_palw.topology import FILE_TYPE_Q4_K_M

# tool -> (its source in the patched tree, the opening of its gate function)
GATES = {
    "observer": ("tools/palw-observer/palw-observer.cpp", "static bool validate_qwen3_8b_profile("),
    "smoke": ("tools/palw-mmvq-smoke/palw-mmvq-smoke.cpp", "bool valid_qwen3_8b_q4_k_m("),
}
# What each tool prints to stderr, as a line of its own, when its gate refuses a model (exit 3).
MESSAGES = {
    "observer": "error: model is not the supported dense Qwen3-8B profile "
                "(qwen3, 36 layers, 4096 hidden, 32/8 heads, 151936 vocab)",
    "smoke": "error: model is not the dense Qwen3-8B Q4_K_M profile",
}
# The fields each gate compares (test_every_gated_field_has_a_negative holds these to the patch),
# less UNPROVOKABLE: one case per field, on its GATE_NEGATIVES model.
OBSERVER_REFUSES = ["architecture", "n_layer", "n_embd", "n_head", "n_head_kv", "n_vocab"]
SMOKE_REFUSES = ["architecture", "ftype", "n_layer", "n_embd", "n_head", "n_head_kv", "n_vocab"]
# The control, and every gate negative whose field the observer does not compare: it must run them.
OBSERVER_ACCEPTS = [GATE_CONTROL, "ftype"]
# Gated fields that follow from another gated field, so that no model changes them alone: llama.cpp
# answers both from the architecture (llama_model_has_encoder: T5, T5ENCODER, EAGLE3, DFLASH;
# llama_model_has_decoder: all but T5ENCODER), so a qwen3 file has a decoder and no encoder.
UNPROVOKABLE = {
    "has_encoder": "llama.cpp derives it from the architecture: a qwen3 model never has an encoder",
    "has_decoder": "llama.cpp derives it from the architecture: a qwen3 model always has a decoder",
}

# -- the oracle: the gates' comparisons, read from the patch ------------------------------------------------
# A libllama accessor call in a gate compares a field (its result, or its negation); these hand
# another call its argument and compare nothing.
ACCESSORS = {"get_vocab"}
# The field names the gate models use where llama.h's accessor says it differently.
RENAMED = {"n_tokens": "n_vocab"}
# The ftype the smoke compares with, by llama.h's name.
LLAMA_FTYPES = {"LLAMA_FTYPE_MOSTLY_Q4_K_M": FILE_TYPE_Q4_K_M}
_ACCESSOR = re.compile(r"\bllama_(?:model|vocab)_(\w+)\((?:[^()]|\([^()]*\))*\)(?:\s*([!=]=)\s*(\w+))?")
_METADATA = re.compile(r'"general\.(\w+)"')


def patched_source(text: str, path: str) -> str:
    """The lines the seed patch adds to ``path``, without their '+' (a new file: all of it)."""
    added, current = [], None
    for line in text.splitlines():
        if line.startswith("+++ "):
            current = line[len("+++ b/"):]
        elif line.startswith("diff --git "):
            current = None
        elif current == path and line.startswith("+"):
            added.append(line[1:])
    return "\n".join(added)


def gate_function(text: str, tool: str) -> str:
    """The body of ``tool``'s profile gate, from the patch text."""
    path, signature = GATES[tool]
    source = patched_source(text, path)
    start = source.index(signature)
    return source[start:source.index("\n}\n", start)]


def gate_comparisons(text: str) -> dict[str, dict[str, str | None]]:
    """Per tool, each field its gate compares and the value it compares with (None: a boolean of the
    model): a libllama accessor's result (``llama_model_n_layer(model) != 36``), a ``general.*``
    metadata key it reads (compared with a string literal)."""
    found = {}
    for tool in GATES:
        body = gate_function(text, tool)
        fields: dict[str, str | None] = {}
        for name, _, value in _ACCESSOR.findall(body):
            if name not in ACCESSORS:
                fields[RENAMED.get(name, name)] = value or None
        for key in _METADATA.findall(body):
            literal = re.search(rf"\b{key}\s*[!=]=\s*\"(\w+)\"", body)
            fields[key] = literal.group(1) if literal else None
        found[tool] = fields
    return found


def pinned_value(field: str):
    """The control's value of a gate field (the full profile's)."""
    if field == "ftype":
        return FILE_TYPE_Q4_K_M
    return getattr(PROFILES["full"], field)


def test_every_gated_field_has_a_negative():
    """The patch source is the oracle of the lists: each field either gate compares has a case of
    that tool (or cannot be provoked), each case's field is compared, each negative differs from the
    compared value and the control equals it, and each refusal message is the tool's own."""
    text = SEED_PATCH.read_text()
    found = gate_comparisons(text)
    assert set(found["observer"]) >= {"architecture", "n_layer", "n_vocab"}, found
    assert set(found["smoke"]) >= {"architecture", "ftype", "n_layer", "n_vocab"}, found
    for tool, refuses in (("observer", OBSERVER_REFUSES), ("smoke", SMOKE_REFUSES)):
        gated = set(found[tool])
        assert gated - set(refuses) - set(UNPROVOKABLE) == set(), f"{tool}: gated in the patch, no negative"
        assert set(refuses) - gated == set(), f"{tool}: a negative for a field the patch does not gate"
        assert set(refuses) <= set(GATE_NEGATIVES), f"{tool}: a case without a gate model"
        for field in refuses:
            compared = found[tool][field]
            compared = LLAMA_FTYPES.get(compared, compared)
            assert compared is not None, f"{tool}: the value the gate compares {field} with was not parsed"
            pinned = pinned_value(field)
            assert str(pinned) == str(compared), f"{tool} compares {field} with {compared}, the control has {pinned}"
            assert str(GATE_VALUES[field]) != str(compared), f"the {field} negative passes the {tool}'s gate"
    assert set(UNPROVOKABLE) <= set(found["observer"]) | set(found["smoke"]), "a stale UNPROVOKABLE entry"
    assert set(GATE_NEGATIVES) == set(OBSERVER_REFUSES) | set(SMOKE_REFUSES), "a gate model no case uses"
    assert set(OBSERVER_GATE_FIELDS) == set(OBSERVER_REFUSES) | set(OBSERVER_ACCEPTS) - {GATE_CONTROL}, (
        "an observer gate model no case uses, or an observer case without one")
    assert set(OBSERVER_GATED_FIELDS) == set(OBSERVER_REFUSES), "test_non_mutation's observer runs ask the patch's gate"
    assert OBSERVER_ACCEPTS == [GATE_CONTROL, *sorted(set(GATE_NEGATIVES) - set(found["observer"]))]
    # Each tool's refusal, as its source prints it (adjacent C string literals joined).
    observer = re.sub(r'"\s*\n\s*"', "", gate_function(text, "observer"))
    assert f'"{MESSAGES["observer"]}\\n"' in observer
    smoke = patched_source(text, GATES["smoke"][0])
    assert 'std::fprintf(stderr, "error: %s\\n", message);' in smoke
    assert f'return fail("{MESSAGES["smoke"][len("error: "):]}");' in smoke


# -- running the tools ---------------------------------------------------------------------------------------
def _tool(palw_session, name: str) -> str:
    tool = palw_session.build.tools.get(name)
    assert tool and os.path.exists(tool), palw_session.build.tool_absent(name)
    return tool


def gate_model(name: str):
    """The smoke's gate model of a case's name (GATE_CONTROL or a gated field)."""
    return ensure_gate_model(None if name == GATE_CONTROL else name)


def observer_gate_model(name: str):
    """The observer's gate model of a case's name (GATE_CONTROL or a gated field)."""
    return ensure_observer_gate_model(None if name == GATE_CONTROL else name)


def _run_observer(palw_session, model):
    return palw_session.ahead.run([_tool(palw_session, "observer"), "--model", str(model), "--prompt", "Hello",
                                   "--n-predict", "1", "--observer", "off"],
                                  capture_output=True, text=True, timeout=900)


def _run_smoke(palw_session, name: str):
    digests = palw_session.kernel_digests
    args = [_tool(palw_session, "smoke"), "--model", str(gate_model(name)), "--mixed"] + [
        item for entry in ("q4", "q6", "qk", "softmax", "pv")
        for item in (f"--{entry}-cubin-sha256", digests["q4_k"].hex())]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def _assert_refused(result, tool: str) -> None:
    assert result.returncode == 3, f"exit {result.returncode}: {result.stderr[-1500:]}"
    assert MESSAGES[tool] in result.stderr.splitlines(), result.stderr[-1500:]
    assert result.stdout.strip() == "", f"a refused model printed {result.stdout[:300]!r}"


OBSERVER_CASES = {"test_observer_refuses_a_model_off_the_profile_in_one_field": "field",
                  "test_observer_runs_the_control_and_the_ungated_field": "name"}


@ahead(keys=lambda item: [item.callspec.params[OBSERVER_CASES[item.originalname]]],
       prepare=lambda palw_session, name: observer_gate_model(name))
def observer_run(palw_session, name: str, model):
    """``observer_run(name)``: the observer's run on that gate model (GATE_CONTROL or a field). Each
    is ~0.3 s of one core, most of it llama.cpp reading the 151 936-token vocabulary: child processes,
    one per selected case, started with the cases (pytest_palw.ahead)."""
    return _run_observer(palw_session, model)


@pytest.mark.palw_cpu
@pytest.mark.parametrize("field", OBSERVER_REFUSES)
def test_observer_refuses_a_model_off_the_profile_in_one_field(field, observer_run):
    _assert_refused(observer_run(field), "observer")


@pytest.mark.palw_cpu
@pytest.mark.parametrize("name", OBSERVER_ACCEPTS)
def test_observer_runs_the_control_and_the_ungated_field(name, observer_run):
    """Past the gate the observer decodes one token to its result line. No full 8B decode is needed for
    that: on the observer's control the decode is the tied 4096 x 151936 LM head and four small valued
    layers."""
    result = observer_run(name)
    assert result.returncode == 0, result.stderr[-1500:]
    assert MESSAGES["observer"] not in result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [line["record"] for line in (lines[0], lines[-1])] == ["header", "result"]
    assert lines[-1]["status"] == "ok" and len(lines[-1]["generated_token_ids"]) == 1
    # The model it ran is the one named: the pinned profile, its file type the negative's if it is one.
    model = lines[0]["model"]
    full = PROFILES["full"]
    assert (model["n_layer"], model["n_embd"], model["n_head"], model["n_head_kv"], model["n_vocab"]) == (
        full.n_layer, full.n_embd, full.n_head, full.n_head_kv, full.n_vocab)
    assert model["file_type"] == (FILE_TYPE_Q4_K_M if name == GATE_CONTROL else GATE_VALUES["ftype"])


@pytest.mark.palw_gpu
@pytest.mark.parametrize("field", SMOKE_REFUSES)
def test_smoke_refuses_a_model_off_the_profile_in_one_field(field, palw_session):
    _assert_refused(_run_smoke(palw_session, field), "smoke")


@pytest.mark.palw_gpu
def test_smoke_gets_past_its_gate_on_the_control(palw_session):
    result = _run_smoke(palw_session, GATE_CONTROL)
    assert MESSAGES["smoke"] not in result.stderr, "the smoke refuses the pinned profile"
    assert "error: failed to load model" not in result.stderr, result.stderr[-1500:]
    device, pinned = palw_session.device, palw_session.pinned_cc  # a brought runtime's: observed
    if device is not None and device.cc == pinned:
        assert result.returncode == 0, result.stderr[-2000:]
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert report["status"] == "ok" and report["model"] == "qwen3-8b-q4_k_m"
        return
    # Elsewhere the trace past the gate fails closed (test_device_pin), with an error of its own.
    assert result.returncode != 0 and "error: " in result.stderr, result.stderr[-1500:]
