"""The verdict is a join: every case the inventory requires against what was reported about it.

CERTIFIED only when every required case has a passing setup, a passing call whose function body
ran to its end (the plugin's witness, not only pytest's outcome), and a passing teardown; no case
of the suite failed; pytest itself exited 0; no worker crashed; the workers agree on the facts;
and nothing else stood in the way (a recording run, an interrupted one, an inventory that could not
be read). Every reason is listed, each with its count and the first ids of its kind.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from pytest_palw.certificate.state import CaseState

FIRST = 3  # ids named per reason


@dataclass
class RunFacts:
    """What the controller knows of the run as a whole, beside the case reports."""

    exitstatus: int | None = None  # pytest's, after every plugin's sessionfinish; None: not finished
    interrupted: str | None = None  # why pytest stopped early (Ctrl-C, -x, pytest.exit)
    crashed_workers: list[str] = field(default_factory=list)  # "gw1: <error>"
    conflicts: list[str] = field(default_factory=list)  # facts the workers disagree on
    other: list[str] = field(default_factory=list)  # recording goldens, run mode, inventory, late errors
    selection: list[str] = field(default_factory=list)  # why cases may be missing (-k, node ids): named with them


def case_states(inventory, cases: dict) -> dict[str, CaseState]:
    """Each case's state, given once: every reported case, and every required case never reported."""
    states = {case_id: CaseState.of(case, case_id) for case_id, case in cases.items()}
    for case_id in inventory.required if inventory is not None else ():
        states.setdefault(case_id, CaseState.MISSING)
    return states


def _first(ids: list[str]) -> str:
    shown = ", ".join(ids[:FIRST])
    return f"{shown}, ..." if len(ids) > FIRST else shown


def judge(inventory, cases: dict, run: RunFacts, states: dict[str, CaseState] | None = None) -> dict:
    """The verdict of a run: ``cases`` maps the inventory's case ids to their CaseResult, ``states``
    their case_states (None: given here)."""
    if states is None:
        states = case_states(inventory, cases)
    reasons: list[str] = []
    if inventory is None:
        required: tuple[str, ...] = ()
        reasons.append("no expected inventory: nothing says which cases had to pass")
    else:
        required = inventory.required
    by_state: dict[CaseState, list[str]] = {}
    for case_id in required:
        by_state.setdefault(states[case_id], []).append(case_id)
    passed = len(by_state.get(CaseState.PASSED, []))
    total = len(required)

    missing = by_state.get(CaseState.MISSING, [])
    if missing:
        reasons.append(f"{len(missing)} of {total} expected case(s) never reported (first: {_first(missing)}): "
                       "not collected, deselected or never run")
        reasons += run.selection
    if by_state.get(CaseState.CRASHED):
        ids = by_state[CaseState.CRASHED]
        reasons.append(f"{len(ids)} case(s) crashed their worker (first: {_first(ids)})")
    expected_ids = set(inventory.ids) if inventory is not None else set()
    required_ids = set(required)
    failed = list(by_state.get(CaseState.FAILED, []))
    failed += sorted(case_id for case_id in cases  # exempt and outside the inventory
                     if case_id not in required_ids and states[case_id] in (CaseState.FAILED, CaseState.CRASHED))
    if failed:
        reasons.append(f"{len(failed)} case(s) failed (first: {_first(failed)})")
    outside = sorted(set(cases) - expected_ids)
    if outside:
        reasons.append(f"{len(outside)} case(s) of the suite are not in the expected inventory (first: "
                       f"{_first(outside)}): a plugin or option added them")
    if by_state.get(CaseState.XFAIL):
        ids = by_state[CaseState.XFAIL]
        reasons.append(f"{len(ids)} case(s) marked xfail (first: {_first(ids)}): a certified "
                       "claim cannot be expected to fail")
    if by_state.get(CaseState.UNKNOWN):
        ids = by_state[CaseState.UNKNOWN]
        names = sorted({name for case_id in ids for name in cases[case_id].unknown})
        reasons.append(f"{len(ids)} case(s) reported an outcome pytest does not name ({', '.join(names)}) "
                       f"(first: {_first(ids)})")
    skipped: Counter = Counter()
    for case_id in by_state.get(CaseState.SKIPPED, []):
        case = cases[case_id]
        skipped[(inventory.tiers[case_id], case.reason or "no reason given")] += 1
    for (tier, reason), count in sorted(skipped.items()):
        reasons.append(f"{count} {tier.upper()}-tier case(s) not run: {reason}")
    if by_state.get(CaseState.RETRIED):
        ids = by_state[CaseState.RETRIED]
        shown = [f"{case_id} (entered {_times(cases[case_id].entries)}, raised "
                 f"{', '.join(cases[case_id].raised) or 'nothing'})" for case_id in ids]
        reasons.append(f"{len(ids)} case(s) whose body was entered more than once or raised in its call (first: "
                       f"{_first(shown)}): a retry (flaky, pytest-rerunfailures, pytest-retry, a conftest loop) or "
                       "a swallowed exception; a case that failed once is not certified")
    if by_state.get(CaseState.SWAPPED):
        ids = by_state[CaseState.SWAPPED]
        names = sorted({name for case_id in ids for name in cases[case_id].swapped})
        reasons.append(f"{len(ids)} case(s) received a fixture value the plugin's fixture did not return "
                       f"({', '.join(names)}) (first: {_first(ids)}): a conftest or plugin swapped it "
                       "(pytest_fixture_setup, item.funcargs); remove it to certify")
    ids = by_state.get(CaseState.BODY_NOT_REACHED, []) + by_state.get(CaseState.BODY_NOT_WITNESSED, [])
    if ids:
        ids = sorted(ids)
        reasons.append(f"{len(ids)} case(s) whose body never ran to its end (first: {_first(ids)}): setup only "
                       "(--setup-only, --setup-plan) or a call that did not run the suite's function")
    if by_state.get(CaseState.INCOMPLETE):
        ids = by_state[CaseState.INCOMPLETE]
        reasons.append(f"{len(ids)} case(s) started and never finished (first: {_first(ids)})")
    if run.interrupted:
        reasons.append(f"the run was interrupted ({run.interrupted})")
    for worker in run.crashed_workers:
        reasons.append(f"worker {worker}")
    for conflict in run.conflicts:
        reasons.append(f"workers disagree on {conflict}")
    reasons += run.other
    if run.exitstatus is None:
        reasons.append("pytest never reached the end of the session")
    elif int(run.exitstatus) != 0:
        reasons.append(f"pytest exited with status {int(run.exitstatus)} ({_exit_name(run.exitstatus)}), not 0")
    return {"certified": not reasons, "reasons": reasons, "expected": total, "passed": passed,
            "exempt": len(inventory.exempt) if inventory is not None else 0}


def _times(count: int | None) -> str:
    return f"{count} time" if count == 1 else f"{count} times"


def _exit_name(status) -> str:
    try:
        return pytest.ExitCode(int(status)).name
    except ValueError:
        return "set by a plugin or pytest.exit"
