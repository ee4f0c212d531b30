"""The suite fails on broken runtimes: every mutant's anchor exists, and the CPU mutants are killed.

The GPU mutants (`palw mutants --tier gpu`) rebuild a CUDA runtime and need the device; here we
check that each still applies to the sources it mutates, so a drifting runtime is noticed.
"""

import subprocess
import sys

import pytest

from pytest_palw.mutants import MUTANTS
from pytest_palw.paths import NATIVE_RUNTIME_DIR, SEED_PATCH


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
    text = (NATIVE_RUNTIME_DIR / mutant.path).read_text() if mutant.root == "native" else _patched_lines(mutant.path)
    assert text.count(mutant.old) == 1, f"{mutant.name}: anchor not unique in {mutant.path}"
    assert mutant.old != mutant.new and mutant.must_fail


def test_cpu_mutants_are_killed(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pytest_palw.cli", "mutants", "--tier", "cpu",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=1200)
    cpu = [m for m in MUTANTS if m.tier == "cpu"]
    assert f"{len(cpu)} of {len(cpu)} cpu mutants killed" in result.stdout, result.stdout + result.stderr[-3000:]
    assert result.returncode == 0
    assert {m.root for m in cpu} == {"native", "source"}  # the host codec and the patched tree
    # Afterwards the private build is the unmutated runtime again: the loader cases pass.
    from pytest_palw.build import api
    from pytest_palw.paths import CONFORMANCE_DIR, cache_dir

    manifest = api.find_manifest("cpu", build_root=cache_dir("mutant-builds"))
    result = subprocess.run([sys.executable, "-m", "pytest", str(CONFORMANCE_DIR / "test_qwen35moe.py"), "-q",
                             "-p", "no:cacheprovider", f"--palw-lib={manifest.path}"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "6 passed" in result.stdout, result.stdout[-3000:]


def test_a_leftover_mutation_is_noticed(tmp_path):
    """A run killed mid-mutation leaves an edit in the private build; the next run must see it."""
    from pytest_palw.mutants import is_pristine

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
