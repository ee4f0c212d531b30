"""The launch map reads each case's launch as its run recorded it (CaseResult.launch) and the
families from the certified run's inventory; an older certificate without them is read from its
case ids (certificate/legacy.py) to the same map."""

import copy
import gzip
import json
from pathlib import Path

from pytest_palw.certificate.html import launch_cells
from pytest_palw.certificate.legacy import INDEX_CASES, launches_from_ids
from pytest_palw.fixtures.models.profiles import PROFILES
from pytest_palw.fixtures.oracles.launch_table import expected_launches
from pytest_palw.marks import stream_indices

DATA = Path(__file__).with_name("data")


def old_h200() -> dict:
    return json.loads(gzip.decompress((DATA / "h200-certificate.json.gz").read_bytes()))


def recorded(document: dict) -> dict:
    """``document`` as a run that records launches writes it: per case and per family."""
    new = copy.deepcopy(document)
    for case, launch in launches_from_ids(new["cases"], expected_launches(PROFILES["full"])):
        case["launch"] = launch
    by_function = {(module, function): {"label": label, "stream": stream}
                   for (module, function), (label, stream) in INDEX_CASES.items()}
    for family in new["inventory"]["functions"]:
        module, function = family["function"].split("/", 1)[1].split("::")
        if (module, function) in by_function:
            family["launch"] = by_function[(module, function)]
    return new


def comparable(cells: list[dict]) -> list[tuple]:
    """A cell's facts, its per-family lines in any order (the inventory orders families by module)."""
    return [(cell["index"], cell["klass"], cell["outcome"], sorted(cell["title"].splitlines())) for cell in cells]


def test_a_recorded_certificate_draws_the_same_map_as_its_ids_did():
    old = old_h200()
    assert not any("launch" in case for case in old["cases"])
    new = recorded(old)
    assert sum(1 for case in new["cases"] if case.get("launch")) == sum(
        len(stream_indices(stream)) for _, stream in INDEX_CASES.values())
    assert comparable(launch_cells(new)) == comparable(launch_cells(old))


def test_the_map_follows_the_recorded_launch_not_the_case_id():
    new = recorded(old_h200())
    case = next(c for c in new["cases"] if c["id"].endswith("test_reject_v2[17]"))
    case["outcome"] = "failed"
    assert launch_cells(new)[17]["outcome"] == "failed"
    case["launch"] = {**case["launch"], "index": 18}
    cells = launch_cells(new)
    assert cells[17]["outcome"] == "not-run" and "reject V2: not run" in cells[17]["title"]
    assert cells[18]["outcome"] == "failed"


def test_a_family_the_run_never_reported_shows_not_run():
    new = recorded(old_h200())
    new["cases"] = [c for c in new["cases"] if "test_reject_v1[" not in c["id"]]
    cells = launch_cells(new)
    mmvq = [cell for cell in cells if not cell["klass"].startswith("attention")]
    assert all("reject V1: not run" in cell["title"] and cell["outcome"] != "passed" for cell in mmvq)
