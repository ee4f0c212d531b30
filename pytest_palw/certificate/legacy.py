"""Reading certificates written before the current model: each is read, on load, into a copy in
the current model (``current``), so nothing downstream handles an old format.

- Before a run stated each case's state (schema v2 before ``cases[].state``): the state is given
  from the case's recorded reports, as the verdict gives it (state.CaseState.of).
- Schema v1 recorded no case id, phases nor witness: the id is its node id, the state what pytest
  said (its outcome).
- Before a run recorded each case's launch (CaseResult.launch; certificates without `cases[].launch`):
  the launches are read from the case ids, by the table of index cases the page used then.
"""

from __future__ import annotations

import copy
import dataclasses

from pytest_palw.certificate import CaseResult
from pytest_palw.certificate.inventory import launch_table, parse_case_id
from pytest_palw.certificate.state import CaseState
from pytest_palw.fixtures.oracles.launch_table import mmvq_positions

# (module, function) -> (label, stream) of the parametrized cases about one launch index then.
INDEX_CASES = {
    ("test_launch_order.py", "test_mixed_launch"): ("order", "v2"),
    ("test_launch_order.py", "test_mmvq_launch"): ("order V1", "v1"),
    ("test_cpu_reference.py", "test_reference_record"): ("CPU reference record", "v2"),
    ("test_reject_index.py", "test_reject_v2"): ("reject V2", "v2"),
    ("test_reject_index.py", "test_reject_v1"): ("reject V1", "v1"),
    ("test_positive_trace.py", "test_v2_record"): ("record V2", "v2"),
    ("test_positive_trace.py", "test_v1_record"): ("record V1", "v1"),
    ("test_positive_trace.py", "test_device_sketch_equals_host_sketch"): ("device sketch", "v2"),
    ("test_non_mutation.py", "test_association_matches_discovery"): ("association", "v2"),
}
# What pytest said of a schema v1 case, as the state it reads as: nothing witnessed a v1 body.
_V1_STATES = {"passed": CaseState.BODY_NOT_WITNESSED, "failed": CaseState.FAILED, "error": CaseState.FAILED,
              "xfailed": CaseState.XFAIL, "xpassed": CaseState.XFAIL, "skipped": CaseState.SKIPPED,
              "incomplete": CaseState.BODY_NOT_REACHED}
_FIELDS = {field.name for field in dataclasses.fields(CaseResult)}


def current(document: dict) -> dict:
    """``document`` in the current model: every case with its id, its state and its launch (None:
    not about one launch). A current document is returned as it is; an older one as a converted
    copy (the document read is not changed)."""
    cases = document.get("cases") or []
    if all("id" in case and "state" in case and "launch" in case for case in cases):
        return document
    document = copy.deepcopy(document)
    cases = document["cases"]
    for case in cases:
        case.setdefault("id", case["nodeid"])
        if "state" not in case:
            case["state"] = (CaseState.of(CaseResult(**{k: v for k, v in case.items() if k in _FIELDS}), case["id"])
                             if "phases" in case else _V1_STATES[case["outcome"]]).value
    if not any("launch" in case for case in cases):
        found = {id(case): launch for case, launch in launches_from_ids(cases, launch_table(document.get("model")))}
        for case in cases:
            case["launch"] = found.get(id(case))
    for case in cases:
        case.setdefault("launch", None)
    return document


def launches_from_ids(cases: list[dict], launches) -> list[tuple[dict, dict]]:
    """(case, {index, label, stream}) for each old case id naming one launch index."""
    mmvq = mmvq_positions(launches)
    found = []
    for case in cases:
        module, function, param = parse_case_id(case.get("id") or case["nodeid"])
        kind = INDEX_CASES.get((module, function))
        if kind is None or param is None or not param.isdigit():
            continue
        label, stream = kind
        index: int | None = int(param)
        if stream == "v1":
            index = mmvq[position] if (position := int(param)) < len(mmvq) else None
        found.append((case, {"index": index, "label": label, "stream": stream}))
    return found
