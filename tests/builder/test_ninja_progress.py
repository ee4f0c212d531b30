"""Ninja's ``[n/N]`` status lines drive the progress bar; a failing step shows its log tail."""

from __future__ import annotations

import sys

import pytest

from pytest_palw.builder.ninja import TAIL_LINES, log_tail, parse_status, run_logged
from pytest_palw.errors import BuildError

SAMPLES = [
    ("[1/203] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o",
     (1, 203, "Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o")),
    ("[203/203] Linking CXX executable bin/llama-palw-observer",
     (203, 203, "Linking CXX executable bin/llama-palw-observer")),
    ("  [17/40]   Linking CXX shared library bin/libllama.so\n",
     (17, 40, "Linking CXX shared library bin/libllama.so")),
    ("[0/1] Re-running CMake...", (0, 1, "Re-running CMake...")),
    ("FAILED: src/CMakeFiles/llama.dir/llama.cpp.o", None),
    ("ninja: build stopped: subcommand failed.", None),
    ("/src/llama.cpp:12:5: error: expected ';' [1/2]", None),
    ("[a/b] not numbers", None),
    ("", None),
]


@pytest.mark.parametrize("line, expected", SAMPLES)
def test_parse_status(line, expected):
    assert parse_status(line) == expected


def _script(tmp_path, body: str) -> list[str]:
    script = tmp_path / "fake_ninja.py"
    script.write_text(body)
    return [sys.executable, str(script)]


def test_progress_follows_status_lines(tmp_path, capsys):
    command = _script(tmp_path, "for i in range(1, 6):\n    print(f'[{i}/5] Building CXX object o{i}.o')\n")
    run_logged(command, tmp_path / "build.log", step="ninja build", progress_label="build cpu")
    err = capsys.readouterr().err
    assert "build cpu [" in err and "5/5" in err and "done" in err
    assert (tmp_path / "build.log").read_text().count("Building CXX object") == 5


def test_failure_shows_the_tail_and_raises(tmp_path, capsys):
    command = _script(tmp_path, "import sys\nfor i in range(100):\n    print(f'line {i}')\n"
                                "print('FAILED: x.o')\nsys.exit(3)\n")
    log = tmp_path / "build.log"
    with pytest.raises(BuildError) as failure:
        run_logged(command, log, step="ninja build", progress_label="build cpu")
    message = str(failure.value)
    assert "exit 3" in message and str(log) in message and "\n" not in message
    err = capsys.readouterr().err
    assert "FAILED: x.o" in err and "line 99" in err and "line 50\n" not in err
    assert len(log_tail(log)) == TAIL_LINES
