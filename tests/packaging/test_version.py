"""The version has one home, pytest_palw.__version__: the distribution's metadata reads it."""

import importlib.metadata
from pathlib import Path

import pytest

import pytest_palw

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_pyproject_takes_the_version_from_the_package():
    project = tomllib.loads(PYPROJECT.read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pytest_palw.__version__"}


def test_the_installed_metadata_states_the_package_version():
    assert importlib.metadata.version("pytest-palw") == pytest_palw.__version__
