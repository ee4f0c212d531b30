"""Does a certificate document agree with itself and with this installed suite? (`palw verify`,
and the check `palw certify` and `palw report` make before they speak for a file.)

The verdict is recomputed from the document's own cases and inventory with the verdict's own join
(verdict.judge): the inventory's ids expand to its stated sha256 and counts, each case's outcome is
the one its reports' categories give and its state the one its reports give (state.CaseState),
every required id passed as itself, and the stated verdict is the recomputed one. The suite digest
is compared with this installed suite's. Without a signature none of this proves who ran the suite
or that the cases ran as stated.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

from pytest_palw.certificate import OUTCOMES, CaseResult
from pytest_palw.certificate.inventory import expand, ids_digest
from pytest_palw.certificate.verdict import RunFacts, case_states, judge


@dataclasses.dataclass(frozen=True)
class StatedInventory:
    """The expected inventory as a certificate states it (Inventory.as_dict), for verdict.judge."""

    document: dict

    @cached_property
    def tiers(self) -> dict[str, str]:
        tiers = {}
        for family in self.document["functions"]:
            for case_id in expand({"functions": [family]}):
                tiers[case_id] = family["tier"]
        return tiers

    @cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.tiers))

    @cached_property
    def exempt(self) -> dict[str, str]:
        return {entry["id"]: entry["reason"] for entry in self.document["exempt"]}

    @cached_property
    def required(self) -> tuple[str, ...]:
        return tuple(case_id for case_id in self.ids if case_id not in self.exempt)


def stated_cases(document: dict) -> dict[str, CaseResult]:
    names = {field.name for field in dataclasses.fields(CaseResult)}
    return {entry["id"]: CaseResult(**{key: value for key, value in entry.items() if key in names})
            for entry in document["cases"]}


def outcome_of(case: CaseResult) -> str:
    """The outcome CaseResult.update gives a case with these report categories: the worst one."""
    counted = [category for category in case.categories if category in OUTCOMES]
    return min(counted, key=OUTCOMES.index) if counted else "incomplete"


def inconsistencies(document: dict, installed_suite: dict | None) -> list[str]:
    """Each way the document disagrees with itself, or with ``installed_suite`` (inventory.suite_digest()
    of this installation; None: not compared), one line each, naming the field."""
    problems = []
    stated_inventory = document.get("inventory")
    if not isinstance(stated_inventory, dict):
        return ["inventory: none stated, so nothing says which cases had to pass"]
    inventory = StatedInventory(stated_inventory)
    expanded = ids_digest(inventory.ids)
    if expanded != stated_inventory.get("sha256"):
        problems.append(f"inventory.sha256: states {stated_inventory.get('sha256')}, its functions expand to "
                        f"{len(inventory.ids)} ids of sha256 {expanded}")
    for key, count in (("size", len(inventory.ids)), ("required", len(inventory.required))):
        if stated_inventory.get(key) != count:
            problems.append(f"inventory.{key}: states {stated_inventory.get(key)}, its functions give {count}")
    cases = stated_cases(document)
    for case_id, case in sorted(cases.items()):
        if case.outcome != outcome_of(case):
            problems.append(f"cases[{case_id}].outcome: states {case.outcome}, its reports' categories "
                            f"({', '.join(case.categories) or 'none'}) give {outcome_of(case)}")
    states = case_states(inventory, cases)
    for entry in document["cases"]:
        if "state" in entry and entry["state"] != states[entry["id"]].value:  # a certificate older than states: none
            problems.append(f"cases[{entry['id']}].state: states {entry['state']}, its reports give "
                            f"{states[entry['id']].value}")
    stated = document.get("verdict") or {}
    recomputed = judge(inventory, cases, RunFacts(exitstatus=document.get("exit_status")), states)
    for key in ("expected", "passed", "exempt"):
        if stated.get(key) != recomputed[key]:
            problems.append(f"verdict.{key}: states {stated.get(key)}, its cases give {recomputed[key]}")
    if stated.get("certified") is True and recomputed["reasons"]:
        problems.append(f"verdict.certified: states CERTIFIED, its cases and inventory say not certified: "
                        f"{recomputed['reasons'][0]}")
    elif stated.get("certified") is True and stated.get("reasons"):
        problems.append("verdict.certified: states CERTIFIED with reasons against it")
    elif stated.get("certified") is not True and not stated.get("reasons"):
        problems.append("verdict.reasons: a verdict that is not certified states no reason")
    missing = [reason for reason in recomputed["reasons"] if reason not in (stated.get("reasons") or [])]
    if missing and stated.get("certified") is not True:
        problems.append(f"verdict.reasons: lacks what its cases give: {missing[0]}")
    if installed_suite is not None:
        suite = document.get("suite") or {}
        if suite.get("sha256") != installed_suite["sha256"]:
            problems.append(f"suite.sha256: states {suite.get('sha256')} (pytest-palw {suite.get('plugin_version')}), "
                            f"this installed suite is {installed_suite['sha256']} (pytest-palw "
                            f"{installed_suite['plugin_version']}): a certificate of another suite version")
    return problems
