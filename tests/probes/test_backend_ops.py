"""pytest_palw.probes.backend_ops on the CPU runtime: llama.cpp's test-backend-ops builds from the
runtime's tree against its ggml and runs (named explicitly, the CPU backend is tested against the
CPU reference); the GPU tier (conformance/test_backend_ops.py) judges the CUDA backend. The parser
is held to upstream's console format."""

from pytest_palw.probes import backend_ops
from pytest_palw.runtime.library import RuntimeBuild

CONSOLE = (
    "Testing 2 devices\n\nBackend 1/2: CUDA0\n  Device description: NVIDIA H200\n\n"
    "  MUL_MAT(type_a=q4_K,type_b=f32,m=16,n=1,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],v=0,o=1): \x1b[1;32mOK\x1b[0m\n"
    "  MUL_MAT(type_a=q4_K,type_b=f32,m=16,n=8,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],v=0,o=1): [MUL_MAT] NMSE = "
    "0.5 > 0.0005 \x1b[1;31mFAIL\x1b[0m\n"
    "  MUL_MAT(type_a=q4_K,type_b=f32,m=16,n=1,k=1024,bs=[3,2],nr=[1,1],per=[0,2,1,3],v=0,o=1): not supported [CUDA0]\n"
    "  1/2 tests passed\n  Backend CUDA0: \x1b[1;31mFAIL\x1b[0m\nBackend 2/2: CPU\n  Skipping CPU backend\n"
)


def test_the_console_output_is_counted(tmp_path):
    script = tmp_path / "fake-test-backend-ops"
    script.write_text(f"#!/bin/sh\nprintf '%s' '{CONSOLE}'\nexit 1\n")
    script.chmod(0o755)
    outcome = backend_ops.run(script, "CUDA0", "MUL_MAT", "type_a=q4_K")
    assert outcome.backends == ["CUDA0", "CPU"]
    assert outcome.cases == {"OK": 1, "FAIL": 1, "not supported": 1} and outcome.tested == 2
    assert outcome.one_column == 1  # the OK case has n=1; the failed one n=8
    assert outcome.failed == ["MUL_MAT(type_a=q4_K,type_b=f32,m=16,n=8,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],v=0,o=1)"]
    assert outcome.returncode == 1


def test_it_builds_from_the_runtime_tree_and_runs(cpu_build):
    build = RuntimeBuild.locate(cpu_build.path)
    binary = backend_ops.build_binary(build)
    outcome = backend_ops.run(binary, "CPU", "MUL_MAT", "type_a=q4_K,type_b=f32")
    assert outcome.returncode == 0, outcome.tail
    assert outcome.backends == ["CPU"]
    assert outcome.tested == outcome.cases["OK"] > 0 and outcome.failed == [] and outcome.one_column > 0
