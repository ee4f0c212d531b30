"""A case that failed once is not certified, and a case gets the plugin's own fixture values.

The same toy suite and real plugin as test_verdict_routes.py (whose plain run is CERTIFIED: the
control), with the retry plugins vendors keep installed (flaky, pytest-rerunfailures, pytest-retry;
the test extras install them, so they autoload here as in a vendor's venv) and conftests that
retry a body or swap what a case receives. Each is refused with its own reason.
"""

from __future__ import annotations

import hashlib

import pytest
from test_verdict_routes import TOY_CASES, _reasons, _refused, _verdict, toy  # noqa: F401 (toy: a fixture)

FAILS_ONCE = "test_index[2]"  # TOY_FAIL_ONCE: fails its first attempt in a process, passes the next
CASE = "conformance/test_claims.py::test_index[2]"
RETRIED = "case(s) whose body was entered more than once or raised in its call"
SWAPPED = "case(s) received a fixture value the plugin's fixture did not return"

PYFUNC_RETRY = '''
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    try:
        pyfuncitem.obj(**arguments)
    except AssertionError:
        pyfuncitem.obj(**arguments)  # a second chance
    return True
'''

FIXTURE_SETUP_SWAP = '''
from types import SimpleNamespace

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    value = yield
    if fixturedef.argname != "palw_session":
        return value
    fake = SimpleNamespace(config=1)
    fixturedef.cached_result = (fake, *fixturedef.cached_result[1:])
    return fake
'''

FUNCARGS_SWAP = '''
from types import SimpleNamespace

import pytest


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item):
    if "palw_session" in getattr(item, "funcargs", {}):
        item.funcargs["palw_session"] = SimpleNamespace(config=1)
'''

SPOOFED_MODULE = '''
from types import SimpleNamespace

import pytest


def palw_session():
    return SimpleNamespace(config=1)


palw_session.__module__ = "_pytest.fixtures"  # claims to be pytest's own
palw_session = pytest.fixture(palw_session)
'''

AUTOUSE = '''
import pytest

SEEN = []


@pytest.fixture(autouse=True)
def toy_autouse_around_each_case(request):
    SEEN.append(request.node.nodeid)
    yield
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_flaky_forced_retry_is_refused(toy, monkeypatch, workers):
    """flaky reruns the whole protocol and never logs the failed attempt: pytest sees a pass."""
    monkeypatch.setenv("TOY_FAIL_ONCE", FAILS_ONCE)
    document, result = toy("--force-flaky", "--max-runs=3", *workers)
    assert result.ret == 0 and document["summary"]["failed"] == 0, result.stdout.str()[-2000:]
    _refused(document, result, f"1 {RETRIED} (first: {CASE} (entered 2 times, raised AssertionError))")
    case = next(case for case in document["cases"] if case["id"] == CASE)
    assert case["entries"] == 2 and case["raised"] == ["AssertionError"]


@pytest.mark.parametrize("retry", [["--reruns", "2"], ["--retries", "2"]], ids=["rerunfailures", "pytest-retry"])
def test_a_retry_plugin_is_refused(toy, monkeypatch, retry):
    monkeypatch.setenv("TOY_FAIL_ONCE", FAILS_ONCE)
    document, result = toy("-p", "no:flaky", *retry)  # flaky reads the "flaky" mark pytest-retry sets
    _refused(document, result, f"1 {RETRIED} (first: {CASE} (entered 2 times, raised AssertionError))")


def test_a_conftest_that_calls_the_body_again_is_refused(toy, monkeypatch, pytester):
    (pytester.path / "conftest.py").write_text(PYFUNC_RETRY)
    monkeypatch.setenv("TOY_FAIL_ONCE", FAILS_ONCE)
    document, result = toy()
    assert result.ret == 0
    _refused(document, result, f"1 {RETRIED} (first: {CASE} (entered 2 times, raised AssertionError))")


def test_a_honest_run_enters_each_body_once(toy):
    document, result = toy()
    assert _verdict(document)["certified"] is True, _reasons(document)
    assert {(case["entries"], tuple(case["raised"])) for case in document["cases"]
            if case["outcome"] == "passed"} == {(1, ())}


@pytest.mark.parametrize("swap", [FIXTURE_SETUP_SWAP, FUNCARGS_SWAP], ids=["pytest_fixture_setup", "item.funcargs"])
def test_a_fixture_value_swapped_under_the_plugins_definition_is_refused(toy, pytester, swap):
    """The definition stays the plugin's; the object the case receives is not what it returned."""
    (pytester.path / "conftest.py").write_text(swap)
    document, result = toy()
    assert result.ret == 0
    _refused(document, result, f"1 {SWAPPED} (palw_session) (first: conformance/test_other.py::test_session)")
    assert "come from outside the plugin" not in _reasons(document)


def test_an_override_that_claims_to_be_pytests_is_refused(toy, pytester):
    """The origin is the file the fixture's function was defined in, not its __module__."""
    (pytester.path / "conftest.py").write_text(SPOOFED_MODULE)
    document, result = toy()
    assert result.ret == 0
    _refused(document, result, "1 fixture(s) the suite uses come from outside the plugin and the suite "
             f"(palw_session ({pytester.path / 'conftest.py'})")


def test_a_honest_run_with_pytest_asyncio_installed_is_certified(toy):
    """pytest-asyncio's autouse event_loop_policy fixture is not one the suite requests: no replacement."""
    document, result = toy()
    assert any(plugin.startswith("pytest-asyncio ") for plugin in document["pytest"]["plugins"])
    assert _verdict(document)["certified"] is True, _reasons(document)


def test_an_autouse_fixture_of_a_plugin_is_named_not_a_replacement(toy, pytester):
    """An installed plugin's autouse fixture the suite never requests runs around each case; it
    replaces nothing a case receives, so it is no verdict reason: the certificate names its module
    with its sha256 (and `palw certify` loads no such plugin)."""
    (pytester.path / "toy_autouse.py").write_text(AUTOUSE)
    document, result = toy("-p", "toy_autouse")
    assert _verdict(document)["certified"] is True, _reasons(document)
    local = {entry["module"]: entry for entry in document["pytest"]["local"]}
    assert local["toy_autouse"]["sha256"] == hashlib.sha256((pytester.path / "toy_autouse.py").read_bytes()).hexdigest()
