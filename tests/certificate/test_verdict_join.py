"""The join, case by case: each way a required case can fall short gives its own reason, with its
count and first ids; a run where every required case passed and nothing else went wrong is the
only CERTIFIED one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_palw.certificate import CaseResult, Certificate
from pytest_palw.certificate.inventory import Family, Inventory
from pytest_palw.certificate.state import CaseState
from pytest_palw.certificate.verdict import RunFacts, judge

INVENTORY = Inventory((Family("conformance/test_a.py::test_i", "cpu", tuple(map(str, range(4)))),
                       Family("conformance/test_a.py::test_g", "gpu"),
                       Family("conformance/test_m.py::test_metal", "metal")))


def report(when, outcome, *, nodeid="conformance/test_a.py::test_g", body=None, longrepr=None):
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, duration=0.01, start=None,
                           failed=outcome == "failed", skipped=outcome == "skipped", palw_body=body,
                           longrepr=longrepr or ("f", 1, "Skipped: GPU tier: no CUDA"), longreprtext="E   boom")


def category(rep):
    return {"passed": "passed" if rep.when == "call" else "", "failed": "failed" if rep.when == "call" else "error",
            "skipped": "skipped"}.get(rep.outcome, rep.outcome)


def passing(case_id):
    return [report("setup", "passed", nodeid=case_id), report("call", "passed", nodeid=case_id, body=case_id),
            report("teardown", "passed", nodeid=case_id)]


def certificate_of(reports_by_case, **run):
    certificate = Certificate(inventory=INVENTORY, run=RunFacts(exitstatus=0, **run) if "exitstatus" not in run
                              else RunFacts(**run))
    for case_id, reports in reports_by_case.items():
        tier = INVENTORY.tiers.get(case_id)
        for rep in reports:
            certificate.record(case_id, rep, tier, category(rep))
    return certificate


def all_passing(**changes):
    cases = {case_id: passing(case_id) for case_id in INVENTORY.required}
    cases.update(changes)
    return cases


def test_every_required_case_passing_is_certified():
    verdict = judge(INVENTORY, certificate_of(all_passing()).cases, RunFacts(exitstatus=0))
    assert verdict == {"certified": True, "reasons": [], "expected": 5, "passed": 5, "exempt": 1}


G = "conformance/test_a.py::test_g"


@pytest.mark.parametrize("reports, state, reason", [
    ([], "missing", "1 of 5 expected case(s) never reported (first: conformance/test_a.py::test_g)"),
    ([report("setup", "passed")], "body not reached", "1 case(s) whose body never ran to its end"),
    ([report("setup", "passed"), report("call", "passed"), report("teardown", "passed")], "body not witnessed",
     "whose body never ran to its end"),
    ([report("setup", "passed"), report("call", "passed", body="conformance/test_a.py::test_i[0]"),
      report("teardown", "passed")], "body not witnessed", "whose body never ran to its end"),
    ([report("setup", "passed"), report("call", "passed", body=G)], "incomplete",
     "1 case(s) started and never finished"),
    ([report("setup", "skipped")], "skipped", "1 GPU-tier case(s) not run: no CUDA"),
    ([report("setup", "passed"), report("call", "failed", body=None)], "failed", "1 case(s) failed (first: " + G),
    ([report("setup", "passed"), report("call", "passed", body=G), report("teardown", "failed")], "failed",
     "1 case(s) failed"),
    ([report("???", "failed", longrepr="worker 'gw0' crashed while running")], "crashed",
     "1 case(s) crashed their worker"),
    ([report("setup", "passed"), report("call", "rerun"), report("call", "passed", body=G),
      report("teardown", "passed")], "unknown", "reported an outcome pytest does not name (rerun)"),
], ids=["missing", "setup-only", "no-witness", "other-function", "no-teardown", "skipped", "failed",
        "teardown-error", "crashed", "rerun"])
def test_each_way_short_of_passing_is_its_own_reason(reports, state, reason):
    cases = all_passing(**{G: reports})
    if not reports:
        del cases[G]
    certificate = certificate_of(cases)
    assert CaseState.of(certificate.cases.get(G), G) == state
    verdict = judge(INVENTORY, certificate.cases, RunFacts(exitstatus=0))
    assert verdict["certified"] is False and verdict["passed"] == 4
    assert any(reason in line for line in verdict["reasons"]), verdict["reasons"]


def test_xfail_is_never_a_pass():
    xfailed = [report("setup", "passed"), report("call", "skipped", body=None), report("teardown", "passed")]
    certificate = certificate_of(all_passing(**{G: xfailed}))
    certificate.cases[G].categories = ["xfailed"]
    verdict = judge(INVENTORY, certificate.cases, RunFacts(exitstatus=0))
    assert any("marked xfail" in line for line in verdict["reasons"])


def test_the_exempt_case_may_skip_but_not_fail():
    metal = "conformance/test_m.py::test_metal"
    skipped = certificate_of(all_passing(**{metal: [report("setup", "skipped", nodeid=metal)]}))
    assert judge(INVENTORY, skipped.cases, RunFacts(exitstatus=0))["certified"] is True
    failed = certificate_of(all_passing(**{metal: [report("setup", "passed", nodeid=metal),
                                                   report("call", "failed", nodeid=metal)]}))
    assert "1 case(s) failed (first: conformance/test_m.py::test_metal)" in judge(
        INVENTORY, failed.cases, RunFacts(exitstatus=0))["reasons"]


@pytest.mark.parametrize("run, reason", [
    (RunFacts(exitstatus=1), "pytest exited with status 1 (TESTS_FAILED), not 0"),
    (RunFacts(exitstatus=3), "pytest exited with status 3 (INTERNAL_ERROR), not 0"),
    (RunFacts(exitstatus=7), "pytest exited with status 7 (set by a plugin or pytest.exit), not 0"),
    (RunFacts(exitstatus=None), "pytest never reached the end of the session"),
    (RunFacts(exitstatus=0, interrupted="stopping after 1 failures"), "the run was interrupted (stopping"),
    (RunFacts(exitstatus=0, crashed_workers=["gw1 crashed: Not properly terminated"]), "worker gw1 crashed"),
    (RunFacts(exitstatus=0, conflicts=["device: gw0 has 1, gw1 has 2"]), "workers disagree on device"),
    (RunFacts(exitstatus=0, other=["--setup-plan: fixtures were planned"]), "--setup-plan"),
])
def test_the_run_as_a_whole_can_refuse_a_complete_pass(run, reason):
    verdict = judge(INVENTORY, certificate_of(all_passing()).cases, run)
    assert verdict["certified"] is False and verdict["passed"] == 5
    assert any(line.startswith(reason) for line in verdict["reasons"]), verdict["reasons"]


def test_no_inventory_is_never_certified():
    verdict = judge(None, {}, RunFacts(exitstatus=0))
    assert verdict["certified"] is False and "no expected inventory" in verdict["reasons"][0]


def test_reasons_name_the_first_ids_and_the_count():
    cases = all_passing()
    for index in range(4):
        del cases[f"conformance/test_a.py::test_i[{index}]"]
    verdict = judge(INVENTORY, certificate_of(cases).cases, RunFacts(exitstatus=0))
    assert verdict["reasons"] == ["4 of 5 expected case(s) never reported (first: conformance/test_a.py::test_i[0], "
                                  "conformance/test_a.py::test_i[1], conformance/test_a.py::test_i[2], ...): not "
                                  "collected, deselected or never run"]


def test_workers_that_disagree_on_a_fact_are_a_conflict():
    certificate = Certificate(inventory=INVENTORY)
    base = {"device": {"name": "H200", "cc": 900}, "kernel_digest": {"sha256": "aa"}, "fingerprints": {"v2": "x"},
            "deselected": 0, "worker": {"pid": 1}}
    certificate.merge_facts(base, "gw0")
    certificate.merge_facts({**base, "worker": {"pid": 2}, "deselected": 3}, "gw1")  # per-process facts differ
    assert certificate.run.conflicts == []
    certificate.merge_facts({**base, "kernel_digest": {"sha256": "bb"}, "fingerprints": {"v2": "y"}}, "gw2")
    assert certificate.run.conflicts == ['kernel_digest: gw0 has {"sha256": "aa"}, gw2 has {"sha256": "bb"}',
                                         'fingerprints.v2: gw0 has "x", gw2 has "y"']
    assert set(certificate.workers) == {"gw0", "gw1", "gw2"}


def test_a_case_result_keeps_the_worst_outcome_of_each_phase():
    case = CaseResult("c", "c", "cpu")
    for outcome in ("passed", "failed", "passed"):
        case.update(report("call", outcome), category(report("call", outcome)))
    assert case.phases == {"call": "failed"} and case.outcome == "failed"
