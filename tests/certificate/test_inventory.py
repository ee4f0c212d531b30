"""The expected inventory: read from the suite's sources, equal to what a plain collection of the
suite yields, refusing the patterns it cannot enumerate, and stated compactly in a certificate."""

from __future__ import annotations

import pytest

from pytest_palw.certificate import inventory
from pytest_palw.fixtures.oracles.launch_table import V1_COUNT, V2_COUNT
from pytest_palw.paths import CONFORMANCE_DIR, PROJECT_ROOT


@pytest.fixture(scope="module")
def suite():
    return inventory.build()


def test_the_inventory_is_what_a_plain_collection_of_the_suite_yields(suite, pytester):
    """The coverage check: a case pytest would collect that the inventory does not name (a fixture
    with params, a pytest_generate_tests, a test class) fails here, in CI, before a certificate can
    be short of it; so does a case the inventory names that pytest does not collect."""
    result = pytester.runpytest_subprocess(str(CONFORMANCE_DIR), "--co", "-q", "-p", "no:cacheprovider",
                                           f"--rootdir={CONFORMANCE_DIR.parent}", timeout=600)
    collected = {line.strip() for line in result.outlines if line.startswith("conformance/")}
    assert collected, "\n".join(result.outlines[-20:] + result.errlines[-20:])
    assert collected == set(suite.ids), (sorted(collected - set(suite.ids))[:5], sorted(set(suite.ids) - collected)[:5])


def test_index_cases_come_from_the_launch_table(suite):
    functions = {family.function: family for family in suite.families}
    assert functions["conformance/test_launch_order.py::test_mixed_launch"].params == tuple(map(str, range(V2_COUNT)))
    assert functions["conformance/test_reject_index.py::test_reject_v1"].params == tuple(map(str, range(V1_COUNT)))
    assert functions["conformance/test_reject_index.py::test_fresh_context_traces_after_rejection"].params == (
        "0", str(V2_COUNT // 2), str(V2_COUNT - 1))


def test_tiers_and_the_metal_exemption(suite):
    assert suite.tiers["conformance/test_reject_index.py::test_reject_v2[0]"] == "pinned"
    assert suite.tiers["conformance/test_producer_faults.py::test_clean_captures_are_committed"] == "gpu"
    assert suite.tiers["conformance/test_launch_order.py::test_discovery_completes"] == "cpu"
    assert list(suite.exempt) == ["conformance/test_metal_hook.py::test_metal_dispatch_hook_reports_dispatches"]
    assert "Apple GPU" in suite.exempt["conformance/test_metal_hook.py::test_metal_dispatch_hook_reports_dispatches"]
    assert len(suite.required) == len(suite.ids) - 1


def test_the_compact_form_gives_the_ids_and_their_digest_back(suite):
    document = suite.as_dict()
    assert document["size"] == len(suite.ids) and document["required"] == len(suite.required)
    expanded = inventory.expand(document)
    assert sorted(expanded) == list(suite.ids)
    assert inventory.ids_digest(expanded) == document["sha256"] == suite.digest
    mixed = next(f for f in document["functions"] if f["function"].endswith("::test_mixed_launch"))
    assert mixed["params"] == [f"0..{V2_COUNT - 1}"]


def test_compact_runs():
    assert inventory.compact(("0", "1", "2", "5", "a", "7", "8")) == ["0..2", "5", "a", "7..8"]
    with pytest.raises(inventory.InventoryError, match="reads as a range"):
        inventory.compact(("1..2",))


def test_claims_come_with_the_inventory(suite):
    assert set(suite.claims) == {path.name for path in CONFORMANCE_DIR.glob("test_*.py")}
    assert suite.claims["test_qwen35moe.py"]["scope"] == "seed patch, src/models/qwen35moe.cpp"


@pytest.mark.parametrize("source, message", [
    ("import pytest\n@pytest.mark.parametrize('x', [object()])\ndef test_a(x): pass\n", "has no id"),
    ("import pytest\n@pytest.mark.parametrize('x', [1, 1])\ndef test_a(x): pass\n", "share a parameter id"),
    ("import pytest\n@pytest.mark.parametrize('x', [1], ids=str)\ndef test_a(x): pass\n", "ids= must be a list"),
    ("import pytest\n@pytest.mark.parametrize('x', [])\ndef test_a(x): pass\n", "empty parametrization"),
    ("import pytest\n@pytest.mark.parametrize('x', [pytest.param(1, marks=pytest.mark.skip)])\n"
     "def test_a(x): pass\n", "parameter with marks"),
    ("class TestA:\n    def test_a(self): pass\n", "test classes are not enumerated"),
    ("import nonexistent_module_x\n", r"cannot be imported \(ModuleNotFoundError"),
    ("def pytest_generate_tests(metafunc): pass\ndef test_a(): pass\n", "pytest_generate_tests"),
    ("import pytest\n@pytest.mark.parametrize('x', [1], indirect=True)\ndef test_a(x): pass\n", "indirect"),
    ("import pytest\n@pytest.mark.parametrize('x', [1], ids=['caf\u00e9'])\ndef test_a(x): pass\n", "has no id"),
    ("import pytest\n@pytest.mark.palw_launch\n@pytest.mark.parametrize('index', [0])\ndef test_a(index): pass\n",
     "is not \\(label, stream"),
    ("import pytest\n@pytest.mark.palw_launch('x', stream='v3')\n@pytest.mark.parametrize('index', [0])\n"
     "def test_a(index): pass\n", "is not \\(label, stream"),
    ("import pytest\n@pytest.mark.palw_launch('x')\n@pytest.mark.parametrize('index', [0, 1])\n"
     "def test_a(index): pass\n", "one `index` parameter over its stream's launches"),
    ("import pytest\n@pytest.mark.palw_launch('x')\ndef test_a(): pass\n", "one `index` parameter"),
])
def test_what_the_inventory_cannot_name_is_refused(tmp_path, source, message):
    (tmp_path / "test_x.py").write_text(source)
    with pytest.raises(inventory.InventoryError, match=message):
        inventory.build(tmp_path)


def test_parameter_ids_as_pytest_gives_them(pytester):
    (pytester.path / "test_x.py").write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.palw_gpu\n"
        "@pytest.mark.parametrize('v', [2, 1])\n"
        "@pytest.mark.parametrize('f', ['a', None, True])\n"
        "def test_a(f, v): pass\n"
        "@pytest.mark.parametrize('a,b', [(1, 'x'), pytest.param(2, 'y', id='named')], ids=['first', None])\n"
        "@pytest.mark.palw_pinned\n"
        "def test_b(a, b): pass\n"
        "def helper(): pass\n"
        "def _test_private(): pass\n")
    built = inventory.build(pytester.path)
    expected = {f"conformance/test_x.py::test_a[{f}-{v}]" for f in ("a", "None", "True") for v in (2, 1)}
    assert set(built.ids) == expected | {"conformance/test_x.py::test_b[first]", "conformance/test_x.py::test_b[named]"}
    assert built.tiers["conformance/test_x.py::test_a[a-2]"] == "gpu"
    assert built.tiers["conformance/test_x.py::test_b[first]"] == "pinned"
    result = pytester.runpytest_subprocess("--co", "-q", "-p", "no:cacheprovider", "-p", "no:palw", "test_x.py")
    collected = {f"conformance/{line.strip()}" for line in result.outlines if "::" in line}
    assert collected == set(built.ids), result.outlines[-20:]


def test_a_function_pytest_does_not_collect_is_not_expected(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_a(): pass\ndef test_b(): pass\ntest_b.__test__ = False\n")
    assert inventory.build(tmp_path).ids == ("conformance/test_x.py::test_a",)


def _module(tmp_path, source: str):
    """``source`` as test_x.py in ``tmp_path``, imported as the worker has it."""
    import importlib.util

    (tmp_path / "test_x.py").write_text(source)
    spec = importlib.util.spec_from_file_location(f"witness_{tmp_path.name}", tmp_path / "test_x.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_witness_names_the_case_from_the_values_the_body_received(tmp_path):
    """What a case ran as: its function (the module's own, by its name) and the parameter set of
    the values it was called with; anything else is no witness."""
    module = _module(tmp_path, "import pytest\n"
                     "@pytest.mark.parametrize('v', [2, 1])\n"
                     "@pytest.mark.parametrize('f', ['a', pytest.param('b', id='named')])\n"
                     "def test_a(f, v): pass\n"
                     "test_alias = test_a\n"
                     "def test_plain(): pass\n")
    witness = inventory.witness_id
    assert witness("test_a", module.test_a, module, {"f": "b", "v": 1, "fixture": object()}) == (
        "conformance/test_x.py::test_a[named-1]")
    assert witness("test_alias", module.test_a, module, {"f": "a", "v": 2}) == "conformance/test_x.py::test_alias[a-2]"
    assert witness("test_plain", module.test_plain, module, {}) == "conformance/test_x.py::test_plain"
    assert witness("test_a", module.test_a, module, {"f": "c", "v": 1}) is None  # no such parameter set
    assert witness("test_a", module.test_plain, module, {}) is None  # another function under its name
    assert witness("test_a", lambda f, v: None, module, {"f": "a", "v": 2}) is None  # not the module's


def test_the_witness_tells_equal_values_apart_by_the_objects_pytest_hands_over(tmp_path):
    """0 == False, and an array's == is no bool: the body gets the mark's own objects."""
    module = _module(tmp_path, "import numpy as np\nimport pytest\n"
                     "@pytest.mark.parametrize('v', [0, False, np.zeros(2)], ids=['zero', 'false', 'array'])\n"
                     "def test_a(v): pass\n")
    values = module.test_a.pytestmark[0].args[1]
    names = [inventory.witness_id("test_a", module.test_a, module, {"v": value}) for value in values]
    assert names == [f"conformance/test_x.py::test_a[{case}]" for case in ("zero", "false", "array")]
    assert inventory.witness_id("test_a", module.test_a, module, {"v": 0.0}) is None  # equal to two of them


def test_a_report_is_named_by_its_file_not_by_its_node_id(tmp_path):
    """pytest names a case relative to the argument that found it (``--pyargs`` gives ``::test_x`` or
    a path outside the rootdir); the location is relative to the rootdir and says which file."""
    root = CONFORMANCE_DIR.parent
    assert inventory.case_id("conformance/test_a.py::test_b[1]", "conformance/test_a.py", root) == (
        "conformance/test_a.py::test_b[1]")
    assert inventory.case_id("::test_b[1]", f"{CONFORMANCE_DIR.name}/test_a.py", root) == (
        "conformance/test_a.py::test_b[1]")
    assert inventory.case_id("tests/test_a.py::test_b", "tests/test_a.py", PROJECT_ROOT) is None
    (tmp_path / "test_a.py").write_text("")
    assert inventory.case_id("test_a.py::test_b", "test_a.py", tmp_path) is None  # a file of that name elsewhere


def test_the_suite_digest_covers_each_part():
    digest = inventory.suite_digest()
    assert set(digest["parts"]) == {"conformance", "launch_table", "goldens", "schema", "plugin"}
    assert len(digest["sha256"]) == 64 and digest["plugin_version"]
    assert digest == inventory.suite_digest()  # stable


def test_the_plugin_part_is_all_of_its_code_the_callers_c_included():
    """The trace's callbacks are C the plugin compiles (runtime/binding/trace_caller.cpp): a
    certificate made with other callbacks must say so through its suite digest."""
    from pytest_palw import paths

    files = {path.relative_to(paths.PACKAGE_DIR).as_posix() for path in inventory.plugin_files()}
    assert {"runtime/binding/trace_caller.cpp", "runtime/binding/trace_caller.h", "runtime/caller.py",
            "certificate/verdict.py"} <= files
    on_disk = {path.relative_to(paths.PACKAGE_DIR).as_posix() for path in paths.PACKAGE_DIR.rglob("*")
               if path.suffix in (".py", ".h", ".c", ".cpp") and "__pycache__" not in path.parts}
    assets = {"conformance/", "fixtures/", "native/", "patches/"}
    assert files == {f for f in on_disk if not any(f.startswith(a) for a in assets)}
