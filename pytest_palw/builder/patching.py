"""The seed patch and its overlays: which ones, their digests, and applying them with `git apply`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pytest_palw import paths
from pytest_palw.builder.source import SDIST_NAME, SDIST_VERSION
from pytest_palw.cache import sha256_file
from pytest_palw.errors import PatchError, ToolMissingError

SERIES_NAME = "series"
OVERLAYS_ENV = "PALW_OVERLAYS_DIR"


@dataclass(frozen=True)
class PatchSet:
    """The seed patch then the overlays, in the order they apply."""

    seed: Path | None  # None: the empty set of an unpatched reference build
    seed_sha256: str
    overlays: tuple[tuple[Path, str], ...] = field(default_factory=tuple)

    @classmethod
    def empty(cls) -> "PatchSet":
        return cls(None, "", ())

    @property
    def is_empty(self) -> bool:
        return self.seed is None

    def describe(self) -> dict:
        """The manifest's ``seed_patch`` and ``overlays`` entries."""
        seed = None if self.is_empty else {"path": str(self.seed), "sha256": self.seed_sha256}
        return {"seed_patch": seed,
                "overlays": [{"path": str(path), "sha256": digest} for path, digest in self.overlays]}

    def marker_digests(self) -> dict:
        """What a `palw source` archive records, without machine paths."""
        return {"seed_patch": {"name": self.seed.name, "sha256": self.seed_sha256},
                "overlays": [{"name": path.name, "sha256": digest} for path, digest in self.overlays]}


def overlays_dir(override: Path | str | None = None) -> Path:
    """The overlay directory: the argument, else ``$PALW_OVERLAYS_DIR``, else patches/overlays."""
    chosen = override or os.environ.get(OVERLAYS_ENV) or paths.OVERLAYS_DIR
    return Path(chosen).expanduser().resolve()


def read_series(directory: Path) -> list[Path]:
    """The overlays named by ``directory/series``, one per line, ``#`` comments; missing file = none."""
    series = directory / SERIES_NAME
    if not series.is_file():
        return []
    overlays = []
    for number, line in enumerate(series.read_text().splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        path = directory / name
        if not path.is_file():
            raise PatchError(f"{series}:{number} names {name}, which does not exist in {directory}: "
                             "add the overlay or remove the line")
        overlays.append(path)
    return overlays


def current_patch_set(overlays: Path | str | None = None, seed: Path | None = None) -> PatchSet:
    seed = Path(seed or paths.SEED_PATCH)
    if not seed.is_file():
        raise PatchError(f"the seed patch {seed} is missing: restore it from git "
                         "(`git checkout -- patches/`)")
    listed = read_series(overlays_dir(overlays))
    return PatchSet(seed, sha256_file(seed), tuple((path, sha256_file(path)) for path in listed))


def check_recorded(marker: dict, patch_set: PatchSet, origin: Path) -> None:
    """A `palw source` archive is only usable with the patches it was made from."""
    recorded = {"seed_patch": marker.get("seed_patch"), "overlays": marker.get("overlays")}
    current = patch_set.marker_digests()
    if recorded == current:
        return
    what = ("seed patch" if recorded["seed_patch"] != current["seed_patch"] else "overlays")
    raise PatchError(f"{origin} is stale: it was patched with a different {what} than this "
                     f"checkout's ({_short(recorded)} vs {_short(current)}); make a new one with "
                     "`palw source --output FILE`")


def _short(digests: dict) -> str:
    parts = [(digests.get("seed_patch") or {}).get("sha256", "?")[:12]]
    parts += [f"{entry['name']}:{entry['sha256'][:12]}" for entry in digests.get("overlays") or []]
    return "+".join(parts)


# -- applying ------------------------------------------------------------------------------

def copy_tree(source: Path, destination: Path) -> None:
    """A private copy to patch; VCS metadata stays behind (a stray .git redirects `git apply`)."""
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(source, destination, symlinks=True, ignore=shutil.ignore_patterns(".git"))


def apply_patch_set(tree: Path, patch_set: PatchSet, only: tuple[str, ...] = ()) -> None:
    """Apply the seed patch then each overlay to ``tree`` in place; the first failure raises.
    ``only``: the directories to patch (a partial tree, e.g. the headers); the rest of each patch is skipped."""
    if patch_set.is_empty:
        return
    apply_patch(tree, patch_set.seed, role="seed patch", only=only)
    for path, _digest in patch_set.overlays:
        apply_patch(tree, path, role="overlay", only=only)


def apply_patch(tree: Path, patch: Path, *, role: str = "patch", only: tuple[str, ...] = ()) -> None:
    text = patch.read_bytes()
    # The seed file has no final newline (kept verbatim); git apply calls that corrupt.
    if not text.endswith(b"\n"):
        text += b"\n"
    git = shutil.which("git")
    if git is None:
        raise ToolMissingError("git is not installed; it applies the PALW patches: install it "
                               "(apt-get install git) or pass --source FILE made by `palw source`")
    # Stop git from finding an enclosing repository (say the cache sits inside a checkout):
    # inside one, git apply resolves paths from that repository's root and skips the rest.
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(Path(tree).resolve().parent), LC_ALL="C")
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    include = [f"--include={directory}/*" for directory in only]
    result = subprocess.run([git, "apply", "--verbose", "--whitespace=nowarn", *include, "-"], input=text,
                            cwd=tree, env=env, capture_output=True)
    if result.returncode != 0:
        stderr = result.stderr.decode("utf-8", "replace")
        raise PatchError(describe_failure(patch, text.decode("utf-8", "replace"), stderr, tree, role))


# -- explaining a failure -----------------------------------------------------------------------

_FAILED_HUNK = re.compile(r"^error: patch failed: (?P<file>.+):(?P<line>\d+)$", re.M)
_FILE_PROBLEM = re.compile(r"^error: (?P<file>[^:\n]+): (?P<reason>.+)$", re.M)
_HUNK_HEADER = re.compile(r"^@@ -(?P<start>\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_FILE_HEADER = re.compile(r"^diff --git a/(?P<old>\S+) b/(?P<new>\S+)$", re.M)


def hunk_headers(patch_text: str) -> dict[str, list[tuple[int, str]]]:
    """``{file: [(old start line, '@@ ... @@' header line), ...]}`` for every hunk of a git diff."""
    hunks: dict[str, list[tuple[int, str]]] = {}
    sections = list(_FILE_HEADER.finditer(patch_text))
    for index, section in enumerate(sections):
        end = sections[index + 1].start() if index + 1 < len(sections) else len(patch_text)
        body = patch_text[section.start():end]
        for header in _HUNK_HEADER.finditer(body):
            line = body[header.start():body.find("\n", header.start())]
            for name in {section["old"], section["new"]}:
                hunks.setdefault(name, []).append((int(header["start"]), line))
    return hunks


def describe_failure(patch: Path, patch_text: str, stderr: str, tree: Path, role: str) -> str:
    """One line: which patch, which file, which hunk, and what to do."""
    if role == "seed patch":
        fix = (f"the seed patch targets the llama.cpp vendored in {SDIST_NAME} {SDIST_VERSION}: pass "
               "an unpatched tree of that version as --source (or none)")
        if (tree / "tools" / "palw-observer" / "PALW_PATCHSET").is_file():
            fix = ("the source already carries a PALW patch (tools/palw-observer/PALW_PATCHSET): "
                   "pass the unpatched tree, or an archive made by `palw source`")
    else:
        fix = (f"rebase the overlay onto the seed-patched tree, or drop it from "
               f"{patch.parent / SERIES_NAME}")
    failed = _FAILED_HUNK.search(stderr)
    if failed:
        target, line = failed["file"], int(failed["line"])
        hunk = next((header for start, header in hunk_headers(patch_text).get(target, [])
                     if start == line), f"@@ -{line} @@")
        return f"{role} {patch} does not apply to {target}: hunk `{hunk}` failed; {fix}"
    problem = _FILE_PROBLEM.search(stderr)
    if problem and problem["file"] not in ("patch failed",):
        return (f"{role} {patch} does not apply to {problem['file']}: {problem['reason']}; {fix}")
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "no message")
    return f"{role} {patch} does not apply: git apply said `{last.strip()}`; {fix}"
