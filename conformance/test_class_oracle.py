"""Claim: each MMVQ launch's class in the launch table (q4_k / q6_k, from the model file's weight
types) is the type llama.cpp's own Q4_K_M quantizer gives that weight.

The oracle is the quantizer of the runtime under test's libllama (llama_model_quantize, not a
line of ours), in the session's own process, asked for Q4_K_M of an all-F32 GGUF of the 36-layer
Qwen3 topology with dry_run: it decides and logs each tensor's type without quantizing
(pytest_palw.fixtures.oracles.quantizer). Its result goes into the certificate
(notes.class_oracle): the quantizer's Q4_K/Q6_K counts, the tensors compared and every
disagreement.
"""

import pytest

from pytest_palw.fixtures.oracles.quantizer import disagreements, oracle_types

pytestmark = pytest.mark.palw_cpu


def test_launch_classes_are_llama_cpp_s_q4_k_m_types(launch_table, palw_session, palw_runtime, tmp_path):
    theirs = oracle_types(palw_runtime.llama, palw_runtime.logs, tmp_path)
    classes = {launch.weight: launch.klass.upper() for launch in launch_table if launch.weight is not None}
    wrong = disagreements(classes, theirs, "launch table")
    palw_session.notes["class_oracle"] = {
        "oracle": f"llama_model_quantize (Q4_K_M, dry run) of {palw_session.build.lib_dir}/libllama.so on the "
                  "36-layer Qwen3 topology",
        "compared": len(classes),
        "quantizer_types": {kind: sum(1 for name in classes if theirs.get(name) == kind) for kind in ("Q4_K", "Q6_K")},
        "disagreements": wrong,
    }
    assert classes and not wrong, f"{len(wrong)} of {len(classes)} launch classes disagree: " + "; ".join(wrong[:6])
