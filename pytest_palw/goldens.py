"""Golden encoded streams: syrupy's single-file binary snapshots, kept in fixtures/goldens/."""

from __future__ import annotations

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension

from pytest_palw.paths import FIXTURES_DIR
from pytest_palw.selection import GOLDEN_WRITING_OPTIONS

GOLDENS_DIR = FIXTURES_DIR / "goldens"


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
    from pytest_palw.build.digests import remembered_sha256

    return "sha" + remembered_sha256(palw_session.model.path)[:12]


def device_label(palw_session) -> str:
    """The device class a stream was computed on: ``cpu``, or ``sm90`` for a cc 9.0 GPU."""
    device = palw_session.device
    return f"sm{device.cc // 10}" if device else "cpu"


def require_golden(request, name: str) -> None:
    """Skip, in one line that says how to record it, when no golden is committed for ``name``
    (a device class never certified here); a run that records goldens goes on and writes it."""
    options = request.config.option
    if any(getattr(options, dest, False) for dest in GOLDEN_WRITING_OPTIONS):
        return
    module = request.node.path.stem
    if (GOLDENS_DIR / module / f"{request.node.originalname}[{name}].bin").is_file():
        return
    palw = request.getfixturevalue("palw_session")
    pytest.skip(f"no committed golden streams for device class {device_label(palw)}, model "
                f"{model_label(palw)}, token {palw.token}: record them with `pytest "
                f"conformance/{module}.py --palw-model={palw.option('palw_model')} --snapshot-update "
                "--snapshot-no-cleanup` (plus the run's --palw-token/--palw-lib), review and commit them")
