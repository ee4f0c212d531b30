"""selection.partial_run_reasons: every way of narrowing a run is named, a whole run is clean."""

from pytest_palw.paths import CONFORMANCE_DIR
from pytest_palw.selection import conformance_modules, partial_run_reasons


def _all_modules_ran():
    return [f"conformance/{name}::test_x" for name in sorted(conformance_modules())]


def test_the_whole_suite_has_no_reason():
    assert partial_run_reasons(["conformance"], 0, _all_modules_ran()) == []
    assert len(conformance_modules()) >= 10  # one module per claim


def test_deselection_is_named_with_its_count():
    [reason] = partial_run_reasons([], 7, _all_modules_ran())
    assert reason.startswith("partial run: 7 conformance case(s) deselected")


def test_node_ids_are_named():
    [reason] = partial_run_reasons(["conformance/test_class_counts.py::test_x"], 0, _all_modules_ran(),
                                   CONFORMANCE_DIR.parent)
    assert "chosen by node id (conformance/test_class_counts.py::test_x)" in reason


def test_missing_modules_are_counted():
    [reason] = partial_run_reasons(["conformance/test_class_counts.py"], 0,
                                   ["conformance/test_class_counts.py::test_class_count[q4_k]"])
    total = len(conformance_modules())
    assert f"{total - 1} of {total} claim modules not run" in reason


def test_runs_outside_the_suite_are_not_judged():
    assert partial_run_reasons(["tests"], 0, ["tests/unit/test_codec.py::test_x"]) == []
    assert partial_run_reasons(["conformance", "tests/plugin/test_selection.py::test_x"], 0, _all_modules_ran(),
                               CONFORMANCE_DIR.parent) == []


def test_a_module_named_by_import_path_is_a_partial_run():
    """`pytest --pyargs pytest_palw.conformance.test_class_counts`: pytest names the cases
    ``::test_...`` (no file); the controller names them by the reports' locations (inventory.case_id)."""
    [reason] = partial_run_reasons(["pytest_palw.conformance.test_class_counts"], 0,
                                   ["conformance/test_class_counts.py::test_class_count[q4_k]"])
    total = len(conformance_modules())
    assert f"{total - 1} of {total} claim modules not run" in reason
