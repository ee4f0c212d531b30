"""Golden encoded streams: syrupy's single-file binary snapshots, kept in fixtures/goldens/."""

from __future__ import annotations

from syrupy.extensions.single_file import SingleFileSnapshotExtension

from .paths import FIXTURES_DIR

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
    from .session import file_sha256

    return "sha" + file_sha256(palw_session.model.path)[:12]


def device_label(palw_session) -> str:
    device = palw_session.device
    return f"sm{device.cc // 10}" if device else "cpu"
