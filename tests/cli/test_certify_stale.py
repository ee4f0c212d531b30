"""`palw certify` whose pytest stops before the plugin's first hook (a -p plugin that does not
import) leaves no older certificate standing: it would speak for this run."""


def test_an_older_certificate_does_not_survive_a_pytest_that_never_started(run_palw, tmp_path):
    certificate = tmp_path / "palw-certificate.json"
    page = tmp_path / "palw-certificate.html"
    certificate.write_text('{"schema": "pytest-palw.certificate", "verdict": {"certified": true}}\n')
    page.write_text("<p>CERTIFIED</p>\n")
    result = run_palw("certify", "--certificate", certificate, "--require-certified", "--",
                      "-p", "palw_no_such_plugin", cwd=tmp_path, timeout=300)
    assert result.returncode != 0
    assert "no certificate written" in result.stdout
    assert not certificate.exists() and not page.exists()
