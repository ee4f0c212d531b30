"""@ahead fixtures (pytest_palw.ahead): their jobs start with the cases, only for the selected cases of
runs that execute fixtures, in the controlling process only; a job's error is its case's error; its
children get the environment the jobs started with, not one a case changed meanwhile."""

from __future__ import annotations

import json

import pytest

JOBS = '''
import json
import os
import sys
import time
from pathlib import Path

import pytest

from pytest_palw.ahead import ahead

MARKS = Path(os.environ["AHEAD_MARKS"])


def mark(name):
    (MARKS / name).write_text("")


def wait_for(name):
    for _ in range(600):  # a job started ahead has long written it; a lazy one never will here
        if (MARKS / name).exists():
            return True
        time.sleep(0.05)
    return False


@ahead
def early(palw_session):
    mark("early-ran")
    return "early"


@ahead(keys=lambda item: [item.callspec.params["key"]])
def keyed(palw_session, key):
    mark(f"keyed-{key}-ran")
    if key == "broken":
        raise ValueError("the job broke")
    return key.upper()


@ahead
def child_environment(palw_session):
    assert wait_for("variable-set")  # a case changed os.environ after the jobs started
    result = palw_session.ahead.run([sys.executable, "-c", "import os; print(os.environ.get('AHEAD_CASE_VARIABLE'))"],
                                    capture_output=True, text=True, check=True)
    return result.stdout.strip()
'''

CASES = JOBS + '''

def test_a_first_case_finds_the_jobs_running(palw_session):
    assert wait_for("early-ran"), "the job did not start before its case"
    assert wait_for("keyed-a-ran")
    with open(MARKS / "futures.json", "w") as handle:
        json.dump(sorted(name for name, *_ in palw_session.ahead.futures), handle)


def test_a_case_changes_the_environment():
    os.environ["AHEAD_CASE_VARIABLE"] = "set by a case"
    mark("variable-set")


def test_early(early):
    assert early == "early"


@pytest.mark.parametrize("key", ["a", "b"])
def test_keyed(key, keyed):
    assert keyed(key) == key.upper()


def test_the_child_gets_the_environment_the_jobs_started_with(child_environment):
    assert child_environment == "None"
'''


@pytest.fixture
def marks(tmp_path, monkeypatch):
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("AHEAD_MARKS", str(folder))
    monkeypatch.delenv("AHEAD_CASE_VARIABLE", raising=False)
    return folder


def _ran(marks) -> set[str]:
    return {path.name for path in marks.iterdir()}


def test_jobs_start_with_the_cases_and_children_keep_the_starting_environment(pytester, marks):
    pytester.makepyfile(test_jobs=CASES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"passed": 6}
    assert json.loads((marks / "futures.json").read_text()) == ["child_environment", "early", "keyed", "keyed"]


def test_only_the_selected_cases_jobs_start(pytester, marks):
    pytester.makepyfile(test_jobs=CASES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "test_keyed",
                                           "--deselect", "test_jobs.py::test_keyed[b]")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"passed": 1, "deselected": 5}
    assert _ran(marks) == {"keyed-a-ran"}


@pytest.mark.parametrize("option", ["--collect-only", "--setup-plan"])
def test_a_run_that_executes_no_fixture_starts_no_job(pytester, marks, option):
    pytester.makepyfile(test_jobs=CASES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", option)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert _ran(marks) == set()


def test_a_job_s_error_is_the_error_of_the_case_that_asks(pytester, marks):
    pytester.makepyfile(test_jobs=JOBS + '''

@pytest.mark.parametrize("key", ["a", "broken"])
def test_keyed(key, keyed):
    assert keyed(key) == key.upper()
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"passed": 1, "failed": 1}, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*ValueError: the job broke*", "FAILED test_jobs.py::test_keyed[[]broken[]]*"])


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_job_s_palw_error_stops_the_run_in_one_line(pytester, marks, workers):
    """A PalwError of a job or its prepare is the user's environment (a read-only or full cache):
    the run stops with its one line and exit code, as palw_runtime's does, not a traceback per case."""
    pytester.makepyfile(test_jobs=JOBS + '''
from pytest_palw.errors import CacheError


def unwritable(palw_session, key):
    raise CacheError(f"cannot write {key}.gguf")


@ahead(keys=lambda item: [item.callspec.params["key"]], prepare=unwritable)
def cached(palw_session, key, value):
    return key


@pytest.mark.parametrize("key", ["a", "b"])
def test_cached(key, cached):
    assert cached(key) == key
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *workers)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 2, output[-3000:]
    assert "Traceback" not in output and "INTERNALERROR" not in output, output[-3000:]
    last = "palw: cannot write {}.gguf: the pytest-palw cache must be a writable directory"  # a worker's: either
    assert any(last.format(key) in line for line in result.stdout.lines[-3:] for key in "ab"), \
        result.stdout.str()[-3000:]


def test_prepare_runs_in_the_cases_thread_before_its_job(pytester, marks):
    pytester.makepyfile(test_jobs=JOBS + '''
import threading


def ready(palw_session, key):
    if key == "unready":
        raise ValueError("prepare failed")
    mark(f"prepared-{key}-in-{threading.current_thread().name}")
    return f"{key} prepared"


@ahead(keys=lambda item: [item.callspec.params["key"]], prepare=ready)
def prepared(palw_session, key, value):
    assert (MARKS / f"prepared-{key}-in-MainThread").exists()
    assert value == f"{key} prepared"
    return key


@pytest.mark.parametrize("key", ["a", "b", "unready"])
def test_prepared(key, prepared):
    assert prepared(key) == key
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"passed": 2, "failed": 1}, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*ValueError: prepare failed*", "FAILED test_jobs.py::test_prepared[[]unready[]]*"])
    assert _ran(marks) == {"prepared-a-in-MainThread", "prepared-b-in-MainThread"}


def test_a_stopped_run_waits_for_its_running_jobs_and_drops_the_rest(pytester, marks):
    pytester.makepyfile(test_jobs=JOBS + '''

def test_fails_first():
    assert False


@pytest.mark.parametrize("key", ["a", "b", "c", "d", "e", "f", "g", "h"])
def test_keyed(key, keyed):
    assert keyed(key) == key.upper()
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-x")
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"failed": 1}


def test_an_xdist_worker_starts_a_job_when_its_case_asks(pytester, marks):
    pytester.makepyfile(test_jobs=JOBS + '''

def test_nothing_started_ahead(palw_session):
    assert palw_session.worker_id is not None
    assert palw_session.ahead.futures == {}


@pytest.mark.parametrize("key", ["a", "b"])
def test_keyed(key, keyed):
    assert keyed(key) == key.upper()
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "1")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"passed": 3}
    assert _ran(marks) == {"keyed-a-ran", "keyed-b-ran"}


def test_a_worker_s_job_gets_the_environment_its_session_set_up(pytester, marks):
    """A worker's configure sets its CUDA_VISIBLE_DEVICES after the session object exists: a job it
    starts later must hand its child that environment (here a variable the process running the
    cases sets at its session start; xdist's controller does not, so a worker cannot inherit it)."""
    pytester.makeconftest("""
        import os

        def pytest_sessionstart(session):
            if session.config.pluginmanager.get_plugin("dsession") is None:  # not xdist's controller
                os.environ["AHEAD_SESSION_VARIABLE"] = "set at session start"
    """)
    pytester.makepyfile(test_jobs=JOBS + '''

@ahead
def session_variable(palw_session):
    return palw_session.ahead.run([sys.executable, "-c", "import os; print(os.environ['AHEAD_SESSION_VARIABLE'])"],
                                  capture_output=True, text=True, check=True).stdout.strip()


def test_session_variable(session_variable):
    assert session_variable == "set at session start"
''')
    for workers in (("-n", "1"), ("-p", "no:xdist")):  # a PALW option starts the session at configure
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palw-gpu-slots=0", *workers)
        assert result.ret == 0, result.stdout.str()[-3000:]
        assert result.parseoutcomes() == {"passed": 1}


def test_keys_of_equal_value_and_other_types_are_other_jobs(pytester, marks):
    pytester.makepyfile(test_jobs=JOBS + '''

@ahead(keys=lambda item: [item.callspec.params["key"]])
def typed(palw_session, key):
    return type(key).__name__


@pytest.mark.parametrize("key", [1, True, 1.0])
def test_typed(key, typed):
    assert typed(key) == type(key).__name__
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"passed": 3}


def test_two_jobs_of_one_name_in_two_files_are_refused(pytester, marks):
    job = ("from pytest_palw.ahead import ahead\n\n\n@ahead\ndef same(palw_session):\n    return 1\n\n\n"
           "def test_same(same):\n    pass\n")
    pytester.makepyfile(test_one=job, test_two=job)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 2, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*TypeError: two @ahead jobs are named 'same'*rename one*"])
