"""`palw report` does not render a certificate that states CERTIFIED and does not check (as `palw
verify` checks it): one of another suite version, or one whose verdict was edited. A certificate
that is not certified is rendered (what it states against itself is said in one line)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pytest_palw import cli
from pytest_palw.certificate import load

DATA = Path(__file__).resolve().parents[1] / "certificate" / "data"


def test_a_certified_certificate_of_another_suite_version_is_refused_in_one_line(tmp_path, capsys):
    certificate = tmp_path / "h200.json.gz"
    shutil.copy(DATA / "h200-certificate.json.gz", certificate)
    assert load(certificate)["verdict"]["certified"] is True
    assert cli.main(["report", str(certificate)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "states CERTIFIED but does not check (suite.sha256: states " in error, error
    assert "palw verify" in error
    assert not (tmp_path / "h200.json.html").exists() and not list(tmp_path.glob("*.html"))


def test_a_verdict_edited_to_certified_is_refused(tmp_path, capsys):
    document = load(DATA / "cpu-certificate.json")
    document["verdict"].update(certified=True, reasons=[])
    certificate = tmp_path / "cert.json"
    certificate.write_text(json.dumps(document))
    assert cli.main(["report", str(certificate)]) == 2
    assert "states CERTIFIED but does not check (" in capsys.readouterr().err
    assert not (tmp_path / "cert.html").exists()


def test_a_certificate_that_is_not_certified_is_rendered_and_what_does_not_check_is_said(tmp_path, capsys):
    certificate = tmp_path / "cert.json"
    shutil.copy(DATA / "cpu-certificate.json", certificate)
    assert cli.main(["report", str(certificate)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "cert.html").is_file()
    assert f"palw: {certificate} does not agree with itself or with this installed suite (" in out
