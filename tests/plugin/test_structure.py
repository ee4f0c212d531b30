"""xdist's shape: the session (every process) and the controller (the controlling process only)
never import each other; the plugin registers the controller outside the workers."""

import ast
from pathlib import Path

import pytest

import pytest_palw
import pytest_palw.fixtures
from pytest_palw.fixtures.models.profiles import PROFILES
from pytest_palw.preflight.resolve import HANDED_MODEL, Handover, ResolvedModel

PACKAGE = Path(pytest_palw.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (at module level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


# docs/architecture.md, "Layers": a package imports only the packages before it.
LAYERS = ("builder", "runtime", "fixtures", "preflight", "probes", "certificate", "mutants", "cli")
PACKAGE_DIRS = {name: PACKAGE / name for name in LAYERS} | {"fixtures": Path(pytest_palw.fixtures.__file__).parent}


def package_graph(dirs: dict[str, Path]) -> dict[str, dict[str, str]]:
    """package -> {imported package: the first file that imports it} (module level or in a function)."""
    graph: dict[str, dict[str, str]] = {name: {} for name in dirs}
    for name, directory in dirs.items():
        for path in sorted(directory.rglob("*.py")):
            for module in _imports(path):
                parts = module.split(".")
                other = parts[1] if parts[0] == "pytest_palw" and len(parts) > 1 else None
                if other in dirs and other != name:
                    graph[name].setdefault(other, str(path.relative_to(directory.parent)))
    return graph


def cycle(graph: dict[str, dict[str, str]]) -> list[str]:
    """One import cycle between packages (a path that comes back to its start), or []."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for other in graph.get(node, {}):
            if state.get(other) == "open":
                return path[path.index(other):] + [other]
            if other not in state and (found := visit(other, path + [other])):
                return found
        state[node] = "done"
        return []

    return next((found for node in graph if node not in state and (found := visit(node, [node]))), [])


def test_the_cycle_finder_finds_a_cycle_of_three():
    graph = {"a": {"b": "a/x.py"}, "b": {"c": "b/y.py"}, "c": {"a": "c/z.py"}, "d": {"a": "d/w.py"}}
    assert cycle(graph) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b": "a/x.py"}, "b": {}}) == []


def test_no_import_cycle_between_packages():
    graph = package_graph(PACKAGE_DIRS)
    found = cycle(graph)
    assert not found, " -> ".join(found) + ": " + ", ".join(graph[a][b] for a, b in zip(found, found[1:]))


@pytest.mark.parametrize("name", LAYERS)
def test_a_package_imports_only_the_layers_below_it(name):
    graph = package_graph(PACKAGE_DIRS)
    above = set(LAYERS[LAYERS.index(name) + 1:])
    assert {other: where for other, where in graph[name].items() if other in above} == {}


def test_session_and_controller_do_not_import_each_other():
    assert "pytest_palw.controller" not in _imports(PACKAGE / "session.py")
    assert "pytest_palw.session" not in _imports(PACKAGE / "controller.py")


def test_the_controller_reads_no_objects_dict():
    assert "__dict__" not in (PACKAGE / "controller.py").read_text()


def test_the_handover_crosses_the_wire_unchanged(tmp_path):
    model = ResolvedModel("profile:tiny", tmp_path / "m.gguf", PROFILES["tiny"], (4096, 1733400000000000000, 7))
    handover = Handover(str(tmp_path / "palw-manifest.json"), "runtime: chosen", model)
    wire = handover.to_wire()
    assert all(isinstance(value, (str, dict)) for value in wire.values())
    assert Handover.from_wire(wire) == handover
    assert Handover.from_wire({}) == Handover()
    assert Handover(model=model).to_wire() == {HANDED_MODEL: model.to_wire()}
