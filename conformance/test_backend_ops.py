"""Claim: the ops the trace touches compute on the patched CUDA backend what the CPU backend of the
same ggml computes, by llama.cpp's own test-backend-ops (the runtime's tree, trace compiled in).

The oracle is upstream's op test and the CPU backend, not a line of ours
(pytest_palw.probes.backend_ops): each group below is one ``test-backend-ops test -b CUDA0``
run filtered to the op and types a traced launch uses: MUL_MAT with Q4_K and Q6_K weights (the
MMVQ launches), MUL_MAT of F16 by F32 (the attention QK and PV stages) and SOFT_MAX (the attention
softmax). A group passes when the CUDA backend was tested, no case failed or was not supported,
and, for MUL_MAT, cases of the decode's one-column shape (n=1, the MMVQ/MMVF paths) passed. It is
the op's numerics without a trace attached. The counts go into the certificate
(notes.backend_ops_<group>).
"""

import pytest

from pytest_palw.probes.backend_ops import build_binary, run

pytestmark = pytest.mark.palw_gpu

# (group, ops, params regex over the case's variables)
GROUPS = {
    "mul_mat_q4_k": ("MUL_MAT", "type_a=q4_K,type_b=f32"),
    "mul_mat_q6_k": ("MUL_MAT", "type_a=q6_K,type_b=f32"),
    "mul_mat_f16_f32": ("MUL_MAT", "type_a=f16,type_b=f32"),
    "soft_max": ("SOFT_MAX", "type=f32"),
}


def _group_run(binary, group):
    """One group's test-backend-ops run: its lookahead job (pytest_palw/lookahead.py). The groups'
    runs are separate processes; run side by side they share the GPU (and its CPU reference) instead
    of waiting one after another on one worker."""
    ops, params = GROUPS[group]
    return run(binary, "CUDA0", ops, params)


def _case_key(item) -> tuple[str] | None:
    if getattr(item, "originalname", "") != "test_backend_ops_agree_with_the_cpu_backend":
        return None
    return (item.callspec.params["group"],)


@pytest.fixture
def group_run(request, palw_session):
    """This case's run, asked for in its body: the binary built here (once, cached), the run started
    with the next groups' on --palw-lookahead threads of this process, or then."""
    def take():
        binary = build_binary(palw_session.build)
        return palw_session.lookahead.take(request.node, _case_key, _group_run, binary)
    return take


@pytest.mark.parametrize("group", list(GROUPS))
def test_backend_ops_agree_with_the_cpu_backend(group, group_run, palw_session):
    ops, params = GROUPS[group]
    outcome = group_run()
    palw_session.notes[f"backend_ops_{group}"] = outcome.as_dict()  # one note per group: workers merge by name
    assert "CUDA0" in outcome.backends, f"test-backend-ops tested no CUDA0 backend:\n{outcome.tail}"
    assert outcome.tested > 0, f"no {ops} case matched {params!r}: the filter selects nothing\n{outcome.tail}"
    assert outcome.cases.get("not supported", 0) == 0, f"the CUDA backend does not support {ops} {params}"
    if ops == "MUL_MAT":
        assert outcome.one_column > 0, f"no one-column (n=1) {params} case passed: the decode's path went untested"
    assert outcome.failed == [], f"{len(outcome.failed)} of {outcome.tested} cases differ from the CPU backend: " \
                                 f"{outcome.failed[:5]}"
    assert outcome.returncode == 0, f"test-backend-ops exited {outcome.returncode}:\n{outcome.tail}"
