"""`palw diff`: the committed H200 certificate against edited copies of itself; each change is
named on one line, and only regressions make the exit status non-zero."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from pytest_palw import cli

H200 = Path(__file__).with_name("data") / "h200-certificate.json.gz"
FAILING = "conformance/test_reject_index.py::test_reject_v2[17]"


@pytest.fixture(scope="module")
def certified() -> dict:
    return json.loads(gzip.decompress(H200.read_bytes()))


def diff(tmp_path, old: dict, new: dict, capsys) -> tuple[int, list[str]]:
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    code = cli.main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")])
    return code, capsys.readouterr().out.splitlines()


def edited(document: dict, change) -> dict:
    document = copy.deepcopy(document)
    change(document)
    return document


def case(document: dict, case_id: str) -> dict:
    return next(c for c in document["cases"] if c["id"] == case_id)


def test_a_certificate_against_itself_is_no_change(tmp_path, certified, capsys):
    code, lines = diff(tmp_path, certified, certified, capsys)
    assert code == 0 and lines == [f"palw diff: no change between {tmp_path / 'old.json'} and {tmp_path / 'new.json'}"]


def test_the_compressed_certificate_is_read_as_it_is(capsys):
    assert cli.main(["diff", str(H200), str(H200)]) == 0
    assert "no change" in capsys.readouterr().out


def test_a_failed_case_is_a_regression(tmp_path, certified, capsys):
    def fail(document):
        case(document, FAILING).update(outcome="failed", reason="E   AssertionError: decode succeeded")
        document["verdict"].update(certified=False, reasons=[f"1 case(s) failed (first: {FAILING})"])

    code, lines = diff(tmp_path, certified, edited(certified, fail), capsys)
    assert code == 1
    assert lines[0] == f"REGRESSION verdict: CERTIFIED -> not certified (1 case(s) failed (first: {FAILING}))"
    assert lines[1] == (f"REGRESSION cases: 1 passed before and not now: {FAILING} failed "
                        "(E   AssertionError: decode succeeded)")
    assert lines[-1] == "palw diff: 2 regression(s), 0 other change(s)"


def test_another_fingerprint_is_a_regression(tmp_path, certified, capsys):
    other = edited(certified, lambda d: d["fingerprints"].update(v2="0123456789abcdef"))
    code, lines = diff(tmp_path, certified, other, capsys)
    assert code == 1 and lines[0] == "REGRESSION fingerprint v2: bc0e610b56ddbf4c -> 0123456789abcdef"


def test_a_new_fingerprint_is_a_change(tmp_path, certified, capsys):
    code, lines = diff(tmp_path, certified, edited(certified, lambda d: d["fingerprints"].update(extra="aa")), capsys)
    assert code == 0 and lines[0] == "changed    fingerprint extra: none -> aa"


def test_another_toolchain_and_library_are_changes_not_regressions(tmp_path, certified, capsys):
    def rebuild(document):
        document["runtime"]["toolchain"]["nvcc"] = "Cuda compilation tools, release 13.1, V13.1.20"
        document["kernel_digest"]["sha256"] = "ab" * 32

    code, lines = diff(tmp_path, certified, edited(certified, rebuild), capsys)
    assert code == 0
    assert f"changed    library sha256: {certified['kernel_digest']['sha256']} -> {'ab' * 32}" in lines
    assert ("changed    toolchain nvcc: Cuda compilation tools, release 13.0, V13.0.88 -> Cuda compilation tools, "
            "release 13.1, V13.1.20") in lines
    assert lines[-1] == "palw diff: 0 regression(s), 2 other change(s)"


def test_a_pin_and_patch_change_are_named(tmp_path, certified, capsys):
    def repin(document):
        document["runtime"]["pin"]["cc"] = 890
        document["runtime"]["patches_applied"]["overlays"] = []

    code, lines = diff(tmp_path, certified, edited(certified, repin), capsys)
    assert code == 0 and "changed    pin: 900 -> 890" in lines
    assert 'changed    overlays: ["0001-palw-pinned-cc.patch"] -> []' in lines


def test_a_smaller_inventory_is_a_regression(tmp_path, certified, capsys):
    def shrink(document):
        document["inventory"]["functions"] = [f for f in document["inventory"]["functions"]
                                              if not f["function"].endswith("::test_reject_v1")]
        document["inventory"]["sha256"] = "0" * 64

    code, lines = diff(tmp_path, certified, edited(certified, shrink), capsys)
    assert code == 1 and lines[0].startswith("REGRESSION inventory: 253 case(s) no longer expected: "
                                             "conformance/test_reject_index.py::test_reject_v1[0]")


def test_a_fixed_case_is_a_change(tmp_path, certified, capsys):
    old = edited(certified, lambda d: case(d, FAILING).update(outcome="failed"))
    code, lines = diff(tmp_path, old, certified, capsys)
    assert code == 0 and lines[0] == f"changed    cases: 1 pass now and did not before: {FAILING}"


def test_a_file_that_is_no_certificate_is_one_line(tmp_path, capsys):
    other = tmp_path / "manifest.json"
    other.write_text('{"schema": "pytest-palw.runtime-manifest"}')
    assert cli.main(["diff", str(other), str(H200)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "is not a pytest-palw certificate" in error
