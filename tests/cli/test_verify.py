"""`palw verify CERT.json`: a fresh certificate agrees with itself and with this installed suite; an
edited case outcome, verdict or suite digest is an inconsistency that names the field (exit 1); a
file that is no certificate exits 2. The certificate is a real CPU `palw certify` of this checkout."""

from __future__ import annotations

import json
import shutil

import pytest

from pytest_palw import cli


@pytest.fixture(scope="module")
def fresh_certificate(run_palw, tmp_path_factory, cpu_build):
    directory = tmp_path_factory.mktemp("verify")
    result = run_palw("certify", "--certificate", directory / "cert.json", cwd=directory, timeout=900)
    assert (directory / "cert.json").is_file(), result.stdout[-3000:] + result.stderr[-2000:]
    return directory / "cert.json"


def edited(source, target, edit):
    document = json.loads(source.read_text())
    edit(document)
    target.write_text(json.dumps(document))
    return target


def verify(path, capsys) -> tuple[int, list[str]]:
    code = cli.main(["verify", str(path)])
    return code, capsys.readouterr().out.splitlines()


def test_a_fresh_certificate_agrees(fresh_certificate, capsys):
    code, lines = verify(fresh_certificate, capsys)
    assert code == 0, lines
    assert lines[-1].startswith(f"palw verify: {fresh_certificate} agrees with itself and with this installed suite")
    assert "without a signature this cannot prove who ran it" in lines[-1]


def skipped_case(document) -> dict:
    return next(case for case in document["cases"] if case["outcome"] == "skipped")


def test_an_edited_case_outcome_names_the_case(fresh_certificate, tmp_path, capsys):
    case_id = skipped_case(json.loads(fresh_certificate.read_text()))["id"]
    path = edited(fresh_certificate, tmp_path / "cert.json", lambda d: skipped_case(d).update(outcome="passed"))
    code, lines = verify(path, capsys)
    assert code == 1
    assert (f"palw verify: cases[{case_id}].outcome: states passed, its reports' categories (skipped) give "
            "skipped") in lines


def test_an_edited_verdict_names_the_field(fresh_certificate, tmp_path, capsys):
    def certified(document):
        document["verdict"].update(certified=True, reasons=[])

    code, lines = verify(edited(fresh_certificate, tmp_path / "cert.json", certified), capsys)
    assert code == 1
    assert any(line.startswith("palw verify: verdict.certified: states CERTIFIED, its cases and inventory say not "
                               "certified: ") for line in lines), lines
    code, lines = verify(edited(fresh_certificate, tmp_path / "count.json",
                                lambda d: d["verdict"].update(passed=d["verdict"]["expected"])), capsys)
    assert code == 1 and any(line.startswith("palw verify: verdict.passed: states ") for line in lines), lines


def test_an_edited_inventory_or_suite_digest_names_the_field(fresh_certificate, tmp_path, capsys):
    def drop_a_function(document):
        document["inventory"]["functions"].pop()

    code, lines = verify(edited(fresh_certificate, tmp_path / "inventory.json", drop_a_function), capsys)
    assert code == 1 and any(line.startswith("palw verify: inventory.sha256: states ") for line in lines), lines
    code, lines = verify(edited(fresh_certificate, tmp_path / "suite.json",
                                lambda d: d["suite"].update(sha256="0" * 64)), capsys)
    assert code == 1
    assert any(line.startswith(f"palw verify: suite.sha256: states {'0' * 64}") and "another suite version" in line
               for line in lines), lines


def test_a_file_that_is_no_certificate_exits_2_in_one_line(tmp_path, capsys):
    other = tmp_path / "manifest.json"
    other.write_text('{"schema": "pytest-palw.runtime-manifest"}')
    assert cli.main(["verify", str(other)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    partial = tmp_path / "partial.json"
    partial.write_text('{"schema": "pytest-palw.certificate", "inventory": {"functions": 1}}')
    assert cli.main(["verify", str(partial)]) == 2
    assert "is not a complete pytest-palw certificate" in capsys.readouterr().err


def test_its_help_says_it_cannot_prove_who_ran_it(capsys):
    with pytest.raises(SystemExit):
        cli.main(["verify", "--help"])
    assert "Without a signature it cannot prove who ran the suite" in " ".join(capsys.readouterr().out.split())


def test_gzip_certificates_are_read(fresh_certificate, tmp_path, capsys):
    import gzip

    packed = tmp_path / "cert.json.gz"
    packed.write_bytes(gzip.compress(fresh_certificate.read_bytes()))
    assert verify(packed, capsys)[0] == 0
    shutil.copy(fresh_certificate, tmp_path / "copy.json")
    assert verify(tmp_path / "copy.json", capsys)[0] == 0
