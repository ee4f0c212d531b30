"""What a run certifies, resolved once: the runtime build and the model.

The controlling process resolves both before any worker starts (controller.py: ``preflight``) and
hands them to every xdist worker (``pytest_configure_node``), as xdist hands its own settings: a
worker never chooses another build, never looks the model up again, never re-reads its profile.
A process nobody handed them to (a run that does not reach the suite) resolves them on first use,
with the same functions.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from pytest_palw.cache import FileDigest
from pytest_palw.errors import ModelProfileError, RuntimeLibraryError
from pytest_palw.fixtures.models.profiles import Profile
from pytest_palw.preflight.model_check import check_profile
from pytest_palw.runtime.library import RuntimeBuild


@dataclass(frozen=True)
class ResolvedModel:
    """--palw-model as resolved: the file it names, its profile (checked against the pin), the file's
    identity on disk when it was resolved, and the sha256 of its bytes read in this run.

    The sha256 is computed where the model is resolved (the controlling process), by a thread beside
    collection (cache.FileDigest: never a memo of size and mtime, so a byte changed with its mtime
    kept is stated as it is); a worker gets the stamp, its cheap check that the file stayed."""

    spec: str
    path: Path
    profile: Profile  # as the file states it (model_check.read_profile)
    stamp: tuple  # (size, mtime_ns, inode) when resolved
    digest: FileDigest | None = field(default=None, compare=False, repr=False)  # where it was resolved

    @property
    def sha256(self) -> str | None:
        """The bytes' sha256 (waits for the hashing thread); None in a process it was handed to."""
        return self.digest.result() if self.digest is not None else None

    def statement(self) -> dict:
        """The certificate's ``model`` fact (its sha256 added by the process that resolved it)."""
        stated = {"spec": self.spec, "path": str(self.path), "profile": self.profile.as_dict()}
        if self.digest is not None:
            stated["sha256"] = self.sha256
        return stated

    def changed(self) -> bool:
        """Is the file no longer the one resolved (another size, mtime or inode)?"""
        return file_stamp(self.path) != self.stamp

    def to_wire(self) -> dict:
        """Plain values for xdist's workerinput (execnet carries dicts, lists, strings and numbers)."""
        fields = {f.name: getattr(self.profile, f.name) for f in dataclasses.fields(self.profile)}
        return {"spec": self.spec, "path": str(self.path), "stamp": list(self.stamp), "profile": fields}

    @classmethod
    def from_wire(cls, data: dict) -> "ResolvedModel":
        return cls(data["spec"], Path(data["path"]), Profile(**data["profile"]), tuple(data["stamp"]))


def file_stamp(path: Path) -> tuple:
    try:
        stat = os.stat(path)
    except OSError:
        return ()
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


# xdist's workerinput keys of what the controller resolved and hands to each worker
HANDED_MANIFEST, HANDED_RUNTIME_LINE, HANDED_MODEL = "palw_manifest", "palw_runtime_line", "palw_model"
HANDED_PIN = "palw_pin"


@dataclass(frozen=True)
class Handover:
    """What the controller resolved (Controller.preflight), as a worker receives it."""

    manifest: str | None = None  # the build's palw-manifest.json, or a brought runtime's libraries
    runtime_line: str | None = None  # why that build was chosen (choose_build's line)
    model: ResolvedModel | None = None
    pin: dict | None = None  # a brought CUDA runtime's pinned cc as the pin probe observed it (pin_probe.pinned_from)

    def to_wire(self) -> dict:
        """The workerinput entries (plain values: execnet carries dicts, lists, strings and numbers)."""
        wire: dict = {}
        if self.manifest:
            wire[HANDED_MANIFEST], wire[HANDED_RUNTIME_LINE] = self.manifest, self.runtime_line
        if self.model is not None:
            wire[HANDED_MODEL] = self.model.to_wire()
        if self.pin is not None:
            wire[HANDED_PIN] = self.pin
        return wire

    @classmethod
    def from_wire(cls, workerinput: dict) -> "Handover":
        model = workerinput.get(HANDED_MODEL)
        return cls(workerinput.get(HANDED_MANIFEST), workerinput.get(HANDED_RUNTIME_LINE),
                   ResolvedModel.from_wire(model) if model else None, workerinput.get(HANDED_PIN))


def resolve_model(spec: str) -> ResolvedModel:
    """``profile:NAME`` (synthesized once into the model cache) or a GGUF path; ModelProfileError in
    one line unless the file has the pinned profile."""
    if spec.startswith("profile:"):
        path, profile = _synthetic(spec.split(":", 1)[1])
    else:
        path = Path(spec).expanduser().resolve()
        profile = check_profile(path)
    return ResolvedModel(spec, path, profile, file_stamp(path), FileDigest(path))


def _synthetic(name: str) -> tuple[Path, Profile]:
    """A profile's cached model, checked; one that fails its check is damaged (the generator wrote
    it right once): regenerated, said in one line."""
    from pytest_palw.fixtures.models.catalog import ensure_model, forget_model  # the synthetic generator

    path = ensure_model(name)
    try:
        return path, check_profile(path)
    except ModelProfileError as error:
        print(f"palw: the cached model {path.name} fails its check ({str(error)[:200]}): regenerating it",
              file=sys.stderr)
        forget_model(path)
    path = ensure_model(name)
    return path, check_profile(path)


def choose_build(location: str | None, devices, build_policy: str | None, tools_dir: str | None = None,
                 headers_dir: str | None = None, hook_sha256: str | None = None,
                 source: str | None = None) -> tuple[RuntimeBuild, str | None]:
    """The runtime build to run and, when this chose it, the line that says why.

    ``location``: --palw-lib (a build output or its manifest, or a brought directory of libraries).
    ``tools_dir``: --palw-tools, where the seed tools are (default: the build's, or beside the libraries).
    ``source``: --palw-source, what a brought runtime's ABI copy is made from (runtime/brought.py).
    Otherwise the cached CUDA build of
    this checkout that suits the first visible device, else the cached CPU build (built now unless
    ``build_policy`` is ``never``)."""
    if location:
        return RuntimeBuild.locate(Path(location), tools_dir, headers_dir, hook_sha256, source), None
    from pytest_palw.builder import api, choice

    line = None
    if devices:
        chosen = choice.choose_cuda(devices[0])
        if chosen is not None:
            return RuntimeBuild.locate(cast(Path, chosen.manifest.path), tools_dir), chosen.line
        line = (f"runtime: no CUDA build of this checkout suits {devices[0].name} (cc {devices[0].cc}), so the "
                "CPU build runs and the GPU tier cannot: run `palw build --variant cuda` first")
    manifest = api.find_manifest(variant="cpu")
    if manifest is None:
        if build_policy == "never":
            raise RuntimeLibraryError("no cached PALW runtime for this host and --palw-build=never: run "
                                      "`palw build` or pass --palw-lib")
        manifest = api.build(variant="cpu")
    return RuntimeBuild.locate(Path(cast(Path, manifest.path)), tools_dir), line
