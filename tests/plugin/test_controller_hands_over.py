"""The controller resolves what the run certifies once and hands it to the workers; each case about
one launch carries that launch in its reports (the certificate's launch map reads it there)."""

import json

from pytest_palw.fixtures.models.profiles import PROFILES
from pytest_palw.fixtures.oracles.launch_table import expected_launches
from pytest_palw.paths import CONFORMANCE_DIR


def test_workers_run_the_model_the_controller_resolved_and_record_each_case_s_launch(pytester):
    certificate = pytester.path / "certificate.json"
    suite = CONFORMANCE_DIR
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "-n", "2", "--palw-model=profile:tiny", f"--palw-certificate={certificate}",
        str(suite / "test_launch_order.py"), f"{suite / 'test_reject_index.py'}::test_reject_v2[7]", timeout=900)
    assert certificate.is_file(), "\n".join(result.outlines[-30:] + result.errlines[-30:])
    document = json.loads(certificate.read_text())

    workers = {name: facts for name, facts in document["workers"].items() if name != "controller"}
    assert sorted(workers) == ["gw0", "gw1"]
    assert {facts["model_resolved"] for facts in workers.values()} == {"handed by the controller"}
    assert document["workers"]["controller"]["model_resolved"] == "here"
    assert not [reason for reason in document["verdict"]["reasons"] if "disagree" in reason]

    launches = {case["id"].split("::")[1]: case for case in document["cases"]}
    table = expected_launches(PROFILES["tiny"])
    mmvq = [launch.index for launch in table if not launch.klass.startswith("attention")]
    v2 = sorted((case for name, case in launches.items() if name.startswith("test_mixed_launch[")),
                key=lambda case: case["launch"]["index"])
    v1 = sorted((case for name, case in launches.items() if name.startswith("test_mmvq_launch[")),
                key=lambda case: int(case["id"].rsplit("[", 1)[1].rstrip("]")))
    assert [case["launch"] for case in v2] == [{"index": launch.index, "label": "order", "stream": "v2"}
                                               for launch in table]
    assert [case["launch"]["index"] for case in v1] == mmvq  # a V1 index mapped to its place in V2
    skipped = launches["test_reject_v2[7]"]  # GPU tier: skipped at setup here, its launch still recorded
    assert skipped["outcome"] == "skipped" and skipped["launch"] == {"index": 7, "label": "reject V2", "stream": "v2"}
    assert not [case for name, case in launches.items() if name == "test_discovery_completes" and case.get("launch")]
