"""`palw` dispatch: command modules load lazily, errors become one line and an exit code."""

from __future__ import annotations

import pytest

from pytest_palw import cli
from pytest_palw.builder import api
from pytest_palw.errors import BuildError


def test_known_commands_are_registered():
    parser = cli.make_parser()
    choices = next(a for a in parser._actions if a.dest == "command").choices
    assert {"build", "source"} <= set(choices)


def test_absent_command_module_is_skipped(monkeypatch):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("pytest_palw.cli.build", "pytest_palw.not_written_yet"))
    parser = cli.make_parser()
    choices = next(a for a in parser._actions if a.dest == "command").choices
    assert set(choices) == {"build", "source"}


def test_broken_command_module_is_not_hidden(monkeypatch, tmp_path):
    (tmp_path / "palw_broken_commands.py").write_text("import palw_dependency_that_is_missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("palw_broken_commands",))
    with pytest.raises(ModuleNotFoundError, match="palw_dependency_that_is_missing"):
        cli.make_parser()


def test_palw_error_is_one_line_and_its_exit_code(monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise BuildError("first part\nsecond part: fix it")

    monkeypatch.setattr(api, "build", fail)
    assert cli.main(["build"]) == BuildError.exit_code
    assert capsys.readouterr().err == "palw: error: first part second part: fix it\n"


def test_interrupt_exits_130(monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "build", interrupt)
    assert cli.main(["build"]) == 130


def test_print_manifest_prints_only_the_path(monkeypatch, capsys, tmp_path):
    class Built:
        path = tmp_path / "palw-manifest.json"

    monkeypatch.setattr(api, "build", lambda *a, **k: Built())
    assert cli.main(["build", "--print-manifest"]) == 0
    assert capsys.readouterr().out == f"{Built.path}\n"
