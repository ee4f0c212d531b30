"""The plugin end to end, in subprocesses on the real runtime: session-stopping errors, the
certificate (schema, honest verdict), xdist merging, option precedence."""

import json

import pytest

from pytest_palw.certificate import validate
from pytest_palw.paths import CONFORMANCE_DIR


def _run(pytester, *args, timeout=900):
    return pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider", timeout=timeout)


def _one_line_error(result) -> str:
    lines = [l for l in (result.stdout.lines + result.stderr.lines) if "palw:" in l]
    assert lines, result.stdout.str()[-2000:]
    return lines[0]


def test_wrong_architecture_stops_the_session(pytester):
    from pytest_palw.fixtures.models.catalog import ensure_negative

    model = ensure_negative("wrong-arch")
    result = _run(pytester, str(CONFORMANCE_DIR / "test_class_counts.py"), f"--palw-model={model}")
    assert result.ret == 8  # ModelProfileError
    line = _one_line_error(result)
    assert "architecture llama (expected qwen3)" in line and "profile:tiny" in line
    assert "passed" not in (result.stdout.str().splitlines() or [""])[-1]  # the line is said once, on stderr
    assert len([l for l in result.stdout.lines + result.stderr.lines if "architecture llama" in l]) == 1


def test_truncated_model_stops_the_session(pytester):
    from pytest_palw.fixtures.models.catalog import ensure_negative

    result = _run(pytester, str(CONFORMANCE_DIR / "test_class_counts.py"),
                  f"--palw-model={ensure_negative('truncated')}")
    assert result.ret == 8
    assert "truncated or damaged" in _one_line_error(result)


def test_missing_library_stops_the_session(pytester, tmp_path):
    result = _run(pytester, str(CONFORMANCE_DIR / "test_class_counts.py"), f"--palw-lib={tmp_path}")
    assert result.ret == 7  # RuntimeLibraryError
    assert "palw-manifest.json" in _one_line_error(result)


def test_library_without_palw_symbols_stops_the_session(pytester, tmp_path, cpu_build):
    """A libllama.so without the llama_palw_* exports (as an unpatched build; here the real
    libggml-base.so stands in) is refused before the binding loads it."""
    manifest = cpu_build
    lib_dir = tmp_path / "bin"
    lib_dir.mkdir()
    (lib_dir / "libllama.so").write_bytes((manifest.lib_dir / "libggml-base.so").read_bytes())
    data = json.loads(manifest.path.read_text())
    data["outputs"]["lib_dir"] = str(lib_dir)
    (tmp_path / "palw-manifest.json").write_text(json.dumps(data))
    result = _run(pytester, str(CONFORMANCE_DIR / "test_class_counts.py"),
                  f"--palw-lib={tmp_path / 'palw-manifest.json'}")
    assert result.ret == 7  # RuntimeLibraryError
    line = _one_line_error(result)
    assert "exports no llama_palw_* functions: it is not a PALW trace build" in line
    assert "palw build" in line


def test_upstream_library_stops_the_session(pytester):
    """The real thing: upstream 0.3.34 llama.cpp (`palw build --unpatched`, same sdist)."""
    from pytest_palw.builder import api

    upstream = api.build(variant="cpu", patched=False)
    result = _run(pytester, str(CONFORMANCE_DIR / "test_class_counts.py"), f"--palw-lib={upstream.path}")
    assert result.ret == 7  # RuntimeLibraryError
    assert "exports no llama_palw_* functions: it is not a PALW trace build" in _one_line_error(result)
    assert "passed" not in (result.stdout.str().splitlines() or [""])[-1]  # the line is said once, on stderr


@pytest.fixture(scope="module")
def _cpu_run(tmp_path_factory):
    """The module's one CPU-tier run: where it writes its certificate and, once made, its result."""
    return {"path": tmp_path_factory.mktemp("cert") / "certificate.json"}


@pytest.fixture
def cpu_certificate(_cpu_run, pytester):
    """One CPU-tier run of the whole suite, two xdist workers, certificate written. Made once per
    module, by the first test that asks (pytester is per test, so the module keeps the run in
    ``_cpu_run``); tried once, as a module-scoped fixture is: a run that timed out is not repeated."""
    path = _cpu_run["path"]
    if "result" not in _cpu_run:
        _cpu_run["result"] = None
        _cpu_run["result"] = _run(pytester, str(CONFORMANCE_DIR), "-n", "2", "-q", f"--palw-certificate={path}",
                                  timeout=1800)
    result = _cpu_run["result"]
    assert result is not None, "the module's CPU-tier run did not finish: see the first test that asked for it"
    assert path.is_file(), result.stdout.str()[-3000:] + result.stderr.str()[-2000:]
    return json.loads(path.read_text()), result


def test_certificate_validates_against_its_schema(cpu_certificate):
    document, _ = cpu_certificate
    validate(document)


def test_certificate_is_honest_about_the_gpu_tier(cpu_certificate):
    document, result = cpu_certificate
    verdict = document["verdict"]
    assert verdict["certified"] is False
    assert any("PINNED-tier case(s) not run: " in reason for reason in verdict["reasons"])
    # Every CPU-tier case runs on the synthetic tiny model (the observer's on its own gate control)
    cpu = [reason for reason in verdict["reasons"] if "CPU-tier" in reason]
    assert cpu == [], cpu
    assert document["summary"]["failed"] == 0, result.stdout.str()[-3000:]
    assert document["device"]["kind"] == "cpu"
    assert "not certified" in result.stdout.str()
    assert not any("partial run" in reason for reason in verdict["reasons"])  # the whole suite ran


@pytest.mark.parametrize("narrowing", [
    ["{suite}/test_class_counts.py"],
    ["{suite}", "-k", "class_count"],
    ["{suite}/test_class_counts.py::test_no_other_class"],
], ids=["one-module", "keyword", "node-id"])
def test_a_partial_run_is_never_certified(pytester, tmp_path, narrowing):
    """Passing cases of a narrowed run certify nothing: the verdict names what was left out."""
    path = tmp_path / "certificate.json"
    args = [arg.format(suite=CONFORMANCE_DIR) for arg in narrowing]
    result = _run(pytester, *args, "-n", "2", f"--palw-certificate={path}")
    document = json.loads(path.read_text())
    assert document["summary"]["failed"] == 0 and document["summary"]["passed"] >= 1, result.stdout.str()[-2000:]
    assert document["verdict"]["certified"] is False
    assert any(reason.startswith("partial run:") for reason in document["verdict"]["reasons"])


def test_certificate_records_discovery_and_inputs(cpu_certificate):
    document, _ = cpu_certificate
    assert document["discovery"]["launches"] == 361
    assert document["discovery"]["class_counts"] == {"q4_k": 216, "q6_k": 37, "attention_qk": 36,
                                                     "attention_softmax": 36, "attention_pv": 36}
    manifest = document["runtime"]["manifest"]
    assert manifest["inputs"]["seed_patch"]["sha256"] == (
        "3249774cbdc96a7fd0aa24ddd67c8b642c5ac9a60176c3e2ff496ef0371ebbb0")
    assert len(document["model"]["sha256"]) == 64
    assert document["fingerprints"]["reference"]


def test_certificate_merges_xdist_workers(cpu_certificate):
    document, _ = cpu_certificate
    assert set(document["workers"]) == {"controller", "gw0", "gw1"}
    ran = {case["worker"] for case in document["cases"] if case["outcome"] == "passed"}
    assert ran == {"gw0", "gw1"}
    assert len(document["cases"]) == document["summary"]["collected"] > 2000


def test_no_case_starts_before_the_load_probe_verdict(cpu_certificate):
    """The probe runs beside the workers' start, but its verdict comes before any case."""
    document, _ = cpu_certificate
    controller = document["workers"]["controller"]["timeline"]
    assert controller["preflight_start"] <= controller["probe_started"] <= controller["probe_done"]
    first_case = min(case["started_at"] for case in document["cases"] if case["started_at"])
    assert controller["probe_done"] <= first_case


def test_option_precedence(pytester, monkeypatch):
    pytester.makeini("[pytest]\npalw_token = 5\npalw_device = 3\n")
    pytester.makepyfile("""
        from pytest_palw.options import resolve
        def test_resolve(request):
            c = request.config
            print("RESOLVED", resolve(c, "palw_token"), resolve(c, "palw_device"), resolve(c, "palw_model"))
    """)
    monkeypatch.setenv("PALW_DEVICE", "1")
    result = pytester.runpytest_subprocess("-s", "--palw-token=7")
    result.stdout.fnmatch_lines(["*RESOLVED 7 1 profile:tiny*"])


def test_plugin_runs_without_xdist(pytester):
    """The xdist hook is optional: `-p no:xdist` (a plain, single-process run) must not
    abort with 'unknown hook pytest_testnodedown'."""
    result = _run(pytester, "-p", "no:xdist", str(CONFORMANCE_DIR / "test_class_counts.py"))
    assert "unknown hook" not in result.stdout.str() + result.stderr.str()
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert result.parseoutcomes()["passed"] >= 1


@pytest.mark.parametrize("value", ["two", "-1"])
def test_a_wrong_gpu_slot_count_is_a_usage_error_before_any_case(pytester, value):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess(f"--palw-gpu-slots={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--palw-gpu-slots '{value}' is not a count: give 0 (no limit) or more, e.g. 2" in result.stderr.str()
    assert "test_nothing" not in result.stdout.str()
