"""A brought runtime's pinned cc, observed by the pin probe (its decision from the probes' results), and
its ABI copy made from the sources a user names, once, so that an offline machine certifies it."""

from __future__ import annotations

import shutil
import tarfile

import pytest

from pytest_palw.certificate.facts import brought_statement
from pytest_palw.errors import SourceError
from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.preflight.resolve import Handover
from pytest_palw.probes.pin_probe import PIN_CANDIDATES, pinned_from

# What pin_probe.main prints for a child (the keys pinned_from reads), as a runtime answers.
COMMITTED = {"finalize": "OK", "records": V2_COUNT, "decode": 0, "approved": V2_COUNT, "accepted": V2_COUNT,
             "faults": []}
REFUSED = {"finalize": "INVALID_ARGUMENT", "records": 0, "decode": -1, "approved": 1, "accepted": 0,
           "faults": [["INVALID_ARGUMENT", "UNSUPPORTED_DISPATCH"]]}


def child(base: dict, reported_cc: int, sm_arch: int) -> dict:
    return {**base, "reported_cc": reported_cc, "sm_arch": sm_arch}


def test_a_trace_that_commits_on_this_device_observes_its_cc():
    observation = pinned_from(900, [child(COMMITTED, 0, 90)])
    assert observation["pinned_cc"] == 900
    assert "committed its 361 records" in observation["observed_by"] and "sm_90" in observation["observed_by"]


def test_kernel_info_of_another_architecture_is_not_this_devices_pin():
    # committed, but kernel info names another architecture than the device's: nothing is observed
    observation = pinned_from(900, [child(COMMITTED, 0, 89)])
    assert observation["pinned_cc"] is None and "neither committed nor failed closed" in observation["why"]


def test_a_trace_refused_here_finds_the_pin_among_the_candidates_told():
    probes = [child(REFUSED, 0, 90), child(REFUSED, 870, 87), child(COMMITTED, 890, 89)]
    observation = pinned_from(900, probes)
    assert observation["pinned_cc"] == 890 and "told cc 890" in observation["observed_by"]
    assert observation["probes"] == probes


def test_nothing_observed_when_no_candidate_commits_or_the_trace_breaks_otherwise():
    none_commit = pinned_from(900, [child(REFUSED, 0, 90), child(REFUSED, 890, 89)])
    assert none_commit["pinned_cc"] is None and "[890]" in none_commit["why"]
    broken = pinned_from(900, [{"reported_cc": 0, "error": "the pin probe child exited -11"}])
    assert broken["pinned_cc"] is None and "neither committed nor failed closed" in broken["why"]
    # a candidate that "commits" with the device's own kernel info was not told that cc: not its pin
    untold = pinned_from(900, [child(REFUSED, 0, 90), child(COMMITTED, 890, 90)])
    assert untold["pinned_cc"] is None


def test_the_candidates_are_ggml_ccs_newest_first():
    assert list(PIN_CANDIDATES) == sorted(PIN_CANDIDATES, reverse=True)
    assert all(cc % 10 == 0 for cc in PIN_CANDIDATES) and 890 in PIN_CANDIDATES and 900 in PIN_CANDIDATES


def test_the_observation_is_handed_to_every_worker_and_stated():
    observation = pinned_from(900, [child(COMMITTED, 0, 90)])
    handed = Handover.from_wire(Handover("/opt/vendor/lib", None, None, observation).to_wire())
    assert handed.pin == observation and Handover.from_wire({}).pin is None

    class Build:  # brought_statement reads these two fields of a RuntimeBuild
        observed = {"variant": "cuda", "tools_looked_in": ["/opt/vendor/lib"]}

    stated = brought_statement(Build(), observation)
    assert stated["pin"] == {"cc": 900, "from": f"observed: {observation['observed_by']}"}
    assert stated["observed"]["pinned_cc"] == observation
    not_observed = brought_statement(Build(), pinned_from(900, [child(REFUSED, 0, 90)]))
    assert not_observed["pin"] is None and not_observed["observed"]["pinned_cc"]["pinned_cc"] is None
    assert brought_statement(Build())["pin"] is None  # a CPU runtime: no probe, no pin


# -- the ABI copy, from the sources named (offline) ----------------------------------------------------

def test_the_abi_copy_is_made_from_a_named_archive_once_then_needs_no_source(sdist_source, private_cache,
                                                                             run_palw, tmp_path):
    from pytest_palw.runtime.brought import suite_abi_dir

    sdist = shutil.copy2(sdist_source.ref.path, tmp_path / "sdist.tar.gz")  # the private cache holds no sdist
    archive = tmp_path / "palw-source.tar.gz"
    made = run_palw("source", "--source", sdist, "--output", archive)
    assert made.returncode == 0, made.stderr[-2000:]

    headers, binding = suite_abi_dir(archive)
    assert "llama_palw_cuda_trace_attach_v2" in (headers / "include" / "llama.h").read_text()  # patched once
    assert (binding / "llama_cpp" / "__init__.py").is_file()
    assert (headers / "tests" / "test-backend-ops.cpp").is_file()
    # Made: no process needs a source again (no sdist in this cache, none downloaded).
    assert suite_abi_dir(None) == (headers, binding)
    assert not (private_cache / "sources" / "llama_cpp_python-0.3.34.tar.gz").exists()
    # A complete copy is never replaced, even with the source named again: every xdist worker of a
    # `palw certify --source` run calls this while others import llama_cpp from the copy (on the
    # device a replacement under a reader cost a case "No module named llama_cpp._ctypes_extensions").
    inode = headers.stat().st_ino
    assert suite_abi_dir(archive) == (headers, binding) and headers.stat().st_ino == inode

    # The sdist itself, named, makes the same copy (same key: the sdist and the patch set).
    shutil.rmtree(headers)
    assert suite_abi_dir(sdist) == (headers, binding)
    assert "llama_palw_cuda_trace_attach_v2" in (headers / "include" / "llama.h").read_text()


def test_a_source_that_is_not_the_sdist_is_refused_in_one_line(private_cache, tmp_path):
    from pytest_palw.runtime.brought import suite_abi_dir

    other = tmp_path / "other.tar.gz"
    with tarfile.open(other, "w:gz") as archive:
        archive.add(__file__, arcname="x/README")
    with pytest.raises(SourceError) as refused:
        suite_abi_dir(other)
    assert "\n" not in str(refused.value) and "palw source" in str(refused.value)
