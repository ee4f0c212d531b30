"""`palw build --model SPEC` prepares what the first `palw certify --model SPEC` would: the model as
certify resolves it, this build's cffi binding as the runtime loads it (and, for CUDA only,
test-backend-ops); a preparation that fails is named in one line and fails the command."""

from pathlib import Path

from pytest_palw.preflight.resolve import resolve_model
from pytest_palw.runtime.binding.runtime_abi import load_runtime_abi
from pytest_palw.runtime.library import RuntimeBuild


def _lines(stderr: str, prefix: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(prefix)]


def test_the_model_and_the_binding_are_the_ones_certify_uses(cpu_build, run_palw):
    result = run_palw("build", "--model", "profile:tiny", "--print-manifest")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == str(cpu_build.path)
    model = _lines(result.stderr, "palw: prepared the model profile:tiny in ")
    binding = _lines(result.stderr, "palw: prepared the cffi binding in ")
    assert len(model) == 1 and len(binding) == 1, result.stderr
    assert not _lines(result.stderr, "palw: prepared llama.cpp's test-backend-ops"), "a CPU build has no GPU tier"
    resolved = resolve_model("profile:tiny")
    assert f": {resolved.path} (sha256 {resolved.sha256[:16]}...)" in model[0]
    prepared = Path(binding[0].split(" s: ", 1)[1])
    compiled_at = prepared.stat().st_mtime_ns
    loaded = load_runtime_abi(RuntimeBuild.locate(Path(cpu_build.path)).layout)
    assert Path(loaded.__file__) == prepared  # the very module the runtime loads, in the cache it reads
    assert prepared.stat().st_mtime_ns == compiled_at, "the runtime compiled its binding again"


def test_a_failed_preparation_is_named_and_fails_the_command(cpu_build, run_palw, tmp_path):
    missing = tmp_path / "missing.gguf"
    result = run_palw("build", "--model", missing)
    assert result.returncode == 1
    failed = _lines(result.stderr, f"palw: preparing the model {missing} failed (exit 1): ")
    assert len(failed) == 1 and "does not exist" in failed[0], result.stderr
    assert "palw: the build is done, but 1 of 2 preparations failed (above)" in result.stderr


def test_an_unpatched_build_prepares_no_certification(run_palw):
    result = run_palw("build", "--unpatched", "--model", "profile:tiny")
    assert result.returncode != 0
    assert "--model prepares a certification, and an --unpatched build is never certified" in result.stderr
