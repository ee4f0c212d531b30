"""Which cached build a run uses when none is named: the one that suits the visible device.

`palw build` may have been run with any --cuda-arch, --pinned-cc, --source or toolchain, so the
lookup does not recompute a key; it reads every finished build in the cache and keeps those made
from this checkout's patch set and native runtime. Among the CUDA builds that can run on the
device (its sm in CMAKE_CUDA_ARCHITECTURES), the rule is:

    pinned cc equal to the device's first, then an exact arch over a PTX fallback, then newest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_palw.builder.manifest import MANIFEST_NAME, Manifest
from pytest_palw.builder.patching import current_patch_set
from pytest_palw.builder.plan import native_runtime
from pytest_palw.errors import PalwError
from pytest_palw.paths import cache_dir

RULE = "pinned cc = the device's, then exact arch, then newest"
PALW_DEFAULT_PIN = 890  # the pinned-cc overlay's default (the seed pins Ada)


@dataclass(frozen=True)
class Choice:
    manifest: Manifest
    line: str  # one line for the terminal and the certificate: what was chosen, and why


def current_builds() -> list[Manifest]:
    """Finished trace builds in the cache made from this checkout's patches and native runtime."""
    try:
        patches = current_patch_set().describe()
    except PalwError:
        return []
    wanted_patches = ((patches["seed_patch"] or {}).get("sha256"),
                      [entry["sha256"] for entry in patches["overlays"]])
    native = native_runtime().sha256
    builds = []
    for path in sorted(cache_dir("builds").glob(f"*/{MANIFEST_NAME}")):
        try:
            manifest = Manifest.load(path)
        except PalwError:
            continue
        inputs = manifest.inputs
        made_from = ((inputs.get("seed_patch") or {}).get("sha256"),
                     [entry["sha256"] for entry in inputs.get("overlays") or []])
        if (manifest.trace and made_from == wanted_patches
                and (inputs.get("native") or {}).get("sha256") == native and manifest.outputs_exist()):
            builds.append(manifest)
    return builds


def effective_pin(manifest: Manifest) -> int | None:
    """The cc the runtime traces on: --pinned-cc, else the overlay's default; None for CPU."""
    if manifest.variant != "cuda":
        return None
    return manifest.pinned_cc if manifest.pinned_cc is not None else PALW_DEFAULT_PIN


def arch_match(cuda_arch: str | None, cc: int) -> int:
    """2: the device's sm is built; 1: only a lower arch (runs through PTX); 0: cannot run."""
    sm = cc // 10
    numbers = [int(match) for match in re.findall(r"(\d+)", cuda_arch or "")]
    if sm in numbers:
        return 2
    return 1 if any(number < sm for number in numbers) else 0


def choose_cuda(device) -> Choice | None:
    """The CUDA build for ``device`` (devices.Device) by RULE, or None when none suits it."""
    suitable = [m for m in current_builds() if m.variant == "cuda" and arch_match(m.cuda_arch, device.cc)]
    if not suitable:
        return None
    ranked = sorted(suitable, key=lambda m: (effective_pin(m) == device.cc, arch_match(m.cuda_arch, device.cc),
                                             m.created), reverse=True)
    best = ranked[0]
    line = (f"runtime: CUDA build {best.path.parent} (arch {best.cuda_arch}, pinned cc {effective_pin(best)}) "
            f"for {device.name} (cc {device.cc}); chosen from {len(suitable)} suitable build(s) by: {RULE}")
    return Choice(best, line)


def for_visible_device(cuda_arch: str | None, pinned_cc: int | None) -> tuple[str, int | None, str]:
    """`palw build --variant cuda` defaults: the visible device's arch and pin, where not given.

    Returns (cuda_arch, pinned_cc, one line saying what was chosen)."""
    from pytest_palw.builder.config import DEFAULT_CUDA_ARCH
    from pytest_palw.devices import visible_devices

    devices = visible_devices()
    if not devices:
        arch = cuda_arch or DEFAULT_CUDA_ARCH
        pin = pinned_cc if pinned_cc is not None else f"the overlay's default {PALW_DEFAULT_PIN}"
        return arch, pinned_cc, f"no visible NVIDIA device: building --cuda-arch {arch}, pinned cc {pin}"
    device = devices[0]
    arch = cuda_arch or str(device.cc // 10)
    pin = pinned_cc if pinned_cc is not None else device.cc
    return arch, pin, (f"building for the visible {device.name} (cc {device.cc}): --cuda-arch {arch} "
                       f"--pinned-cc {pin}")
