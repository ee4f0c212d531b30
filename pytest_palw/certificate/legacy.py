"""Reading certificates written before a run recorded each case's launch (CaseResult.launch,
pytest-palw before 2026-12-04): the page finds their launches from their case ids, by the table of
index cases the page used then. Nothing of a new certificate goes through here."""

from __future__ import annotations

import re

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
_NODE = re.compile(r"(?:^|/)(test_\w+\.py)::(\w+)\[(\d+)\]$")


def launches_from_ids(cases: list[dict], launches) -> list[tuple[dict, dict]]:
    """(case, {index, label, stream}) for each old case id naming one launch index."""
    mmvq = mmvq_positions(launches)
    found = []
    for case in cases:
        match = _NODE.search(case.get("id") or case["nodeid"])
        kind = INDEX_CASES.get((match.group(1), match.group(2))) if match else None
        if match is None or kind is None:
            continue
        label, stream = kind
        index: int | None = int(match.group(3))
        if stream == "v1":
            index = mmvq[position] if (position := int(match.group(3))) < len(mmvq) else None
        found.append((case, {"index": index, "label": label, "stream": stream}))
    return found
