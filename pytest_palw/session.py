"""PalwSession: everything the plugin's hooks and fixtures delegate to, one per process.

It resolves the runtime build and the model, loads them lazily (a unit test that
uses no PALW fixture never loads a runtime), decides the tiers a case can run in,
and keeps the facts and outcomes the certificate is made of.
"""

from __future__ import annotations

import hashlib
import os
import time
from functools import cached_property
from pathlib import Path

import pytest

from . import options as opts
from .certificate import Certificate
from .devices import Device, assign_worker_device, visible_devices
from .errors import PalwError, RuntimeLibraryError
from .load_probe import probe_model_load
from .paths import CONFORMANCE_DIR
from .profile import check_profile
from .runtime import Model, Runtime, RuntimeBuild

TIERS = ("cpu", "gpu", "pinned", "metal")


def file_sha256(path: Path) -> str:
    """sha256 of a file, cached beside it as ``<file>.sha256`` keyed by size and mtime."""
    path = Path(path)
    stat = path.stat()
    sidecar = path.with_name(path.name + ".sha256")
    stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
    try:
        cached_stamp, cached = sidecar.read_text().split()
        if cached_stamp == stamp:
            return cached
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 24), b""):
            digest.update(chunk)
    try:
        sidecar.write_text(f"{stamp} {digest.hexdigest()}\n")
    except OSError:
        pass
    return digest.hexdigest()


class PalwSession:
    def __init__(self, config):
        self.config = config
        self.worker_id = config.workerinput["workerid"] if hasattr(config, "workerinput") else None
        self.certificate = Certificate()
        self.notes: dict = {}
        self.fingerprints: dict = {}
        self.kernel_infos: dict = {}
        self.device_assignment: str | None = None
        self.used = False
        self.deselected = 0  # conformance cases this process's collection deselected

    # -- configuration -------------------------------------------------------------
    def option(self, dest: str) -> str | None:
        return opts.resolve(self.config, dest)

    def requested(self) -> bool:
        """Does this run reach the conformance suite (or name a PALW option)?"""
        if opts.explicitly_set(self.config):
            return True
        args = self.config.args or []
        root = Path(self.config.rootpath)
        for arg in args:
            target = (Path(self.config.invocation_params.dir) / arg.split("::")[0]).resolve()
            if target == CONFORMANCE_DIR or CONFORMANCE_DIR in target.parents or target in CONFORMANCE_DIR.parents:
                return True
        return not args and root == CONFORMANCE_DIR.parent

    def configure_worker(self) -> None:
        if self.worker_id is not None:
            self.device_assignment = assign_worker_device(self.worker_id, self.option("palw_device"))

    # -- resolution (cheap; runs in the controller before any worker starts) ---------
    def model_path(self) -> Path:
        spec = self.option("palw_model")
        if spec.startswith("profile:"):
            from .fixtures.models import ensure_model  # the synthetic generator

            return ensure_model(spec.split(":", 1)[1])
        return Path(spec).expanduser().resolve()

    def runtime_build(self) -> RuntimeBuild:
        location = self.option("palw_lib")
        if location:
            return RuntimeBuild.locate(Path(location))
        from .build import api

        variant = "cuda" if visible_devices() else "cpu"
        manifest = api.find_manifest(variant=variant)
        if manifest is None and variant == "cuda":
            manifest = api.find_manifest(variant="cpu")
        if manifest is None:
            if self.option("palw_build") == "never":
                raise RuntimeLibraryError(
                    "no cached PALW runtime for this host and --palw-build=never: run `palw build` "
                    "or pass --palw-lib")
            manifest = api.build(variant="cpu")
        return RuntimeBuild.locate(Path(manifest.path))

    def preflight(self) -> None:
        """Fail fast, in one line, on a wrong model or an unpatched library."""
        model = self.model_path()
        check_profile(model)
        build = self.runtime_build()
        libllama = build.lib_dir / "libllama.so"
        if not libllama.is_file():
            raise RuntimeLibraryError(f"{libllama} is missing: rebuild with `palw build`")
        if b"llama_palw_cuda_trace_attach_v2\x00" not in libllama.read_bytes():
            raise RuntimeLibraryError(
                f"{libllama} exports no llama_palw_* functions: it is not a PALW trace build; "
                "build one with `palw build` and pass it with --palw-lib")
        probe_model_load(build.manifest_path or build.lib_dir, model)

    # -- lazy runtime objects (per process) -------------------------------------------
    @cached_property
    def build(self) -> RuntimeBuild:
        return self.runtime_build()

    @cached_property
    def runtime(self) -> Runtime:
        self.used = True
        return Runtime(self.build)

    @cached_property
    def model(self) -> Model:
        path = self.model_path()
        self.model_profile = check_profile(path)
        return self.runtime.load_model(path)

    @cached_property
    def token(self) -> int:
        chosen = self.option("palw_token")
        return int(chosen) if chosen is not None else self.model.default_token()

    @cached_property
    def discovery(self):
        from .discovery import discover

        return discover(self.model, self.token)

    @cached_property
    def device(self) -> Device | None:
        if not self.runtime.has_cuda_trace:
            return None
        devices = visible_devices()
        return devices[0] if devices else None

    @cached_property
    def kernel_digests(self) -> dict[str, bytes]:
        return kernel_digests(self.build.lib_dir, self.option("palw_kernel_digest"))

    # -- tiers ---------------------------------------------------------------------------
    def tier_skip_reason(self, tier: str) -> str | None:
        """Why a case of ``tier`` cannot run here, or None."""
        if tier in ("cpu", "metal"):
            return None  # metal cases carry their own platform skip
        runtime = self.runtime
        if not runtime.has_cuda_trace:
            return (f"no CUDA backend with the PALW procs in {self.build.lib_dir} (variant "
                    f"{self.build.variant}): on an NVIDIA machine run `palw build --variant cuda` and "
                    "pass --palw-lib")
        if tier == "pinned":
            pinned = self.build.pinned_cc or 890
            device = self.device
            if device is None or device.cc != pinned:
                seen = device.cc if device else "unknown"
                return (f"device cc {seen} is not the runtime's pinned cc {pinned}: rebuild with "
                        f"`palw build --variant cuda --pinned-cc {seen}` to trace on this device "
                        "(the device-pin case checks the fail-closed path instead)")
        return None

    # -- facts for the certificate ------------------------------------------------------
    def facts(self) -> dict:
        if not self.used:
            return {"worker": self.worker_facts(), "deselected": self.deselected}
        build, model = self.build, self.model
        device = self.device
        facts = {
            "runtime": {"lib_dir": str(build.lib_dir), "variant": build.variant,
                        "has_cuda_trace": self.runtime.has_cuda_trace, "manifest": build.manifest},
            "device": ({"kind": "cuda", "name": device.name, "cc": device.cc, "driver": device.driver}
                       if device else {"kind": "cpu", "name": "cpu", "cc": None, "driver": None}),
            "pinned_cc": build.pinned_cc if build.variant == "cuda" else None,
            "model": {"spec": self.option("palw_model"), "path": str(model.path),
                      "sha256": file_sha256(model.path), "profile": self.model_profile.as_dict()},
            "token": self.token,
            "fingerprints": self.fingerprints,
            "kernel_infos": self.kernel_infos,
            "notes": self.notes,
            "worker": self.worker_facts(),
            "deselected": self.deselected,
        }
        if "discovery" in self.__dict__:
            discovery = self.discovery
            facts["discovery"] = {"launches": len(discovery.candidates),
                                  "class_counts": discovery.class_counts(),
                                  "first_index": discovery.first_index()}
        return facts

    def worker_facts(self) -> dict:
        return {"pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "assigned_device": self.device_assignment}

    # -- outcomes ---------------------------------------------------------------------------
    def tier_of(self, item_or_report) -> str | None:
        keywords = item_or_report.keywords
        for tier in reversed(TIERS):
            if f"palw_{tier}" in keywords:
                return tier
        return None

    def record(self, report) -> None:
        tier = self.tier_of(report)
        if tier is not None:
            if self.certificate.started is None:
                self.certificate.started = time.time()
            self.certificate.record(report, tier)


def skip_if_tier_unavailable(session: PalwSession, item) -> None:
    tier = session.tier_of(item)
    if tier is None:
        return
    try:
        reason = session.tier_skip_reason(tier)
    except PalwError as error:
        pytest.exit(f"palw: {error}", returncode=4)
    if reason:
        pytest.skip(f"{tier.upper()} tier: {reason}")


DIGEST_NAMES = ("binary", "q4_k", "q6_k", "attention_qk", "attention_softmax", "attention_pv")


def kernel_digests(lib_dir: Path, chosen: str | None = None) -> dict[str, bytes]:
    """The kernel binary digest of every class: --palw-kernel-digest, else sha256 of libggml-cuda."""
    if chosen:
        digest = bytes.fromhex(chosen)
        if len(digest) != 32 or not any(digest):
            raise PalwError("--palw-kernel-digest must be one nonzero 64-hex sha256")
    else:
        cuda_libs = sorted(Path(lib_dir).glob("libggml-cuda.so*"))
        digest = bytes.fromhex(file_sha256(cuda_libs[0])) if cuda_libs else bytes(range(1, 33))
    return dict.fromkeys(DIGEST_NAMES, digest)
