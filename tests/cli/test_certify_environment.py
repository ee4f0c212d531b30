"""`palw certify` runs the suite alone: pytest's environment variables that add options or
plugins to every pytest (and every xdist worker) are refused in one line before pytest starts."""

import pytest

from pytest_palw import cli


@pytest.mark.parametrize("variable, value", [("PYTEST_ADDOPTS", "-p flaky --force-flaky"),
                                             ("PYTEST_PLUGINS", "flaky.flaky_pytest_plugin")])
def test_pytest_environment_that_adds_to_the_run_is_refused_in_one_line(monkeypatch, capsys, tmp_path,
                                                                         variable, value):
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)
    monkeypatch.setenv(variable, value)
    certificate = tmp_path / "cert.json"
    certificate.write_text('{"verdict": {"certified": true}}')
    assert cli.main(["certify", "--certificate", str(certificate)]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1, err
    assert f"{variable} is set ({value!r})" in err and "unset it" in err
    assert not certificate.exists()  # an older certificate does not speak for this refused run
