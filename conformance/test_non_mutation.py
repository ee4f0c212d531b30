"""Claim: tracing observes the graph without mutating it.

(a) traced logits equal untraced ones bit for bit under the same scheduling; the reference
    configuration is pytest_palw.runtime.reference: an untraced decode on a fresh pinned context
    whose eval callback asks for every node (each node its own scheduler split: no fusion,
    no CUDA graph) — the trace itself disables fusion and CUDA graphs. A trace leaves later
    default-scheduling decodes bit-identical to earlier ones; against default scheduling the
    traced logits' largest difference is reported (notes.default_scheduling_max_abs_diff).
(b) the associated operation sequence equals discovery (shapes, weight pointers, node names);
(c) llama-palw-observer off / graph / sketch give identical token ids and output bytes and
    every JSONL line matches fixtures/observer.schema.json;
(d) the scheduler's node list (GGML_SCHED_DEBUG) is the same with and without the trace.
"""

import json
import os
import re

import numpy as np
import pytest

from pytest_palw.ahead import ahead
from pytest_palw.fixtures.models.catalog import OBSERVER_GATED_FIELDS, ensure_observer_gate_model
from pytest_palw.fixtures.models.profiles import PROFILES
from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.marks import each_launch
from pytest_palw.paths import FIXTURES_DIR
from pytest_palw.runtime.reference import reference_run
from pytest_palw.runtime.run import run_trace
from pytest_palw.schemas import DRAFT7_KEYWORDS, compile_draft7, schema_keywords


@pytest.fixture(scope="module")
def reference(palw_model, palw_token):
    return reference_run(palw_model, palw_token)


@pytest.mark.palw_pinned
def test_traced_logits_equal_reference_bit_for_bit(palw_trace, reference):
    assert palw_trace.logits is not None and reference.logits is not None
    assert palw_trace.logits.tobytes() == reference.logits.tobytes()


@pytest.mark.palw_pinned
def test_default_scheduling_is_unchanged_by_a_trace(palw_trace, palw_context, palw_token, palw_session,
                                                    palw_model, palw_caller):
    """A trace leaves nothing behind: default-scheduling decodes (fusion and CUDA graphs on) on
    fresh contexts just before and just after a full V2 trace give the same logits bit for bit.
    A trace that writes into a weight, or leaves behind a switch that reaches later untraced
    decodes (fusion or CUDA graphs kept off, capture still armed), fails here wherever that
    changes a logit. The traced logits' distance from default scheduling is reported, not
    judged: fused kernels may legitimately round differently."""

    def default_logits():
        context = palw_context()
        assert context.decode(palw_token) == 0
        return context.logits()

    before = default_logits()
    context = palw_model.context()
    try:
        run = run_trace(context, palw_caller(version=2), palw_token)
    finally:
        context.free()
    assert (run.decode_status, run.finalize_status) == (0, palw_model.runtime.lib.PALW_CUDA_TRACE_OK)
    after = default_logits()
    assert after.tobytes() == before.tobytes(), (
        f"a trace changed the next untraced decode: max |after - before| = {np.max(np.abs(after - before)):.3g}")
    difference = float(np.max(np.abs(before - palw_trace.logits)))
    palw_session.notes["default_scheduling_max_abs_diff"] = difference
    palw_session.notes["default_scheduling_same_argmax"] = bool(np.argmax(before) == np.argmax(palw_trace.logits))
    print(f"largest |traced - default scheduling| logit difference: {difference:.3g}")


@pytest.mark.palw_pinned
@each_launch("association")
def test_association_matches_discovery(index, palw_trace, palw_discovery, lib):
    associations = palw_trace.caller.associations
    assert len(associations) == V2_COUNT
    got, want = associations[index], palw_discovery.candidates[index]
    shape = ("m", "n", "k", "batch", "output_rows", "output_columns", "kind", "quantization", "attention_stage")
    assert {f: got[f] for f in shape} == {f: getattr(want, f) for f in shape}
    assert got["node"] == want.node
    if want.is_mmvq:
        assert got["src0"]["data"] == want.weight_data
    else:
        assert got["layer_id"] == want.layer


@pytest.mark.palw_pinned
def test_operation_tokens_are_distinct(palw_trace):
    tokens = palw_trace.caller.operation_tokens
    assert len(tokens) == V2_COUNT and len(set(tokens)) == V2_COUNT and 0 not in tokens


_NODE_LINE = re.compile(r"node #\s*(\d+) \(\s*(.{1,10})\):\s+(.{1,20}) \(")


def _scheduled_nodes(palw_model, trace_with=None, token=0):
    os.environ["GGML_SCHED_DEBUG"] = "2"  # read when the context's scheduler is created
    try:
        context = palw_model.context()
    finally:
        del os.environ["GGML_SCHED_DEBUG"]
    try:
        with palw_model.runtime.logs.capture() as lines:
            if trace_with is None:
                status = context.decode(token)
            else:
                status = run_trace(context, trace_with(), token).decode_status
    finally:
        context.free()
    return status, [(int(m.group(1)), m.group(2).strip(), m.group(3).strip())
                    for m in map(_NODE_LINE.search, lines) if m]


@pytest.mark.palw_pinned
def test_scheduled_graph_unchanged_by_trace(palw_model, palw_caller, palw_token):
    untraced_status, untraced = _scheduled_nodes(palw_model, None, palw_token)
    traced_status, traced = _scheduled_nodes(palw_model, lambda: palw_caller(version=2), palw_token)
    assert untraced_status == 0 and traced_status == 0
    assert len(untraced) > V2_COUNT, "GGML_SCHED_DEBUG printed no node list"
    assert len(traced) == len(untraced)
    assert traced == untraced


def _observer(palw_session):
    tool = palw_session.build.tools.get("observer")
    assert tool and os.path.exists(tool), palw_session.build.tool_absent("observer")
    return tool


# Tokens each observer run generates: four distinct ones on the CPU tier's control (981, 694, 504, 918),
# each a decode whose every event the graph and sketch modes report (~1 450 lines a token).
N_PREDICT = 4


def _run_observer(palw_session, tool, model, mode):
    result = palw_session.ahead.run([tool, "--model", str(model), "--prompt", "Hello", "--n-predict", str(N_PREDICT),
                                     "--observer", mode, "--emit-output-bytes"],
                                    capture_output=True, text=True, timeout=900)
    return result, [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


OBSERVER_MODES = ("off", "graph", "sketch")


def _observer_model(palw_session):
    """The session's model where the observer's gate accepts it (the full profile, a real Qwen3-8B),
    else (the CPU tier's tiny) the observer's gate control (test_tool_gates): the full profile in every
    field the gate compares, with random weights, so that its decode gives varied tokens and sketches."""
    profile, full = palw_session.model_profile, PROFILES["full"]
    if any(getattr(profile, field) != getattr(full, field) for field in OBSERVER_GATED_FIELDS):
        return ensure_observer_gate_model(None)
    return palw_session.resolved_model.path


@ahead(keys=lambda item: [item.callspec.params["mode"]] if hasattr(item, "callspec") else OBSERVER_MODES,
       prepare=lambda palw_session, mode: _observer_model(palw_session))
def observer_runs(palw_session, mode: str, model):
    """``observer_runs(mode)``: the observer in that mode on _observer_model. One child process per
    mode, started with the cases (pytest_palw.ahead)."""
    return _run_observer(palw_session, _observer(palw_session), model, mode)


@pytest.mark.palw_cpu
@pytest.mark.parametrize("mode", OBSERVER_MODES)
def test_observer_lines_match_schema(mode, observer_runs):
    import jsonschema

    schema = json.loads((FIXTURES_DIR / "observer.schema.json").read_text())
    jsonschema.validators.validator_for(schema).check_schema(schema)
    # Every line against the schema, compiled once: jsonschema takes 0.24 ms a line, 1.4 s for the
    # 5 786 lines of a graph or sketch run; fastjsonschema's compiled check 0.02 ms. It implements
    # draft 7: each keyword the schema uses must be one it has (a newer one would be ignored).
    used = schema_keywords(schema)
    assert used <= DRAFT7_KEYWORDS, f"observer.schema.json uses {sorted(used - DRAFT7_KEYWORDS)}: not draft 7"
    validate = compile_draft7(schema)
    result, lines = observer_runs(mode)
    assert result.returncode == 0, result.stderr[-1500:]
    assert [line["record"] for line in (lines[0], lines[-1])] == ["header", "result"]
    for line in lines:
        validate(line)
    events = [line for line in lines if line["record"] == "event"]
    assert [e["event_seq"] for e in events] == list(range(len(events)))
    assert lines[-1]["event_count"] == len(events)


@pytest.mark.palw_cpu
def test_observer_modes_give_identical_outputs(observer_runs):
    outputs = {mode: {k: lines[-1][k] for k in ("prompt_token_ids", "generated_token_ids", "output_bytes")}
               for mode, (_, lines) in ((mode, observer_runs(mode)) for mode in OBSERVER_MODES)}
    assert outputs["graph"] == outputs["off"]
    assert outputs["sketch"] == outputs["off"]
    assert len(outputs["off"]["generated_token_ids"]) == N_PREDICT
    assert len(set(outputs["off"]["generated_token_ids"])) > 1, "greedy decode repeats one token"


@pytest.mark.palw_cpu
def test_observer_sketches_vary(observer_runs):
    _, lines = observer_runs("sketch")
    values = {line["sketch"]["value"] for line in lines if line.get("stage") == "post_compute_sketch"}
    assert len(values) > 1, "every GEMM sketch is the same value"


@pytest.mark.palw_cpu
def test_observer_refuses_other_profiles(palw_session):
    from pytest_palw.fixtures.models.catalog import ensure_model

    narrow = ensure_model("tiny")  # 256 embd, 512 vocab: not the 8B profile
    result, lines = _run_observer(palw_session, _observer(palw_session), narrow, "graph")
    assert result.returncode == 3
    assert lines == []
    assert "not the supported dense Qwen3-8B profile" in result.stderr
