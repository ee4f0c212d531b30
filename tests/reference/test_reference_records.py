"""The CPU reference trace against discovery: Python checking Python, so not a certified claim.

pytest_palw.runtime.reference builds the 361 reference records with the smoke's approve logic rewritten in
Python (pytest_palw.runtime.caller) over stand-in kernel identities, and discovery (pytest_palw.runtime.discovery)
finds the 361 candidates; both read the same graph. These tests keep that machinery honest (the
golden CPU reference stream and the conformance cases rely on it); what runs native code over it
is certified in conformance/test_cpu_reference.py.
"""

from pytest_palw.runtime.names import status_name
from pytest_palw.runtime.verify import record_mismatches


def test_every_launch_is_approved(palw_cpu_reference, palw_runtime):
    lib = palw_runtime.lib
    statuses = [status_name(lib, s) for s in palw_cpu_reference.statuses]
    assert len(statuses) == 361
    refused = {index: status for index, status in enumerate(statuses) if status != "OK"}
    assert refused == {}, f"the approve logic refused {len(refused)} launches, first {list(refused.items())[:5]}"
    assert palw_cpu_reference.caller.callback_errors == []


def test_records_match_discovery(palw_cpu_reference, palw_runtime):
    """verify_mixed_record of the smoke on every reference record, plus a sketch that was set."""
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    infos = palw_cpu_reference.caller.infos
    problems = {}
    for index, candidate in enumerate(palw_cpu_reference.reference.candidates):
        record = palw_cpu_reference.records[index]
        found = record_mismatches(ffi, record, index, candidate, infos, lib)
        if list(record.base.base.sketch) == [0, 0, 0, 0]:
            found.append("sketch is all zero")
        if found:
            problems[index] = found
    assert len(palw_cpu_reference.reference.candidates) == 361
    assert problems == {}, f"{len(problems)} records differ from discovery, first {list(problems.items())[:3]}"
