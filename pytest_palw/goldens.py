"""Golden encoded streams: syrupy's single-file binary snapshots, kept in fixtures/goldens/, and
where each came from.

A golden shipped with the suite is listed, by its bytes, in fixtures/goldens/SHIPPED.json. A
golden recorded where the suite is installed (``--snapshot-update``, e.g. for a user's own GGUF)
gets a provenance file beside it (``<golden>.bin.json``: when, which build, library, device and
model recorded it). The certificate states, per golden a run compared with, which of the two it
was; a golden recorded by the very build under test compares the runtime with itself, and the
certificate says so.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension

from pytest_palw import __version__
from pytest_palw.cache import remembered_sha256, sha256_bytes
from pytest_palw.files import write_whole
from pytest_palw.paths import FIXTURES_DIR
from pytest_palw.selection import GOLDEN_WRITING_OPTIONS

GOLDENS_DIR = FIXTURES_DIR / "goldens"
SHIPPED = "SHIPPED.json"


class GoldenStreamExtension(SingleFileSnapshotExtension):
    """One ``.bin`` per stream; update deliberately with ``pytest --snapshot-update --snapshot-no-cleanup``."""

    file_extension = "bin"

    @classmethod
    def dirname(cls, *, test_location) -> str:
        return str(GOLDENS_DIR / test_location.basename)


def model_label(palw_session) -> str:
    spec = palw_session.option("palw_model")
    if spec.startswith("profile:"):
        return spec.split(":", 1)[1]
    return "sha" + remembered_sha256(palw_session.model.path)[:12]


def device_label(palw_session) -> str:
    """The device class a stream was computed on: ``cpu``, or ``sm90`` for a cc 9.0 GPU."""
    device = palw_session.device
    return f"sm{device.cc // 10}" if device else "cpu"


def golden_for(request, name: str) -> None:
    """Before a case compares with golden ``name``: when the run records goldens, write who records
    it beside it; else skip, in one line that says how to record it, when there is none (a device
    class never certified here), or note in the session where it came from."""
    module = request.node.path.stem
    path = GOLDENS_DIR / module / f"{request.node.originalname}[{name}].bin"
    palw = request.getfixturevalue("palw_session")
    if any(getattr(request.config.option, dest, False) for dest in GOLDEN_WRITING_OPTIONS):
        path.parent.mkdir(parents=True, exist_ok=True)
        recorded = {"recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **recorder(palw)}
        write_whole(provenance_path(path), json.dumps(recorded, indent=1) + "\n")
        return
    if not path.is_file():
        pytest.skip(f"no committed golden streams for device class {device_label(palw)}, model "
                    f"{model_label(palw)}, token {palw.token}: record them with `pytest "
                    f"conformance/{module}.py --palw-model={palw.option('palw_model')} --snapshot-update "
                    "--snapshot-no-cleanup` (plus the run's --palw-token/--palw-lib), review and commit them")
    palw.goldens[path.name] = provenance(path, recorder(palw))


def provenance_path(golden: Path) -> Path:
    return golden.with_name(f"{golden.name}.json")


def recorder(palw) -> dict:
    """What records (or compares with) a golden in this process: the build, its library, device, model."""
    device = palw.device
    return {"build_key": palw.build.manifest.get("key"), "library_sha256": palw.kernel_digest.digest.hex(),
            "device": f"{device.name} (cc {device.cc})" if device else "cpu",
            "model_sha256": remembered_sha256(palw.model.path), "plugin": f"pytest-palw {__version__}"}


def provenance(golden: Path, comparing: dict) -> dict:
    """Where ``golden`` came from: shipped with the suite (by its bytes), or recorded here and by whom."""
    from pytest_palw.runtime.codec import fingerprint

    data = golden.read_bytes()
    facts = {"sha256": sha256_bytes(data), "fingerprint": fingerprint(data)}
    shipped_list = GOLDENS_DIR / SHIPPED
    shipped = (json.loads(shipped_list.read_text())["goldens"].get(golden.parent.name, {}).get(golden.name)
               if shipped_list.is_file() else None)
    if shipped is not None and shipped["sha256"] == facts["sha256"]:
        return {"origin": "shipped with the suite", **facts, "recorded": shipped["recorded"], "what": shipped["what"]}
    side = provenance_path(golden)
    recorded = json.loads(side.read_text()) if side.is_file() else None
    entry = {"origin": "recorded where the suite is installed, not shipped with it", **facts,
             "recorded": recorded or "unknown: no provenance file beside it"}
    if recorded and recorded.get("build_key") == comparing["build_key"] and (
            recorded.get("library_sha256") == comparing["library_sha256"]):
        entry["self_comparison"] = ("recorded by this very build and library: the case compares the runtime "
                                    "with itself, not with an independent stream")
    return entry

