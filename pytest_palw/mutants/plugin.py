"""The pytest plugin of every `palw mutants` tier run (``-p pytest_palw.mutants.plugin``: xdist
forwards the option, so the controller and each worker load it before anything else of ours).

It records which cases failed (the controller writes them to $PALW_MUTANT_REPORT: a junit report
of hundreds of failing cases takes minutes to write, this takes nothing) and, for a fixtures
mutant, imports ``pytest_palw.fixtures`` from the mutated copy in $PALW_MUTANT_FIXTURES, its
models cached in $PALW_MUTANT_MODELS.

Nothing of pytest_palw but the bare package is imported before that swap: a module imported
earlier would keep the unmutated fixtures, and pytest_palw.paths' FIXTURES_DIR (the goldens)
follows the copy only if it is first imported after it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

import pytest_palw

FIXTURES_ENV = "PALW_MUTANT_FIXTURES"
MODELS_ENV = "PALW_MUTANT_MODELS"
REPORT_ENV = "PALW_MUTANT_REPORT"

_failed_here: set[str] = set()


def use_fixtures_copy(copy: str, models: str) -> None:
    """Make ``pytest_palw.fixtures`` (subpackages too: they are found through its __path__) the
    package in ``copy``, and cache the models it generates in ``models``."""
    for name in [n for n in sys.modules if n == "pytest_palw.fixtures" or n.startswith("pytest_palw.fixtures.")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location("pytest_palw.fixtures", os.path.join(copy, "__init__.py"),
                                                  submodule_search_locations=[copy])
    module = importlib.util.module_from_spec(spec)
    sys.modules["pytest_palw.fixtures"] = module
    spec.loader.exec_module(module)
    pytest_palw.fixtures = module

    from pytest_palw.fixtures.models import model_cache  # the copy's

    directory = Path(models)
    directory.mkdir(parents=True, exist_ok=True)
    model_cache.models_dir = lambda: directory


# At import, i.e. at -p time: before collection and before the palw plugin imports the fixtures.
if os.environ.get(FIXTURES_ENV):
    use_fixtures_copy(os.environ[FIXTURES_ENV], os.environ[MODELS_ENV])


def pytest_configure(config) -> None:
    """In a tier run only: a failing property test fails at its first counterexample (shrinking it
    takes minutes and judges nothing), and no failing example is written to .hypothesis/."""
    if os.environ.get(REPORT_ENV):
        try:
            from hypothesis import Phase, settings
        except ImportError:  # no property tests then
            return
        settings.register_profile("palw-mutants", database=None,
                                  phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
        settings.load_profile("palw-mutants")


@pytest.hookimpl(trylast=True)  # after -m and -k deselected: the cases that run are counted
def pytest_collection_modifyitems(items) -> None:
    """In a tier run only: the modules of few cases first, and in a module the functions of few
    cases first; a module's cases stay together (its fixtures are made once) and each function's
    cases keep their order. A mutant's run stops at its first new failure, and the modules and
    functions of one case or a few (the refusals, the loader, the codec, the seed tools) kill most
    mutants; the hundreds of one-case-per-launch cases come last. The verdict does not depend on
    the order, only its time."""
    if not os.environ.get(REPORT_ENV):
        return
    in_module = Counter(item.path for item in items)
    in_function = Counter(_function(item) for item in items)
    # the path keeps a module's cases together among modules of one size; stable: a function's cases
    # and the functions of one size in a module keep their order
    items.sort(key=lambda item: (in_module[item.path], str(item.path), in_function[_function(item)]))


def _function(item) -> tuple:
    return item.path, getattr(item.cls, "__qualname__", None), getattr(item, "originalname", item.name)


def pytest_collectreport(report) -> None:
    if report.failed:
        _failed_here.add(report.nodeid or "<collection>")


def pytest_runtest_logreport(report) -> None:
    if report.failed:  # a failed call, or an error in setup / teardown (a crashed xdist worker too)
        _failed_here.add(report.nodeid)


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get(REPORT_ENV)
    if path and not hasattr(session.config, "workerinput"):  # the controller sees every report
        from pytest_palw.files import write_whole

        write_whole(Path(path), json.dumps({"failed": sorted(_failed_here), "exitstatus": int(exitstatus),
                                            "stopped": bool(session.shouldfail)}))
