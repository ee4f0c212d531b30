"""A certificate speaks for the whole suite: a run that left claims out says which and why.

pytest can narrow a run many ways (-k, -m, --deselect, --lf, a file or a node id as argument);
each leaves cases of the suite unrun, and an unrun claim is not a certified one.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path

from pytest_palw import paths


def conformance_modules() -> set[str]:
    """The suite's claim modules, by file name."""
    return {path.name for path in paths.CONFORMANCE_DIR.glob("test_*.py")}


@functools.lru_cache(maxsize=256)  # a collection's 3 075 cases come from a few files: resolved once each
def in_suite(path) -> bool:
    return paths.CONFORMANCE_DIR in Path(path).resolve().parents


def argument_path(arg: str, invocation_dir, pyargs: bool = False) -> Path:
    """The file or directory a pytest argument names: a path (a node id without its ``::`` part),
    or with --pyargs a module (``pytest_palw.conformance`` is the installed suite)."""
    name = arg.split("::")[0]
    if pyargs:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            spec = None
        if spec is not None:
            locations = list(spec.submodule_search_locations or [])
            if locations or spec.origin:
                return Path(locations[0] if locations else spec.origin).resolve()
    return (Path(invocation_dir) / name).resolve()


def reaches_suite(config) -> bool:
    """Do this run's arguments (the command line's, else the ini's testpaths) reach the conformance suite?"""
    args = config.args or []
    suite = paths.CONFORMANCE_DIR
    for arg in args:
        target = argument_path(arg, config.invocation_params.dir, config.option.pyargs)
        if target == suite or suite in target.parents or target in suite.parents:
            return True
    return not args and Path(config.rootpath) == suite.parent


def partial_run_reasons(args: Iterable[str], deselected: int, ran_case_ids: Iterable[str],
                        invocation_dir=".", pyargs: bool = False) -> list[str]:
    """Why this run may not cover the whole suite, as far as its arguments tell. The verdict joins
    the reports with the expected inventory: these only name the cause of cases found missing.
    ``ran_case_ids``: the inventory's names of the reported cases; node ids count when they name
    a case of the suite."""
    reasons = []
    if deselected:
        reasons.append(f"partial run: {deselected} conformance case(s) deselected (-k, -m, "
                       "--deselect or --lf): run the whole suite to certify")
    by_id = [arg for arg in args if "::" in arg and in_suite(argument_path(arg, invocation_dir, pyargs))]
    if by_id:
        reasons.append(f"partial run: cases chosen by node id ({by_id[0]}): run the whole suite to certify")
    ran_modules = {case_id.split("::", 1)[0].rsplit("/", 1)[-1] for case_id in ran_case_ids}
    modules = conformance_modules()
    missing = sorted(modules - ran_modules)
    if missing and ran_modules & modules:
        reasons.append(f"partial run: {len(missing)} of {len(modules)} claim modules not run "
                       f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}): "
                       "run `pytest conformance` to certify")
    return reasons


# pytest's options that run no case body, and what each does instead.
# --setup-plan sets setuponly too: it is named first.
RUN_MODES = {"collectonly": "--collect-only: the cases were collected, none ran",
             "setupplan": "--setup-plan: fixtures were planned, no case body ran",
             "setuponly": "--setup-only: fixtures were set up, no case body ran"}


def run_mode_reasons(config) -> list[str]:
    """A run that by its options runs no case body certifies nothing (the first such option named)."""
    for dest, meaning in RUN_MODES.items():
        if getattr(config.option, dest, False):
            return [f"{meaning}: run without it to certify"]
    return []


# syrupy's flags that write goldens instead of checking them (their option dests).
GOLDEN_WRITING_OPTIONS = {"update_snapshots": "--snapshot-update",
                          "update_new_snapshots_only": "--snapshot-update-new-only"}


def golden_recording_reasons(config) -> list[str]:
    """A run that writes goldens compares nothing with them: it is never certified."""
    used = [flag for dest, flag in GOLDEN_WRITING_OPTIONS.items() if getattr(config.option, dest, False)]
    if not used:
        return []
    return [f"goldens were recorded, not checked ({used[0]}): rerun without it to certify"]
