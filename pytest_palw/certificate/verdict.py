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

# pytest's own report categories (pytest_report_teststatus) for a case's reports; "" is a passing
# setup or teardown. Any other category is an outcome pytest does not name (a rerun plugin's "rerun").
KNOWN_CATEGORIES = ("", "passed", "failed", "error", "skipped", "xfailed", "xpassed")
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


def state_of(case, case_id: str) -> str:
    """What became of one case: "passed", or the kind of reason it gives."""
    if case is None:
        return "missing"
    if case.crashed:
        return "crashed"
    if any(outcome == "failed" for outcome in case.phases.values()):
        return "failed"
    categories = set(case.categories)
    if categories & {"failed", "error"}:
        return "failed"
    if categories & {"xfailed", "xpassed"}:
        return "xfail"
    if "skipped" in case.phases.values():
        return "skipped"
    if case.swapped:
        return "swapped"
    if (case.entries or 0) > 1 or case.raised:  # entries None: a certificate older than the count
        return "retried"
    if case.unknown:
        return "unknown"
    if case.phases.get("setup") != "passed" or "call" not in case.phases:
        return "body not run"
    if case.phases["call"] != "passed" or case.body != case_id:  # the witness names the case that ran
        return "body not run"
    if case.phases.get("teardown") != "passed":
        return "incomplete"
    return "passed"


def _first(ids: list[str]) -> str:
    shown = ", ".join(ids[:FIRST])
    return f"{shown}, ..." if len(ids) > FIRST else shown


def judge(inventory, cases: dict, run: RunFacts) -> dict:
    """The verdict of a run: ``cases`` maps the inventory's case ids to their CaseResult."""
    reasons: list[str] = []
    if inventory is None:
        required: tuple[str, ...] = ()
        reasons.append("no expected inventory: nothing says which cases had to pass")
    else:
        required = inventory.required
    states: dict[str, list[str]] = {}
    for case_id in required:
        states.setdefault(state_of(cases.get(case_id), case_id), []).append(case_id)
    passed = len(states.get("passed", []))
    total = len(required)

    missing = states.get("missing", [])
    if missing:
        reasons.append(f"{len(missing)} of {total} expected case(s) never reported (first: {_first(missing)}): "
                       "not collected, deselected or never run")
        reasons += run.selection
    if states.get("crashed"):
        ids = states["crashed"]
        reasons.append(f"{len(ids)} case(s) crashed their worker (first: {_first(ids)})")
    expected_ids = set(inventory.ids) if inventory is not None else set()
    failed = list(states.get("failed", []))
    failed += sorted(case_id for case_id, case in cases.items()  # exempt and outside the inventory
                     if case_id not in required and state_of(case, case_id) in ("failed", "crashed"))
    if failed:
        reasons.append(f"{len(failed)} case(s) failed (first: {_first(failed)})")
    outside = sorted(set(cases) - expected_ids)
    if outside:
        reasons.append(f"{len(outside)} case(s) of the suite are not in the expected inventory (first: "
                       f"{_first(outside)}): a plugin or option added them")
    if states.get("xfail"):
        reasons.append(f"{len(states['xfail'])} case(s) marked xfail (first: {_first(states['xfail'])}): a certified "
                       "claim cannot be expected to fail")
    if states.get("unknown"):
        ids = states["unknown"]
        names = sorted({name for case_id in ids for name in cases[case_id].unknown})
        reasons.append(f"{len(ids)} case(s) reported an outcome pytest does not name ({', '.join(names)}) "
                       f"(first: {_first(ids)})")
    skipped: Counter = Counter()
    for case_id in states.get("skipped", []):
        case = cases[case_id]
        skipped[(inventory.tiers[case_id], case.reason or "no reason given")] += 1
    for (tier, reason), count in sorted(skipped.items()):
        reasons.append(f"{count} {tier.upper()}-tier case(s) not run: {reason}")
    if states.get("retried"):
        ids = states["retried"]
        shown = [f"{case_id} (entered {_times(cases[case_id].entries)}, raised "
                 f"{', '.join(cases[case_id].raised) or 'nothing'})" for case_id in ids]
        reasons.append(f"{len(ids)} case(s) whose body was entered more than once or raised in its call (first: "
                       f"{_first(shown)}): a retry (flaky, pytest-rerunfailures, pytest-retry, a conftest loop) or "
                       "a swallowed exception; a case that failed once is not certified")
    if states.get("swapped"):
        ids = states["swapped"]
        names = sorted({name for case_id in ids for name in cases[case_id].swapped})
        reasons.append(f"{len(ids)} case(s) received a fixture value the plugin's fixture did not return "
                       f"({', '.join(names)}) (first: {_first(ids)}): a conftest or plugin swapped it "
                       "(pytest_fixture_setup, item.funcargs); remove it to certify")
    if states.get("body not run"):
        ids = states["body not run"]
        reasons.append(f"{len(ids)} case(s) whose body never ran to its end (first: {_first(ids)}): setup only "
                       "(--setup-only, --setup-plan) or a call that did not run the suite's function")
    if states.get("incomplete"):
        ids = states["incomplete"]
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
