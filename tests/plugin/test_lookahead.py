"""The lookahead (pytest_palw.lookahead): a family's jobs run on --palw-lookahead threads for the
next cases of this process's own queue, each job once, its value or its error reaching its own case;
no job is in flight while a case outside the family runs; 0 threads runs each job in its case."""

from __future__ import annotations

import json

import pytest

FAMILY = '''
import json
import os
import threading
import time
from pathlib import Path

import pytest

MARKS = Path(os.environ["LOOKAHEAD_MARKS"])
SLOW = set(filter(None, os.environ.get("LOOKAHEAD_SLOW", "").split(",")))


def key_of(item):
    if "evidence" not in getattr(item, "fixturenames", ()):
        return None
    return (item.callspec.params["n"],)


def job(prefix, n):
    start = time.monotonic()
    if str(n) in SLOW:
        time.sleep(1.0)
    if n == 13:
        raise ValueError("job 13 broke")
    record = {"n": n, "thread": threading.current_thread().name, "pid": os.getpid(),
              "start": start, "end": time.monotonic()}
    (MARKS / f"job-{n}-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}").write_text(json.dumps(record))
    return f"{prefix}{n}"


@pytest.fixture
def evidence(request, palw_session):
    return lambda: palw_session.lookahead.take(request.node, key_of, job, "value-")


@pytest.mark.parametrize("n", range(6))
def test_family(n, evidence):
    assert evidence() == f"value-{n}"
    (MARKS / f"case-{n}").write_text(json.dumps({"pid": os.getpid(), "at": time.monotonic()}))
'''


@pytest.fixture
def marks(tmp_path, monkeypatch):
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("LOOKAHEAD_MARKS", str(folder))
    monkeypatch.delenv("LOOKAHEAD_SLOW", raising=False)
    monkeypatch.delenv("PALW_LOOKAHEAD", raising=False)
    return folder


def _jobs(marks) -> list[dict]:
    return sorted((json.loads(path.read_text()) for path in marks.glob("job-*")), key=lambda job: job["start"])


def test_jobs_run_ahead_on_the_threads_once_each(pytester, marks, monkeypatch):
    monkeypatch.setenv("LOOKAHEAD_SLOW", "0")  # case 0 waits 1 s for its job: the next ones start meanwhile
    pytester.makepyfile(test_family=FAMILY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palw-lookahead", "2")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"passed": 6}
    jobs = _jobs(marks)
    assert sorted(job["n"] for job in jobs) == list(range(6)), "each case's job runs once"
    assert {job["thread"].split("_")[0] for job in jobs} == {"palw-lookahead"}
    # case 0's ask started its job and those of the next 4 cases (2 a thread); the second thread ran
    # them while job 0 slept; case 1's ask started job 5
    first_case = json.loads((marks / "case-0").read_text())["at"]
    assert [job["n"] for job in jobs if job["start"] < first_case] == [0, 1, 2, 3, 4], jobs


def test_no_threads_runs_each_job_in_its_own_case(pytester, marks):
    pytester.makepyfile(test_family=FAMILY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palw-lookahead", "0")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"passed": 6}
    jobs = _jobs(marks)
    assert [job["n"] for job in jobs] == list(range(6))
    assert {job["thread"] for job in jobs} == {"MainThread"}
    for job in jobs:  # each job ended before its case's body went on
        assert job["end"] <= json.loads((marks / f"case-{job['n']}").read_text())["at"]


def test_a_job_s_error_fails_its_own_case_only(pytester, marks):
    pytester.makepyfile(test_family=FAMILY.replace("range(6)", "[11, 12, 13, 14, 15]"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palw-lookahead", "2")
    assert result.parseoutcomes() == {"passed": 4, "failed": 1}, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*ValueError: job 13 broke*", "FAILED test_family.py::test_family[[]13[]]*"])


def test_no_job_runs_while_a_case_outside_the_family_runs(pytester, marks, monkeypatch):
    """Case 1 is skipped before it asks: its job, started by case 0 and slow, is still running when
    the next case, outside the family, starts: that case waits for it."""
    monkeypatch.setenv("LOOKAHEAD_SLOW", "1")
    pytester.makepyfile(test_family=FAMILY.replace("range(6)", "[0, pytest.param(1, marks=pytest.mark.skip)]") + '''

def test_outside_the_family():
    jobs = [json.loads(path.read_text()) for path in MARKS.glob("job-*")]
    assert sorted(job["n"] for job in jobs) == [0, 1], "the skipped case's job had not finished"
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palw-lookahead", "2")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"passed": 2, "skipped": 1}


def test_xdist_workers_look_ahead_in_their_own_queues(pytester, marks):
    """Every case gets its own job's value in whichever worker runs it; a job runs in the process
    of a case that was queued there (a case another worker stole may have run twice, judged once)."""
    pytester.makepyfile(test_family=FAMILY.replace("range(6)", "range(20, 60)"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palw-lookahead", "2", "-n", "2",
                                           "--dist", "worksteal")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.parseoutcomes() == {"passed": 40}
    jobs = _jobs(marks)
    ran_in = {n: json.loads((marks / f"case-{n}").read_text())["pid"] for n in range(20, 60)}
    for n, pid in ran_in.items():
        assert any(job["n"] == n and job["pid"] == pid for job in jobs), f"case {n} got no job of its own process"
    assert {job["thread"].split("_")[0] for job in jobs} == {"palw-lookahead"}
    assert len(set(ran_in.values())) == 2


@pytest.mark.parametrize("value", ["-1", "four"])
def test_a_wrong_thread_count_is_a_usage_error_in_one_line(pytester, marks, value):
    pytester.makepyfile(test_family=FAMILY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--palw-lookahead={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    assert f"--palw-lookahead {value!r} is not a count" in output
    assert "Traceback" not in output


def test_a_worker_whose_queue_cannot_be_read_looks_no_further_than_its_case():
    """An xdist of another design (no ``torun.lock()``): the case's own job only, never the
    collection's next cases (in a worker those may run anywhere)."""
    from types import SimpleNamespace

    from pytest_palw.lookahead import upcoming

    class WorkerInteractor:  # xdist < 3.6 kept a plain queue
        torun = SimpleNamespace(get=lambda: None)
        nextitem_index = 1

    manager = SimpleNamespace(get_plugins=lambda: [WorkerInteractor()])
    config = SimpleNamespace(workerinput={"workerid": "gw0"}, pluginmanager=manager)
    items = [SimpleNamespace(nodeid=f"t.py::c[{i}]", config=config) for i in range(3)]
    session = SimpleNamespace(items=items, stash={})
    for item in items:
        item.session = session
    assert upcoming(items[0], 4) == []
    del config.workerinput  # one process: the collection after the case
    assert upcoming(items[0], 4) == items[1:]
