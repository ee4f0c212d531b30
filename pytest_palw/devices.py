"""What GPU this process sees, without initialising CUDA in it (nvidia-smi)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    cc: int  # 100 * major + 10 * minor, ggml's numbering (H200: 900, Ada: 890)
    driver: str

    def as_dict(self) -> dict:
        return asdict(self)


def visible_devices() -> list[Device]:
    """Devices nvidia-smi reports, filtered by CUDA_VISIBLE_DEVICES; [] without a GPU."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    devices = []
    for line in out.strip().splitlines():
        index, name, cap, driver = (part.strip() for part in line.split(","))
        major, minor = cap.split(".")
        devices.append(Device(int(index), name, int(major) * 100 + int(minor) * 10, driver))
    selected = os.environ.get("CUDA_VISIBLE_DEVICES")
    if selected is not None:
        wanted = [int(x) for x in selected.split(",") if x.strip().isdigit()]
        devices = [d for d in devices if d.index in wanted]
    return devices


def worker_number(worker_id: str | None) -> int:
    """An xdist worker's number (gw3 -> 3); 0 for the controller or a run without xdist."""
    return int(worker_id[2:]) if worker_id and worker_id.startswith("gw") and worker_id[2:].isdigit() else 0


def assign_worker_device(worker_id: str, requested: str) -> str | None:
    """Pin an xdist worker to one GPU (worker i -> device i mod n) via CUDA_VISIBLE_DEVICES.

    Must run before libllama loads in the worker. Returns the chosen device or None.
    """
    if requested == "auto":
        pool = [str(d.index) for d in visible_devices()]
    else:
        pool = [p.strip() for p in requested.split(",") if p.strip()]
    if not pool:
        return None
    chosen = pool[worker_number(worker_id) % len(pool)]
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen
