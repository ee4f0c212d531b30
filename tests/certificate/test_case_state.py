"""One case state: given once, when the verdict is joined; the document states it per case, the
page only displays it, and a document written before it is read into the same model (legacy.py)."""

from __future__ import annotations

import copy
import gzip
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_palw.certificate import Certificate, validate
from pytest_palw.certificate.consistency import inconsistencies
from pytest_palw.certificate.html import launch_cells, module_claims, render
from pytest_palw.certificate.inventory import Family, Inventory, parse_case_id
from pytest_palw.certificate.legacy import INDEX_CASES, current
from pytest_palw.certificate.state import CaseState, category_of
from pytest_palw.certificate.verdict import RunFacts
from pytest_palw.marks import stream_indices

DATA = Path(__file__).with_name("data")
I0, I1 = "conformance/test_a.py::test_i[0]", "conformance/test_a.py::test_i[1]"
G = "conformance/test_a.py::test_g"
INVENTORY = Inventory((Family("conformance/test_a.py::test_i", "cpu", ("0", "1")), Family(G, "gpu")))


def report(nodeid, when, outcome, body=None):
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, duration=0.01, start=None,
                           passed=outcome == "passed", failed=outcome == "failed", skipped=outcome == "skipped",
                           palw_body=body, longrepr=("f", 1, "Skipped: GPU tier: no CUDA"), longreprtext="E   boom")


def finished() -> Certificate:
    """I0 passed, I1 failed its call, G skipped in setup (pytest's own categories)."""
    certificate = Certificate(inventory=INVENTORY, run=RunFacts(exitstatus=1))
    reports = [report(I0, "setup", "passed"), report(I0, "call", "passed", body=I0), report(I0, "teardown", "passed"),
               report(I1, "setup", "passed"), report(I1, "call", "failed"), report(I1, "teardown", "passed"),
               report(G, "setup", "skipped"), report(G, "teardown", "passed")]
    for rep in reports:
        certificate.record(rep.nodeid, rep, INVENTORY.tiers[rep.nodeid], category_of(rep, None))
    certificate.finish(0.0)
    return certificate


def test_the_document_states_each_case_state_as_the_verdict_joined_it():
    document = finished().document
    assert {case["id"]: case["state"] for case in document["cases"]} == {I0: "passed", I1: "failed", G: "skipped"}
    assert "1 case(s) failed (first: conformance/test_a.py::test_i[1])" in document["verdict"]["reasons"]
    validate(json.loads(json.dumps(document)))


def test_the_schema_names_every_state():
    from pytest_palw.certificate import SCHEMA_PATH

    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["properties"]["cases"]["items"]["properties"]["state"]["enum"] == [state.value for state in CaseState]


def test_a_rejudged_verdict_keeps_the_states_it_joined():
    certificate = finished()
    states = certificate.states
    assert certificate.rejudge(3, "late")
    assert certificate.states is states and certificate.document["verdict"]["reasons"][-1].startswith(
        "pytest exited with status 3")


@pytest.mark.parametrize("when, outcome, status, category", [
    ("call", "passed", None, "passed"), ("setup", "passed", None, ""), ("call", "failed", None, "failed"),
    ("teardown", "failed", None, "error"), ("setup", "skipped", None, "skipped"),
    ("call", "failed", ("rerun", "R", "RERUN"), "rerun")])
def test_the_category_is_pytests_or_the_one_its_terminal_gives(when, outcome, status, category):
    assert category_of(report(G, when, outcome), status) == category


def test_each_state_has_one_tone_of_the_page():
    assert {state: state.tone for state in CaseState if state.tone != "passed"} == {
        CaseState.MISSING: "skipped", CaseState.CRASHED: "failed", CaseState.FAILED: "failed",
        CaseState.XFAIL: "failed", CaseState.SKIPPED: "skipped", CaseState.BODY_NOT_REACHED: "skipped"}


def test_the_page_displays_the_stated_state_not_its_own_reading():
    document = finished().document
    next(case for case in document["cases"] if case["id"] == I0)["state"] = CaseState.CRASHED.value  # pytest passed it
    rows = {row["module"]: row for row in module_claims(current(document))}
    assert (rows["test_a.py"]["passed"], rows["test_a.py"]["failed"], rows["test_a.py"]["skipped"]) == (0, 2, 1)
    assert "conformance/test_a.py::test_i[0]" in render(document).split('id="failures"')[1].split("</section>")[0]


def test_verify_names_a_stated_state_its_reports_do_not_give():
    document = finished().document
    next(case for case in document["cases"] if case["id"] == I0)["state"] = "failed"
    assert "cases[conformance/test_a.py::test_i[0]].state: states failed, its reports give passed" in (
        inconsistencies(document, None))


def old_h200() -> dict:
    return json.loads(gzip.decompress((DATA / "h200-certificate.json.gz").read_bytes()))


def test_a_document_written_before_the_states_is_read_into_the_same_model():
    old = old_h200()
    assert not any("state" in case or "launch" in case for case in old["cases"])
    before = copy.deepcopy(old)
    now = current(old)
    assert old == before, "the document read is not changed"
    assert Counter(case["state"] for case in now["cases"]) == {"passed": 3051, "skipped": 1}
    assert sum(1 for case in now["cases"] if case["launch"]) == sum(
        len(stream_indices(stream)) for _, stream in INDEX_CASES.values())
    assert current(now) is now, "a current document is read as it is"
    assert launch_cells(now) == launch_cells(old)


def test_a_version_1_case_is_read_by_its_outcome():
    """Schema v1 recorded no id, phases nor witness: what pytest said is all there is."""
    cases = [{"nodeid": f"conformance/test_a.py::test_f[{outcome}]", "tier": "cpu", "outcome": outcome,
              "duration_s": 0.0, "categories": [outcome]}
             for outcome in ("passed", "failed", "error", "skipped", "xfailed", "incomplete")]
    now = current({"schema": "pytest-palw.certificate", "version": 1, "cases": cases})
    assert [(case["id"], case["state"]) for case in now["cases"]] == [
        ("conformance/test_a.py::test_f[passed]", "body not witnessed"),
        ("conformance/test_a.py::test_f[failed]", "failed"), ("conformance/test_a.py::test_f[error]", "failed"),
        ("conformance/test_a.py::test_f[skipped]", "skipped"), ("conformance/test_a.py::test_f[xfailed]", "xfail"),
        ("conformance/test_a.py::test_f[incomplete]", "body not reached")]


@pytest.mark.parametrize("name, parts", [
    ("conformance/test_x.py::test_f[3]", ("test_x.py", "test_f", "3")),
    ("/abs/suite/test_x.py::test_f", ("test_x.py", "test_f", None)),
    ("test_x.py::test_f[a-b[c]]", ("test_x.py", "test_f", "a-b[c]")),
    ("conformance/test_x.py::test_f[a::b]", ("test_x.py", "test_f", "a::b"))])
def test_a_case_id_is_read_in_one_place(name, parts):
    assert parse_case_id(name) == parts
