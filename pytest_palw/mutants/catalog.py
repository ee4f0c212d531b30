"""The mutants: one table (``MUTANTS``), one entry per small source edit the suite must notice.

Adding a mutant is one ``Mutant(...)`` entry below; the engine (engine.py) applies and judges it.
An anchor (``old``) must occur exactly once in its file (tests/mutants checks every one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_palw.builder.config import RUNTIME_HEADER


@dataclass(frozen=True)
class Mutant:
    tier: str  # "gpu" or "cpu": the tier that judges it
    name: str
    claim: str  # what the broken runtime (or fixture) does
    root: str  # "source" (patched llama.cpp tree), "native" (runtime-palw/cuda) or "fixtures"
    path: str  # relative to the root
    old: str  # the anchor: occurs once in the file
    new: str  # what replaces it


# One codec edit, caught by the GPU tier (runtime codec) and by the CPU tier (host codec).
ROWS_THEN_COLUMNS = "    out.u32(base.output_rows);\n    out.u32(base.output_columns);"
COLUMNS_THEN_ROWS = "    out.u32(base.output_columns);\n    out.u32(base.output_rows);"
# The mixed association's label for the weight type (the legacy one is indented differently).
MIXED_Q6_K_LABEL = ("? PALW_CUDA_TRACE_QUANTIZATION_Q4_K\n                        : weight->type == GGML_TYPE_Q6_K\n"
                    "                            ? PALW_CUDA_TRACE_QUANTIZATION_")


def refusal(request: str, fault: str = "INVALID_REQUEST", guard: str = "") -> str:
    """The start of attach's refusal path in src/llama-context.cpp for one request version."""
    return (f"        const palw_cuda_llama_{request} * request) {{\n"
            "    const auto fail_unbound = [request](palw_cuda_trace_status status) {\n"
            f"        if ({guard}request != nullptr && request->fault != nullptr) {{\n"
            "            request->fault(\n"
            "                request->user_data,\n"
            "                status,\n"
            f"                PALW_CUDA_LLAMA_MMVQ_FAULT_{fault},")


# Attach's refusal when no backend exposes the PALW procs: what a CPU runtime answers to a valid
# request. V1 leaves a blank line after it, V2 does not.
NO_PALW_BACKEND = "    if (candidate_count != 1 || candidate_backend == nullptr || get_api_fn == nullptr) {\n"
NO_PALW_BACKEND_V1_NEXT = "    }\n\n    const palw_cuda_llama_mmvq_backend_api_v1 * backend_api = get_api_fn();"
NO_PALW_BACKEND_V2_NEXT = "    }\n    const palw_cuda_llama_mmvq_backend_api_v1 * backend_api = get_api_fn();"
REFUSE = "        return fail_unbound(PALW_CUDA_TRACE_INVALID_ARGUMENT);\n"
REFUSE_AS_UNSUPPORTED_DISPATCH = (
    "        request->fault(request->user_data, PALW_CUDA_TRACE_INVALID_ARGUMENT,\n"
    "            PALW_CUDA_LLAMA_MMVQ_FAULT_UNSUPPORTED_DISPATCH, nullptr);\n"
    "        return PALW_CUDA_TRACE_INVALID_ARGUMENT;\n")

# The seed's Qwen3.5-MoE loader fixes in src/models/qwen35moe.cpp: each mutant reverts one.
QWEN35MOE = "src/models/qwen35moe.cpp"

# The producer's duplicate check in the grouped collector (producer_accumulator.cu) and at finalize.
COLLECTOR_DUPLICATE = ("            if ((before >> lane) & 1u) {\n"
                       "                faults |= PALW_CUDA_PRODUCER_FAULT_DUPLICATE_CAPTURE;")
FINALIZE_MISSING = ("        if (slots[i].captures != expected) {\n"
                    "            faults |= PALW_CUDA_PRODUCER_FAULT_MISSING_CAPTURE;")

# The seed tools' profile gates: the observer's validate_qwen3_8b_profile, the smoke's
# valid_qwen3_8b_q4_k_m; each mutant drops one comparison (conformance/test_tool_gates.py).
OBSERVER = "tools/palw-observer/palw-observer.cpp"
SMOKE = "tools/palw-mmvq-smoke/palw-mmvq-smoke.cpp"
OBSERVER_GATE_KV_HEADS = "            llama_model_n_head_kv(model) != 8 ||\n"
OBSERVER_GATE_NEXT = "            llama_vocab_n_tokens(vocab) != 151936 ||"
SMOKE_GATE_ARCHITECTURE = 'architecture == "qwen3" && '
SMOKE_GATE_FTYPE = "llama_model_ftype(model) == LLAMA_FTYPE_MOSTLY_Q4_K_M &&"

MUTANTS = (
    Mutant("gpu", "producer-count-off-by-one", "the producer reports one launch more than it captured",
           "native", "producer_accumulator.cu",
           "return context != nullptr ? context->count : 0u;",
           "return context != nullptr ? context->count + (context->count != 0u) : 0u;"),
    Mutant("gpu", "records-swapped", "finalize writes the records of launches 0 and 1 in swapped order",
           "native", "producer_accumulator.cu",
           "host_records[i] = context->templates[i];",
           "host_records[i] = context->templates[i < 2u ? 1u - i : i];"),
    Mutant("gpu", "collector-wrong-rows", "the attention collector sketches the next row's outputs",
           "native", "producer_accumulator.cu",
           "value_bits = __float_as_uint(output[row * output_row_stride + column]);",
           "value_bits = __float_as_uint(output[((row + 1u) % output_rows) * output_row_stride + column]);"),
    Mutant("gpu", "collector-duplicate-undetected",
           "the grouped collector sums an element captured twice instead of faulting DUPLICATE_CAPTURE",
           "native", "producer_accumulator.cu", COLLECTOR_DUPLICATE,
           COLLECTOR_DUPLICATE.replace("if ((before >> lane) & 1u)", "if (false && ((before >> lane) & 1u))")),
    Mutant("gpu", "finalize-missing-capture-undetected",
           "finalize accepts a slot with fewer captures than outputs (MISSING_CAPTURE never set)",
           "native", "producer_accumulator.cu", FINALIZE_MISSING,
           FINALIZE_MISSING.replace("captures != expected", "captures > expected")),
    Mutant("gpu", "codec-rows-columns-swapped", "the C codec writes output columns before output rows",
           "native", "record_codec.cpp", ROWS_THEN_COLUMNS, COLUMNS_THEN_ROWS),
    Mutant("gpu", "softmax-not-hooked", "the softmax stage launches without the trace hook",
           "source", "ggml/src/ggml-cuda/softmax.cu",
           "if (ggml_cuda_palw_trace_v2_attention_active(&ctx)) {",
           "if (false && ggml_cuda_palw_trace_v2_attention_active(&ctx)) {"),
    Mutant("gpu", "q6k-labelled-q4k", "the mixed association labels Q6_K weights as Q4_K",
           "source", "src/llama-context.cpp", MIXED_Q6_K_LABEL + "Q6_K", MIXED_Q6_K_LABEL + "Q4_K"),
    Mutant("gpu", "template-decode-step-not-compared",
           "the V2 association check no longer compares the approved template's decode step",
           "source", "ggml/src/ggml-cuda/ggml-cuda.cu",
           "if (base.kind != actual.kind || base.decode_step != actual.decode_step ||",
           "if (base.kind != actual.kind ||"),
    Mutant("gpu", "attention-association-layer-off-by-one",
           "the mixed association reports each attention launch one layer later than it is",
           "source", "src/llama-context.cpp", "actual.layer_id = metadata.layer_id;",
           "actual.layer_id = metadata.layer_id + 1;"),
    Mutant("gpu", "smoke-gate-ignores-file-type",
           "llama-palw-mmvq-smoke accepts a model whose file type is not Q4_K_M",
           "source", SMOKE, SMOKE_GATE_ARCHITECTURE + SMOKE_GATE_FTYPE, SMOKE_GATE_ARCHITECTURE.rstrip()),
    Mutant("cpu", "host-codec-rows-columns-swapped", "the host codec writes output columns before rows",
           "native", "record_codec.cpp", ROWS_THEN_COLUMNS, COLUMNS_THEN_ROWS),
    Mutant("cpu", "host-codec-sketch-little-endian", "the host codec writes sketch lanes little-endian",
           "native", "record_codec.cpp",
           "output_[written_ + i] = static_cast<uint8_t>(value >> (8 * (width - 1 - i)));",
           "output_[written_ + i] = static_cast<uint8_t>(value >> (8 * (width == 8 ? i : width - 1 - i)));"),
    Mutant("cpu", "header-id-is-zero-skips-last-byte", "the header's id validator ignores an id's last byte, so "
           "an id that differs only there counts as unset", "native", RUNTIME_HEADER,
           "for (uint32_t i = 0; i < PALW_CUDA_PRODUCER_ID_SIZE; ++i) {",
           "for (uint32_t i = 0; i + 1u < PALW_CUDA_PRODUCER_ID_SIZE; ++i) {"),
    Mutant("cpu", "q4-k-m-rule-one-layer-early",
           "the generator's Q4_K_M rule gives the middle layers' Q6_K attn_v/ffn_down one layer early "
           "(same 216/37 counts)",
           "fixtures", "models/profiles.py", "(layer - eighth) % 3 == 2", "(layer - eighth) % 3 == 1"),
    Mutant("cpu", "rope-sections-4-only", "the loader accepts only 4-entry rope.dimension_sections",
           "source", QWEN35MOE, "if (sections.size() != 3 && sections.size() != 4) {",
           "if (sections.size() != 4) {"),
    Mutant("cpu", "ssm-dt-bias-required", "the loader requires the '.bias' spelling of ssm_dt",
           "source", QWEN35MOE, "flags | TENSOR_NOT_REQUIRED);\n            if (!layer.ssm_dt) {",
           "flags);\n            if (!layer.ssm_dt) {"),
    Mutant("cpu", "bundled-siblings-not-counted", "the loader no longer accounts for bundled v.*/mtp.* tensors",
           "source", QWEN35MOE, "if (is_vision || is_mtp) {", "if (false && (is_vision || is_mtp)) {"),
    Mutant("cpu", "kv-width-from-layer-0", "attention layers take their K/V width from layer 0",
           "source", QWEN35MOE,
           "const int64_t n_embd_k_gqa_attn = hparams.n_embd_k_gqa_max();\n"
           "            const int64_t n_embd_v_gqa_attn = hparams.n_embd_v_gqa_max();",
           "const int64_t n_embd_k_gqa_attn = n_embd_k_gqa;\n"
           "            const int64_t n_embd_v_gqa_attn = n_embd_v_gqa;"),
    Mutant("cpu", "observer-gate-ignores-kv-heads",
           "llama-palw-observer accepts a model with another number of key-value heads",
           "source", OBSERVER, OBSERVER_GATE_KV_HEADS + OBSERVER_GATE_NEXT, OBSERVER_GATE_NEXT),
    Mutant("cpu", "observer-event-count-off-by-one",
           "llama-palw-observer's result line counts one event more than it wrote (caught on CPU since its "
           "observer cases run on the observer's gate control)",
           "source", OBSERVER, "append_integer(line, observer.event_count());",
           "append_integer(line, observer.event_count() + 1);"),
    Mutant("cpu", "v2-refusal-without-fault", "a refused V2 attach calls no fault callback",
           "source", "src/llama-context.cpp", refusal("trace_request_v2"),
           refusal("trace_request_v2", guard="false && ")),
    Mutant("cpu", "v1-refusal-wrong-fault", "a refused V1 attach reports a GRAPH fault, not INVALID_REQUEST",
           "source", "src/llama-context.cpp", refusal("mmvq_request_v1"), refusal("mmvq_request_v1", "GRAPH")),
    Mutant("cpu", "v2-no-cuda-refusal-status", "a valid V2 request on a runtime without CUDA is refused "
           "with CUDA_ERROR, not INVALID_ARGUMENT",
           "source", "src/llama-context.cpp", NO_PALW_BACKEND + REFUSE + NO_PALW_BACKEND_V2_NEXT,
           NO_PALW_BACKEND + REFUSE.replace("INVALID_ARGUMENT", "CUDA_ERROR") + NO_PALW_BACKEND_V2_NEXT),
    Mutant("cpu", "v1-no-cuda-refusal-fault", "a valid V1 request on a runtime without CUDA is refused "
           "with an UNSUPPORTED_DISPATCH fault, not INVALID_REQUEST",
           "source", "src/llama-context.cpp", NO_PALW_BACKEND + REFUSE + NO_PALW_BACKEND_V1_NEXT,
           NO_PALW_BACKEND + REFUSE_AS_UNSUPPORTED_DISPATCH + NO_PALW_BACKEND_V1_NEXT),
)


NAMES = tuple(mutant.name for mutant in MUTANTS)


def select(tier: str, names: Iterable[str] | None = None, root: str | None = None) -> list[Mutant]:
    """The tier's mutants in table order; ``names``: only those (None or empty: all); ``root``: only
    those editing that root."""
    names = set(names or ())
    return [m for m in MUTANTS if m.tier == tier and (not names or m.name in names)
            and (root is None or m.root == root)]
