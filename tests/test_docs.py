"""The documents name only what exists: every repository path a document writes in backticks (one
whose first part is a top-level entry of the checkout) is a file or directory of the tree."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("docs/architecture.md", "README.md", "benchmarks/RESULTS.md")


def top_level() -> set[str]:
    """The checkout's tracked top-level entries (a developer's ignored `.carry/` or `.venv/` is not one)."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout:
        return {line.split("/")[0] for line in listed.stdout.splitlines()}
    return {entry.name for entry in ROOT.iterdir()}


def named_paths(text: str) -> list[str]:
    """The repository paths in ``text``'s backticks (the first word of each quoted span)."""
    top = top_level()
    found = []
    for span in re.findall(r"`([^`\n]+)`", text):
        word = span.split()[0].rstrip(",.:;)")
        if "/" in word and word.split("/")[0] in top:
            found.append(word)
    return found


def test_named_paths_finds_paths_and_leaves_other_words():
    text = "`pytest_palw/plugin.py` and `benchmarks/x.sh step` and `.carry/whl` and `$OUT/r.tgz` and `palw build`"
    assert named_paths(text) == ["pytest_palw/plugin.py", "benchmarks/x.sh"]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_path_a_document_names_exists(document):
    paths = named_paths((ROOT / document).read_text())
    assert paths, f"{document} names no path: the check would be vacuous"
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert missing == [], f"{document} names paths that do not exist: {missing}"


def test_the_readme_is_for_users():
    """The README stays short (history in benchmarks/RESULTS.md and CHANGELOG.md, the tree in docs/)."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_ci_runs_the_readmes_test_command():
    """.ci/run calls the README's test command, options and all: what CI times is what users run."""
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in readme.splitlines() if "pip install -e '.[test]'" in line and "pytest" in line]
    assert len(commands) == 1, commands
    pytest_command = commands[0].split("&&")[-1].strip()
    assert pytest_command.startswith("python3 -m pytest"), pytest_command
    assert pytest_command in [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
