"""The repository's conftest.py: the options of the developer's run stay with that run."""

from pytest_palw.paths import PROJECT_ROOT


def test_pytest_addopts_apply_to_the_run_and_do_not_reach_its_children(pytester, monkeypatch):
    pytester.makeconftest((PROJECT_ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_child="import os\n\n\ndef test_env():\n    assert 'PYTEST_ADDOPTS' not in os.environ\n")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-v")  # after pytester, which clears it when it starts
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:palw")
    result.assert_outcomes(passed=1)
    assert "test_child.py::test_env PASSED" in result.stdout.str()  # -v applied to the run itself
