"""PalwSession: what the plugin's hooks and fixtures delegate to in every process (controller and
xdist workers alike).

It resolves the runtime build and the model, loads them lazily (a unit test that uses no PALW
fixture never loads a runtime), decides the tiers a case can run in, witnesses that a case's body
ran, and states this process's facts. The controlling process also has a Controller
(controller.py): the inventory, the reports, the certificate.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from pytest_palw import options as opts
from pytest_palw import paths
from pytest_palw.cache import remembered_sha256, sha256_file, sha256_stream
from pytest_palw.certificate.inventory import witness_id
from pytest_palw.errors import PalwError, RuntimeLibraryError
from pytest_palw.runtime.caller import DIGEST_NAMES
from pytest_palw.runtime.devices import Device, assign_worker_device, visible_devices
from pytest_palw.runtime.library import Model, Runtime, RuntimeBuild
from pytest_palw.runtime.load_probe import LoadProbe
from pytest_palw.runtime.model_check import check_profile
from pytest_palw.selection import argument_path, in_suite
from pytest_palw.tiers import TIER_MEANINGS, TIERS, tier_of

_BODY = pytest.StashKey[str]()  # the suite function whose body ran to its end in this call


def or_exit(step):
    """``step()``; a PalwError stops the session with its one line and exit code."""
    try:
        return step()
    except PalwError as error:
        pytest.exit(f"palw: {error}", returncode=error.exit_code)


class PalwSession:
    def __init__(self, config):
        self.config = config
        self.worker_id = config.workerinput["workerid"] if hasattr(config, "workerinput") else None
        self.controller = None  # controller.Controller, in the controlling process
        self.notes: dict = {}
        self.fingerprints: dict = {}
        self.kernel_infos: dict = {}
        self.goldens: dict = {}  # golden file -> where it came from (goldens.provenance)
        self.foreign_fixtures: set[str] = set()  # "name (file)" of fixtures a suite case gets from elsewhere
        self.device_assignment: str | None = None
        self.used = False
        self.deselected = 0  # conformance cases this process's collection deselected
        # Wall-clock moments of this process (benchmarks/bench_certify.py draws the timeline).
        self.timeline: dict[str, float] = {"process_start": process_start_time(), "configured": time.time()}
        # The runtime the controller chose, and why, handed to xdist workers (configure_node):
        # every process runs the same build.
        given = getattr(config, "workerinput", {})
        self.chosen_manifest: str | None = given.get("palw_manifest")
        self.runtime_line: str | None = given.get("palw_runtime_line")
        self.load_probe: LoadProbe | None = None

    # -- configuration -------------------------------------------------------------
    def option(self, dest: str) -> str | None:
        return opts.resolve(self.config, dest)

    def requested(self) -> bool:
        """Does this run reach the conformance suite (or name a PALW option)?"""
        if opts.explicitly_set(self.config):
            return True
        args = self.config.args or []
        root = Path(self.config.rootpath)
        suite = paths.CONFORMANCE_DIR
        for arg in args:
            target = argument_path(arg, self.config.invocation_params.dir, self.config.option.pyargs)
            if target == suite or suite in target.parents or target in suite.parents:
                return True
        return not args and root == suite.parent

    # -- the plugin's hooks (plugin.py) hand over to these ----------------------------
    def configure(self) -> None:
        for tier, meaning in TIER_MEANINGS.items():
            self.config.addinivalue_line("markers", f"palw_{tier}: {meaning}")
        if self.worker_id is not None:
            self.device_assignment = assign_worker_device(self.worker_id, self.option("palw_device"))
            return
        from pytest_palw.controller import Controller

        self.controller = Controller(self)
        self.config.pluginmanager.register(self.controller, "palw-controller")
        self.controller.discard_old_certificate()

    def start(self, session) -> None:
        self.mark("session_start")
        if self.worker_id is None and self.requested() and not session.config.option.collectonly:
            or_exit(self.preflight)

    def before_first_case(self) -> None:
        if self.worker_id is None and self.requested():  # while the workers start and collect
            self.controller.expect()
            self.controller.certificate.facts["pytest"] = pytest_statement(self.config)
        or_exit(self.await_preflight)

    def mark_tiers(self, items) -> None:
        """Every case of the conformance suite counts for the certificate: cpu tier unless marked;
        a fixture a case gets from outside the plugin and the suite is noted (a verdict reason)."""
        for item in items:
            if not in_suite(item.path):
                continue
            if not any(item.get_closest_marker(f"palw_{tier}") for tier in TIERS):
                item.add_marker("palw_cpu")
            self.foreign_fixtures.update(foreign_fixtures(item))

    def count_deselected(self, items) -> None:
        self.deselected += sum(1 for item in items if in_suite(item.path))

    def setup_case(self, item) -> None:
        self.mark("first_case")
        skip_if_tier_unavailable(self, item)

    @contextlib.contextmanager
    def witness(self, item):
        """Around a case's call: run the suite's own function (unwrapped: a wrapper put around it
        can neither skip it nor swallow its failure) and, when it returns, note which case it ran
        as, from the parameter values it received (inventory.witness_id). A call that never
        reaches it (a plugin replacing runtest or pytest_pyfunc_call), another function in its
        place or other parameters leave no witness of this case: the verdict counts its body as
        not run."""
        item.stash[_BODY] = None
        module = getattr(item, "module", None) if isinstance(item, pytest.Function) else None
        if module is None or not in_suite(item.path):
            yield
            return
        original = item.obj
        function = inspect.unwrap(original)

        def body(*args, **kwargs):
            result = function(*args, **kwargs)
            item.stash[_BODY] = witness_id(item.originalname, function, module, kwargs)
            return result

        item.obj = body
        try:
            yield
        finally:
            item.obj = original

    def attest(self, item, report) -> None:
        """The call's report carries the witness (a string: it crosses xdist's wire)."""
        if report.when == "call":
            report.palw_body = item.stash.get(_BODY, None)

    @staticmethod
    def close(session: "PalwSession | None", status, error=None) -> None:
        """pytest's end (plugin.pytest_cmdline_main): the controller's final verdict and write; a
        process that never configured (a usage error) or a worker has nothing to close."""
        if session is not None and session.controller is not None:
            session.controller.close(status, error)

    def worker_finish(self, session) -> None:
        if self.worker_id is not None:
            session.config.workeroutput["palw_facts"] = self.facts()

    # -- resolution (cheap; runs in the controller before any worker starts) ---------
    def model_path(self) -> Path:
        spec = self.option("palw_model")
        if spec.startswith("profile:"):
            from pytest_palw.fixtures.models.catalog import ensure_model  # the synthetic generator

            return ensure_model(spec.split(":", 1)[1])
        return Path(spec).expanduser().resolve()

    def runtime_build(self) -> RuntimeBuild:
        location = self.option("palw_lib") or self.chosen_manifest
        if location:
            return RuntimeBuild.locate(Path(location))
        from pytest_palw.build import api, choice

        devices = visible_devices()
        if devices:
            chosen = choice.choose_cuda(devices[0])
            if chosen is not None:
                self.runtime_line = chosen.line
                return RuntimeBuild.locate(chosen.manifest.path)
            self.runtime_line = (f"runtime: no CUDA build of this checkout suits {devices[0].name} "
                                 f"(cc {devices[0].cc}), so the CPU build runs and the GPU tier cannot: "
                                 "run `palw build --variant cuda` first")
        manifest = api.find_manifest(variant="cpu")
        if manifest is None:
            if self.option("palw_build") == "never":
                raise RuntimeLibraryError(
                    "no cached PALW runtime for this host and --palw-build=never: run `palw build` "
                    "or pass --palw-lib")
            manifest = api.build(variant="cpu")
        return RuntimeBuild.locate(Path(manifest.path))

    def preflight(self) -> None:
        """Fail fast, in one line, on a wrong option, a wrong model or an unpatched library; start
        the load probe (awaited by ``await_preflight`` before the first case)."""
        self.mark("preflight_start")
        parse_kernel_digest(self.option("palw_kernel_digest"))
        model = self.model_path()
        check_profile(model)
        self.mark("model_checked")
        build = self.build
        self.mark("runtime_chosen")
        if self.runtime_line:
            self.say(self.runtime_line)
        libllama = build.lib_dir / "libllama.so"
        if not libllama.is_file():
            raise RuntimeLibraryError(f"{libllama} is missing: rebuild with `palw build`")
        if b"llama_palw_cuda_trace_attach_v2\x00" not in libllama.read_bytes():
            raise RuntimeLibraryError(
                f"{libllama} exports no llama_palw_* functions: it is not a PALW trace build; "
                "build one with `palw build` and pass it with --palw-lib")
        self.load_probe = LoadProbe(build.manifest_path or build.lib_dir, model)
        self.mark("probe_started")

    def await_preflight(self) -> None:
        """The load probe's verdict (RuntimeLibraryError), once, before any case runs."""
        probe, self.load_probe = self.load_probe, None
        if probe is not None:
            probe.check()
            self.mark("probe_done")

    def say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"palw: {line}")

    def configure_node(self, workerinput: dict) -> None:
        """Under xdist: every worker runs the build the controller chose (and announced)."""
        if "build" in self.__dict__ and self.build.manifest_path:
            workerinput["palw_manifest"] = str(self.build.manifest_path)
            workerinput["palw_runtime_line"] = self.runtime_line

    # -- lazy runtime objects (per process) -------------------------------------------
    @cached_property
    def build(self) -> RuntimeBuild:
        return self.runtime_build()

    @cached_property
    def runtime(self) -> Runtime:
        self.used = True
        runtime = Runtime(self.build)
        self.mark("runtime_loaded")
        return runtime

    @cached_property
    def model(self) -> Model:
        path = self.model_path()
        check_profile(path)  # a wrong model stops in one line before it is loaded
        model = self.runtime.load_model(path)
        self.mark("model_loaded")
        return model

    @property
    def model_profile(self):
        """The loaded model's profile (Model.profile: widths, attention geometry)."""
        return self.model.profile

    @cached_property
    def token(self) -> int:
        chosen = self.option("palw_token")
        return int(chosen) if chosen is not None else self.model.default_token()

    @cached_property
    def discovery(self):
        from pytest_palw.runtime.discovery import discover

        found = discover(self.model, self.token)
        self.mark("discovery_done")
        return found

    @cached_property
    def device(self) -> Device | None:
        if not self.runtime.has_cuda_trace:
            return None
        devices = visible_devices()
        return devices[0] if devices else None

    @cached_property
    def kernel_digest(self) -> "KernelDigest":
        return kernel_digest(self.runtime, self.option("palw_kernel_digest"))

    @property
    def kernel_digests(self) -> dict[str, bytes]:
        return dict.fromkeys(DIGEST_NAMES, self.kernel_digest.digest)

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
                        "has_cuda_trace": self.runtime.has_cuda_trace, "chosen_by": self.runtime_line,
                        **runtime_statement(build.manifest), "manifest": build.manifest},
            "device": ({"kind": "cuda", "name": device.name, "cc": device.cc, "driver": device.driver}
                       if device else {"kind": "cpu", "name": "cpu", "cc": None, "driver": None}),
            "pinned_cc": build.pinned_cc if build.variant == "cuda" else None,
            "kernel_digest": self.kernel_digest.as_dict(),
            "model": {"spec": self.option("palw_model"), "path": str(model.path),
                      "sha256": remembered_sha256(model.path), "profile": self.model_profile.as_dict()},
            "token": self.token,
            "fingerprints": self.fingerprints,
            "kernel_infos": self.kernel_infos,
            "goldens": self.goldens,
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
        self.mark("finished")
        return {"pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "assigned_device": self.device_assignment, "timeline": dict(self.timeline),
                "optimize": sys.flags.optimize, "foreign_fixtures": sorted(self.foreign_fixtures)}

    def mark(self, moment: str, *, first: bool = True) -> None:
        """Note when ``moment`` happened (the first time, unless ``first=False``)."""
        if not first or moment not in self.timeline:
            self.timeline[moment] = time.time()

def process_start_time() -> float | None:
    """When this process started (Linux /proc), as a Unix time; None elsewhere."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


# Where the fixtures a suite case may use are defined: pytest, syrupy (snapshot), xdist.
TRUSTED_FIXTURE_MODULES = ("_pytest", "syrupy", "xdist")


def foreign_fixtures(item) -> set[str]:
    """The fixtures ``item`` gets from neither the plugin, the suite nor pytest and its suite
    plugins: what a conftest or another plugin put in their place."""
    info = getattr(item, "_fixtureinfo", None)
    found = set()
    for name, definitions in (info.name2fixturedefs.items() if info is not None else ()):
        function = getattr(definitions[-1], "func", None) if definitions else None  # the one the case gets
        module = getattr(function, "__module__", "") or ""
        code = getattr(inspect.unwrap(function), "__code__", None) if function is not None else None
        source = Path(code.co_filename).resolve() if code is not None else None
        if module.split(".")[0] in TRUSTED_FIXTURE_MODULES or (source is not None and any(
                root == source or root in source.parents for root in (paths.PACKAGE_DIR, paths.CONFORMANCE_DIR))):
            continue
        found.add(f"{name} ({source or module})")
    return found


def skip_if_tier_unavailable(session: PalwSession, item) -> None:
    tier = tier_of(item.keywords)
    if tier is None:
        return
    reason = or_exit(lambda: session.tier_skip_reason(tier))
    if reason:
        pytest.skip(f"{tier.upper()} tier: {reason}")


CPU_PLACEHOLDER_DIGEST = bytes(range(1, 33))  # no CUDA library: the records are never traced
# What the kernel digest in a certificate stands for, by where it came from.
DIGEST_PROVES = {
    "mapped": ("which libggml-cuda.so file this process executed: the sha256 of the bytes of the file it "
               "mapped (/proc/self/maps), read in this run through /proc/self/map_files; the caller hands it "
               "to the producer in every approved launch's kernel binding, where the runtime checks only "
               "that it is nonzero"),
    "option": ("only what the caller asserted with --palw-kernel-digest: it is handed to the producer in every "
               "approved launch's kernel binding (checked nonzero only); nothing ties it to the library that ran"),
    "placeholder": "nothing: no CUDA library ran; a fixed placeholder fills the kernel bindings",
}
DIGEST_DOES_NOT_PROVE = ("that the records identify the library: the V3 records and their fingerprints do not "
                         "contain the digest (builds with different digests give equal fingerprints); that the "
                         "library was built from reviewed sources; or which kernel inside it ran (one digest "
                         "stands for all five classes)")


@dataclass(frozen=True)
class KernelDigest:
    digest: bytes
    source: str
    origin: str  # a key of DIGEST_PROVES

    def as_dict(self) -> dict:
        return {"sha256": self.digest.hex(), "source": self.source, "proves": DIGEST_PROVES[self.origin],
                "does_not_prove": DIGEST_DOES_NOT_PROVE}


def parse_kernel_digest(chosen: str | None) -> bytes | None:
    """--palw-kernel-digest as bytes, or PalwError in one line (checked at session start)."""
    if not chosen:
        return None
    try:
        digest = bytes.fromhex(chosen)
    except ValueError:
        digest = b""
    if len(digest) != 32 or not any(digest):
        raise PalwError(f"--palw-kernel-digest {chosen[:80]!r} is not one nonzero sha256 in 64 hex "
                        "digits: pass e.g. the output of `sha256sum libggml-cuda.so`, or omit it")
    return digest


@dataclass(frozen=True)
class Mapping:
    """One file mapped into this process (a line of /proc/self/maps)."""

    path: Path
    addresses: str  # "start-end", the name of its /proc/self/map_files entry
    inode: int


def mapped_library(prefix: str) -> Mapping | None:
    """The first library named ``prefix*`` that this process has mapped."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and Path(fields[5].strip()).name.startswith(prefix):
                    return Mapping(Path(fields[5].strip()), fields[0], int(fields[4]))
    except (OSError, ValueError):
        return None
    return None


def mapped_sha256(mapping: Mapping) -> str:
    """sha256 of the bytes of the mapped file, read in this run: through /proc/self/map_files (the
    very file mapped), else through its path while that is still the same inode."""
    for candidate in (Path("/proc/self/map_files") / mapping.addresses, mapping.path):
        try:
            with open(candidate, "rb") as handle:
                if os.fstat(handle.fileno()).st_ino == mapping.inode:
                    return sha256_stream(handle)
        except OSError:
            continue
    raise RuntimeLibraryError(f"{mapping.path}, mapped in this process, can no longer be read (replaced or "
                              "removed on disk since it was loaded): rerun, or pass --palw-kernel-digest")


def kernel_digest(runtime: Runtime, chosen: str | None = None) -> KernelDigest:
    """--palw-kernel-digest, else the sha256 of the libggml-cuda this process actually mapped."""
    parsed = parse_kernel_digest(chosen)
    if parsed is not None:
        return KernelDigest(parsed, "--palw-kernel-digest", "option")
    if not runtime.has_cuda_trace:
        return KernelDigest(CPU_PLACEHOLDER_DIGEST, "placeholder: no CUDA library in this runtime", "placeholder")
    mapped = mapped_library("libggml-cuda.so")
    if mapped is None:
        raise RuntimeLibraryError("the runtime has a CUDA trace backend but no libggml-cuda.so is "
                                  "mapped in this process: pass --palw-kernel-digest")
    return KernelDigest(bytes.fromhex(mapped_sha256(mapped)),
                        f"sha256 of {mapped.path}, mapped in this process, computed in this run", "mapped")


def runtime_statement(manifest: dict) -> dict:
    """What a certificate must always say about the runtime: its pin, the patches applied, the
    toolchain, and the one-C++-runtime check."""
    from pytest_palw.build.choice import PALW_DEFAULT_PIN

    cuda = manifest.get("variant") == "cuda"
    pinned = manifest.get("pinned_cc")
    inputs = manifest.get("inputs", {})
    return {
        "pin": ({"cc": pinned if pinned is not None else PALW_DEFAULT_PIN,
                 "from": "--pinned-cc" if pinned is not None else "the pinned-cc overlay's default"}
                if cuda else None),
        "patches_applied": {"seed_patch": (inputs.get("seed_patch") or {}).get("sha256"),
                            "overlays": [Path(entry.get("path", entry.get("name", "?"))).name
                                         for entry in inputs.get("overlays") or []]},
        "toolchain": manifest.get("tools"),
        "cxx_runtime_ok": (manifest.get("cxx_runtime") or {}).get("ok"),
    }


def pytest_statement(config) -> dict:
    """The pytest that ran the cases and the installed distributions its plugins came from
    (`palw certify` loads only the suite's own: certify.SUITE_PLUGINS)."""
    from importlib.metadata import packages_distributions, version

    owners = packages_distributions()
    distributions, local = set(), {}
    for plugin in config.pluginmanager.get_plugins():
        module = getattr(plugin, "__name__", None)
        if not isinstance(module, str) or module.startswith("_pytest"):
            continue
        owner = owners.get(module.split(".")[0], [])
        distributions.update(owner)
        source = getattr(plugin, "__file__", None)
        if not owner and source:  # a -p module or a conftest of no installed distribution: by its bytes
            local[module] = {"module": module, "file": source, "sha256": sha256_file(Path(source))}
    distributions.discard("pytest")
    return {"version": pytest.__version__,
            "plugins": sorted(f"{name} {version(name)}" for name in distributions),
            "local": sorted(local.values(), key=lambda entry: entry["module"])}
