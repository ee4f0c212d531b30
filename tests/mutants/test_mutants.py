"""The suite fails on broken runtimes and fixtures: every mutant's anchor exists, the judging rules
hold, and the CPU mutants are killed by the CPU tier.

The GPU mutants (`palw mutants --tier gpu`) rebuild a CUDA runtime and need the device; here we
check that each still applies to the sources it mutates, so a drifting runtime is noticed.
"""

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_palw.fixtures.models.profiles import PROFILES
from pytest_palw.mutants.catalog import MUTANTS, Mutant
from pytest_palw.mutants.engine import TierRun, cpu_copy, judge, score
from pytest_palw.paths import FIXTURES_DIR, NATIVE_RUNTIME_DIR, SEED_PATCH

ROOTS = {"native": NATIVE_RUNTIME_DIR, "fixtures": FIXTURES_DIR}


def _patched_lines(path: str) -> str:
    """The lines the seed patch adds to ``path``, without their '+' (source mutants' anchors)."""
    added, current = [], None
    for line in SEED_PATCH.read_text().splitlines():
        if line.startswith("+++ "):
            current = line[len("+++ b/"):]
        elif line.startswith("+") and current == path:
            added.append(line[1:])
    return "\n".join(added)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_anchor_occurs_once(mutant):
    text = _patched_lines(mutant.path) if mutant.root == "source" else (ROOTS[mutant.root] / mutant.path).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.name}: anchor not unique in {mutant.path}"
    assert mutant.old != mutant.new and mutant.tier in ("cpu", "gpu")


def test_every_cpu_protection_has_a_mutant():
    """Issue 13's CPU-checkable protections: host codec, generator rule, loader fixes, refusals."""
    cpu = [m for m in MUTANTS if m.tier == "cpu"]
    assert {m.root for m in cpu} == {"native", "fixtures", "source"}
    assert any(m.root == "fixtures" and m.path == "models/profiles.py" for m in cpu)
    # the refusal a CPU runtime gives a valid request (no backend exposes the PALW procs)
    assert any(m.path == "src/llama-context.cpp" and "get_api_fn == nullptr" in m.old for m in cpu)


def _mutant(name="m"):
    return Mutant("cpu", name, "breaks", "native", "x", "a", "b")


def _run(returncode, failed, label="run"):
    return TierRun(label, 1.0, returncode, failed, Path("/dev/null"), "last line")


def test_only_new_failures_kill():
    baseline = _run(1, {"conformance/test_a.py::test_flaky"})
    assert judge(_mutant(), _run(1, {"conformance/test_a.py::test_flaky"}), baseline, 1)["verdict"] == "survived"
    killed = judge(_mutant(), _run(1, {"conformance/test_a.py::test_flaky", "tests/x.py::test_b"}), baseline, 1)
    assert (killed["verdict"], killed["new_failures"]) == ("killed", ["tests/x.py::test_b"])


def test_a_timeout_is_inconclusive_not_killed():
    result = judge(_mutant(), _run(None, None), _run(0, set()), 1)
    assert result["verdict"] == "inconclusive" and result["new_failures"] == []


def test_a_session_that_stops_kills():
    result = judge(_mutant(), _run(4, set()), _run(0, set()), 1)
    assert result["verdict"] == "killed" and "exit code 4" in result["new_failures"][0]


def test_a_run_stopped_by_the_baselines_failures_alone_is_inconclusive():
    """--maxfail counts reports, not cases: a case failing in setup and teardown counts twice, so a
    stopped run may hold the baseline's failures only; the cases after the stop never ran."""
    baseline = _run(1, {"conformance/test_a.py::test_flaky"})
    stopped = replace(_run(2, {"conformance/test_a.py::test_flaky"}), stopped=True)  # xdist: interrupted
    result = judge(_mutant(), stopped, baseline, 1)
    assert result["verdict"] == "inconclusive" and "--maxfail" in result["note"]
    killed = judge(_mutant(), replace(stopped, failed={"tests/x.py::test_b"}), baseline, 1)
    assert (killed["verdict"], killed["new_failures"]) == ("killed", ["tests/x.py::test_b"])
    crashed = judge(_mutant(), _run(2, {"conformance/test_a.py::test_flaky"}), baseline, 1)  # not stopped
    assert crashed["verdict"] == "killed" and "exit code 2" in crashed["new_failures"][0]


FAILING_SUITE = "import pytest\n\n\n@pytest.mark.parametrize('i', range(40))\ndef test_fails(i):\n    assert i < 0\n"


def test_a_tier_run_stops_at_maxfail_under_xdist_and_says_so(pytester, tmp_path, monkeypatch):
    """What a mutant's run relies on: with -n 2 and --maxfail=1, xdist stops the session early, the
    controller's report lists the failures seen (at least one) and says it stopped."""
    from pytest_palw.mutants import plugin

    pytester.makepyfile(test_failing=FAILING_SUITE)
    report = tmp_path / "report.json"
    for key in [key for key in os.environ if key.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv(plugin.REPORT_ENV, str(report))
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", plugin.__name__, "-n", "2",
                                           "--maxfail=1", timeout=300)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()[-2000:]  # xdist's stop
    assert "stopping after 1 failures" in result.stdout.str()
    written = json.loads(report.read_text())
    assert written["stopped"] is True and 1 <= len(written["failed"]) < 40, written
    assert all(case.startswith("test_failing.py::test_fails[") for case in written["failed"])


BIG_MODULE = """import pytest


@pytest.mark.parametrize("i", range(30))
def test_each(i):
    pass


def test_single():
    pass
"""
SMALL_MODULE = """import pytest


def test_one():
    pass


class TestTwo:
    @pytest.mark.parametrize("j", range(2))
    def test_two(self, j):
        pass
"""


@pytest.mark.parametrize("in_a_tier_run", [True, False], ids=["tier-run", "plain"])
def test_a_tier_run_takes_the_modules_and_functions_of_few_cases_first(pytester, tmp_path, monkeypatch,
                                                                         in_a_tier_run):
    """A mutant's run stops at its first new failure: the modules of few cases (the refusals, the
    loader, the codec, the seed tools), and in a module the functions of few cases, run before those
    of one case per launch; a module's cases stay together (its fixtures are made once) and each
    function's cases keep their order. Outside a tier run the plugin leaves the order alone."""
    from pytest_palw.mutants import plugin

    pytester.makepyfile(test_a_big=BIG_MODULE, test_b_small=SMALL_MODULE)
    if in_a_tier_run:
        monkeypatch.setenv(plugin.REPORT_ENV, str(tmp_path / "report.json"))
    else:
        monkeypatch.delenv(plugin.REPORT_ENV, raising=False)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", "-p", plugin.__name__)
    ids = [line for line in result.outlines if line.startswith("test_")]
    big = [f"test_a_big.py::test_each[{i}]" for i in range(30)]
    small = ["test_b_small.py::test_one", "test_b_small.py::TestTwo::test_two[0]",
             "test_b_small.py::TestTwo::test_two[1]"]
    if not in_a_tier_run:
        assert ids == [*big, "test_a_big.py::test_single", *small]
        return
    assert ids == [*small, "test_a_big.py::test_single", *big]
    # Counted after -k/-m: the cases that run (the tier's -m leaves most of a GPU-heavy module out).
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", "-p", plugin.__name__,
                                           "-k", "not test_each")
    assert [line for line in result.outlines if line.startswith("test_")] == ["test_a_big.py::test_single", *small]


def test_score_leaves_inconclusive_out():
    results = [{"verdict": v} for v in ("killed", "killed", "survived", "inconclusive")]
    assert score(results, "cpu") == {"tier": "cpu", "total": 4, "killed": 2, "survived": 1, "inconclusive": 1,
                                     "score": round(2 / 3, 4)}


# What a process of a tier run sees of the fixtures (a conftest: loaded after every -p plugin).
_SEEN_CONFTEST = """
import inspect, json, os
from pathlib import Path

def pytest_configure(config):
    from pytest_palw import paths
    from pytest_palw.fixtures.models import model_cache, profiles
    who = getattr(config, "workerinput", {}).get("workerid", "controller")
    seen = {"profiles": profiles.__file__, "mutated": os.environ["PROBE_NEW"] in inspect.getsource(profiles),
            "fixtures_dir": str(paths.FIXTURES_DIR), "models_dir": str(model_cache.models_dir())}
    Path(os.environ["PROBE_OUT"], who + ".json").write_text(json.dumps(seen))
"""


def test_a_fixtures_mutant_is_what_the_run_imports(pytester, tmp_path, monkeypatch):
    """The tier's processes (the controller, each xdist worker) import the mutated copy of fixtures/,
    its subpackages included, find the goldens in it and cache models privately."""
    mutant = next(m for m in MUTANTS if m.root == "fixtures")
    pytester.makeconftest(_SEEN_CONFTEST)
    pytester.makepyfile(test_probe="def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    seen = tmp_path / "seen"
    seen.mkdir()
    for key in [key for key in os.environ if key.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT"))]:
        monkeypatch.delenv(key)
    with cpu_copy(mutant, {"PROBE_OUT": str(seen), "PROBE_NEW": mutant.new}, []) as (env, options):
        assert options == []  # the plugin of every tier run does it (engine.run_tier's -p)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "pytest_palw.mutants.plugin",
                                               "-n", "2", "test_probe.py", timeout=300)
        result.assert_outcomes(passed=2)
        copy = env["PALW_MUTANT_FIXTURES"]
        expected = {"profiles": str(Path(copy, mutant.path)), "mutated": True, "fixtures_dir": copy,
                    "models_dir": env["PALW_MUTANT_MODELS"]}
        by_process = {path.stem: json.loads(path.read_text()) for path in seen.glob("*.json")}
    assert by_process == dict.fromkeys(["controller", "gw0", "gw1"], expected)
    assert mutant.old in (FIXTURES_DIR / mutant.path).read_text()  # ours untouched


def test_cpu_mutants_are_killed(tmp_path, run_palw, pytester, shared_palw_cache):
    verdicts = tmp_path / "verdicts.json"
    # One worker a tier run: the test command already runs one xdist worker per core, and a run that
    # stops at its first new failure is mostly start-up, which a second worker only doubles.
    result = run_palw("mutants", "--tier", "cpu", "--workers", "1", "--out", tmp_path, "--json", verdicts,
                      timeout=2400)
    assert verdicts.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(verdicts.read_text())
    cpu = [m.name for m in MUTANTS if m.tier == "cpu"]
    by_name = {r["mutant"]: r for r in report["mutants"]}
    assert sorted(by_name) == sorted(cpu)
    assert {name: r["verdict"] for name, r in by_name.items()} == dict.fromkeys(cpu, "killed"), result.stdout[-4000:]
    # Killed by a case that ran on the mutated runtime, never by a session that refused to start
    # (the damage check of a rebuilt library the manifest did not record: a kill for no claim).
    by_case = {name: [failure for failure in r["new_failures"] if not failure.startswith("<session stopped")]
               for name, r in by_name.items()}
    assert all(by_case.values()), {name: r["new_failures"] for name, r in by_name.items() if not by_case[name]}
    assert result.returncode == 0 and "cpu mutation score" in result.stdout
    # Afterwards the private build is the unmutated runtime again: the loader cases pass.
    from pytest_palw.builder import api
    from pytest_palw.paths import CONFORMANCE_DIR, cache_dir

    manifest = api.find_manifest("cpu", build_root=cache_dir("mutant-builds"))
    loaders = pytester.runpytest_subprocess(str(CONFORMANCE_DIR / "test_qwen35moe.py"), "-q", "-p", "no:cacheprovider",
                                            f"--palw-lib={manifest.path}", timeout=600)
    loaders.assert_outcomes(passed=6)


def test_the_generators_rule_is_caught_by_the_independent_oracle(pytester, monkeypatch, shared_palw_cache):
    """Not only by the cases that share the rule: llama.cpp's own quantizer (the unmutated CPU build)
    disagrees with the mutated generator, for every profile. (A mutant's tier run stops at its first
    new failure, so which case kills it there is not this claim.)"""
    from pytest_palw.mutants import plugin

    rule = next(m for m in MUTANTS if m.root == "fixtures" and m.path == "models/profiles.py")
    oracle = Path(__file__).parents[1] / "fixtures" / "oracles" / "test_q4_k_m_oracle.py"
    outer = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT"))}
    with cpu_copy(rule, outer, []) as (env, _):
        for key in (plugin.FIXTURES_ENV, plugin.MODELS_ENV):
            monkeypatch.setenv(key, env[key])
        result = pytester.runpytest_subprocess(str(oracle), "-q", "-p", "no:cacheprovider", "-p", plugin.__name__,
                                               timeout=900)
    failed = sorted(line.split()[1] for line in result.outlines if line.startswith("FAILED "))
    generator = [case for case in failed if "::test_the_generator_writes_the_types_llama_cpp_chooses[" in case]
    assert len(generator) == len(PROFILES), result.stdout.str()[-3000:]  # every profile's file
    assert all("tests/fixtures/oracles/test_q4_k_m_oracle.py::" in case for case in failed), failed
    assert "disagree with llama.cpp's Q4_K_M" in result.stdout.str()


def test_a_leftover_mutation_is_noticed(tmp_path):
    """A run killed mid-mutation leaves an edit in the private build; the next run must see it."""
    from pytest_palw.mutants.engine import is_pristine

    source = [m for m in MUTANTS if m.tier == "cpu" and m.root == "source"]
    for mutant in source:  # a tree holding just the anchors
        path = tmp_path / mutant.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(mutant.old + "\n")
    assert is_pristine(tmp_path)
    first = tmp_path / source[0].path
    first.write_text(first.read_text().replace(source[0].old, source[0].new))
    assert not is_pristine(tmp_path)
