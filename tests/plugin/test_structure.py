"""xdist's shape: the session (every process) and the controller (the controlling process only)
never import each other; the plugin registers the controller outside the workers."""

import ast
from pathlib import Path

import pytest_palw
from pytest_palw.fixtures.models.profiles import PROFILES
from pytest_palw.runtime.preflight.resolve import HANDED_MODEL, Handover, ResolvedModel

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
