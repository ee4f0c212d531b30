"""The suite's tiers (markers ``palw_<tier>``): what each needs, and which a certification exempts."""

from __future__ import annotations

from collections.abc import Iterable

TIER_MEANINGS = {"cpu": "runs on any PALW runtime (CPU tier, CI)",
                 "gpu": "needs a CUDA runtime exposing the PALW procs (GPU tier)",
                 "pinned": "needs a device whose cc equals the runtime's pinned cc",
                 "metal": "needs an Apple GPU (not part of a CUDA certification)"}
TIERS = tuple(TIER_MEANINGS)
# Tiers whose claims belong to another platform: a CUDA certification does not require them to pass
# (they skip off macOS); a failure of one still counts.
EXEMPT = {"metal": "another platform's claim (the Metal dispatch hook needs an Apple GPU and a Metal "
                   "build): not part of a CUDA certification"}


def tier_of(marker_names: Iterable[str]) -> str | None:
    """The tier a case belongs to, from its marker names (the most demanding one wins)."""
    names = set(marker_names)
    return next((tier for tier in reversed(TIERS) if f"palw_{tier}" in names), None)
