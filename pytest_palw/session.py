"""PalwSession: what the plugin's hooks and fixtures delegate to in every process (the controller
and each xdist worker alike; xdist's remote.py side).

It holds what this process needs and states: the runtime build and the model the controller
resolved and handed over (preflight/resolve.py), loaded lazily (a unit test that uses no PALW
fixture never loads a runtime); the tiers a case can run in; the witness that a case's body ran;
this process's facts. Outside the workers plugin.py registers a Controller beside it
(controller.py: resolving, the inventory, the reports, the certificate), which this module never
imports.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import time
from functools import cache, cached_property
from pathlib import Path

import pytest

from pytest_palw import options as opts
from pytest_palw import paths
from pytest_palw.ahead import AheadJobs
from pytest_palw.builder.choice import PALW_DEFAULT_PIN
from pytest_palw.certificate.facts import brought_statement, kernel_digest_statement, runtime_statement
from pytest_palw.certificate.inventory import witness_id
from pytest_palw.devices import Device, assign_worker_device, visible_devices, worker_number
from pytest_palw.errors import or_exit
from pytest_palw.handed import HANDED
from pytest_palw.lookahead import Lookahead
from pytest_palw.marks import LAUNCH_MARK, launch_family
from pytest_palw.preflight.gpu_share import slots_for
from pytest_palw.preflight.resolve import Handover, ResolvedModel, choose_build, resolve_model
from pytest_palw.runtime.brought import ORIGIN_BUILD
from pytest_palw.runtime.caller import DIGEST_NAMES
from pytest_palw.runtime.kernel_digest import KernelDigest, MappedDigests, kernel_digest
from pytest_palw.runtime.library import Model, Runtime, RuntimeBuild
from pytest_palw.selection import in_suite
from pytest_palw.tiers import TIERS, tier_of

_BODY = pytest.StashKey[str]()  # the suite function whose body ran to its end in this call
# Every entry of the case's suite function body in this process (kept across reruns of its protocol):
# None, or the name of the exception that left that entry.
_ENTRIES = pytest.StashKey[list]()
_SWAPPED = pytest.StashKey[set]()  # plugin fixtures whose value the body received was not the plugin's


class PalwSession:
    def __init__(self, config):
        self.config = config
        self.worker_id = config.workerinput["workerid"] if hasattr(config, "workerinput") else None
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
        self.handed = Handover.from_wire(getattr(config, "workerinput", {}))  # what the controller resolved
        self.runtime_line: str | None = self.handed.runtime_line
        self.last_call: tuple | None = None  # (report, item) of the last call attested here
        self.stop: dict | None = None  # a case's pytest.exit: {"message", "returncode"} (stopped)
        self.ahead = AheadJobs(self)  # @ahead fixtures' work (ahead.py)

    def option(self, dest: str) -> str | None:
        return opts.resolve(self.config, dest)

    # -- the plugin's hooks (plugin.py) hand over to these ----------------------------
    def configure(self) -> None:
        self.gpu_slots  # noqa: B018 - a wrong count is a usage error now, not in the first case
        self.lookahead  # noqa: B018 - likewise --palw-lookahead
        self.config.pluginmanager.register(_Restamp(self), "palw-restamp")
        if self.worker_id is not None:
            self.device_assignment = assign_worker_device(self.worker_id, self.option("palw_device"))

    def mark_tiers(self, items) -> None:
        """Every case of the conformance suite counts for the certificate: cpu tier unless marked;
        a fixture a case gets from outside the plugin and the suite is noted (a verdict reason)."""
        for item in items:
            if not in_suite(item.path):
                continue
            if not any(item.get_closest_marker(f"palw_{tier}") for tier in TIERS):
                item.add_marker("palw_cpu")
            self.foreign_fixtures.update(foreign_fixtures(item))

    def start_ahead(self, session) -> None:
        """At the start of the cases: the @ahead jobs of the selected cases (ahead.py), outside the
        workers and for a run that executes fixtures."""
        option = self.config.option
        if self.worker_id is None and not (option.collectonly or getattr(option, "setupplan", False)):
            if self.ahead.start(session.items):
                self.mark("ahead_started")

    def count_deselected(self, items) -> None:
        self.deselected += sum(1 for item in items if in_suite(item.path))

    def setup_case(self, item) -> None:
        self.mark("first_case")
        self.lookahead.settle(item)
        skip_if_tier_unavailable(self, item)

    @contextlib.contextmanager
    def witness(self, item):
        """Around a case's call: run the suite's own function (unwrapped: a wrapper put around it
        can neither skip it nor swallow its failure) and, when it returns, note which case it ran
        as, from the parameter values it received (inventory.witness_id). A call that never
        reaches it (a plugin replacing runtest or pytest_pyfunc_call), another function in its
        place or other parameters leave no witness of this case: the verdict counts its body as
        not run. Every entry of the body and every exception that left it is counted, across
        reruns of the case's protocol in this process (a retry by any plugin or conftest), and each
        value of a plugin fixture it receives must be the object the plugin's fixture returned."""
        item.stash[_BODY] = None
        module = getattr(item, "module", None) if isinstance(item, pytest.Function) else None
        if module is None or not in_suite(item.path):
            yield
            return
        original = item.obj
        function = inspect.unwrap(original)
        entries = item.stash.setdefault(_ENTRIES, [])
        swapped = item.stash.setdefault(_SWAPPED, set())

        def body(*args, **kwargs):
            entries.append(None)
            entry = len(entries) - 1
            swapped.update(name for name, value in kwargs.items()
                           if name in HANDED and HANDED[name].get(id(value)) is not value)
            try:
                result = function(*args, **kwargs)
            except BaseException as error:
                entries[entry] = type(error).__name__
                raise
            item.stash[_BODY] = witness_id(item.originalname, function, module, kwargs)
            return result

        item.obj = body
        try:
            yield
        finally:
            item.obj = original

    def attest(self, item, report) -> None:
        """The call's report carries the witness; every report of a case about one launch carries
        that launch (plain values: they cross xdist's wire)."""
        if report.when == "call":
            stamp(item, report)
            self.last_call = (report, item)
        launch = self.launch_of(item)
        if launch is not None:
            report.palw_launch = launch

    def launch_of(self, item) -> dict | None:
        """A ``palw_launch(label, stream=)`` case's launch: its ``index`` parameter as an index of the
        V2 (all-launch) order, mapped through the launch table when the stream is V1 (MMVQ only)."""
        marker = item.get_closest_marker(LAUNCH_MARK)
        callspec = getattr(item, "callspec", None)
        index = callspec.params.get("index") if callspec is not None else None
        if marker is None or not isinstance(index, int):
            return None
        try:
            label, stream = launch_family(marker)
        except ValueError:
            return None  # the expected inventory refuses the suite with this reason
        return self.launch_at(label, stream, index)

    def launch_at(self, label: str, stream: str, index: int) -> dict:
        """The launch of a family's case with this ``index``: in the V2 order (a V1 index mapped)."""
        if stream == "v1":
            mmvq = self.mmvq_positions
            index = mmvq[index] if 0 <= index < len(mmvq) else None
        return {"index": index, "label": label, "stream": stream}

    @cached_property
    def mmvq_positions(self) -> list[int]:
        """Where each MMVQ launch (a V1 index) sits in the V2 order: the launch table of the model."""
        from pytest_palw.fixtures.oracles.launch_table import expected_launches, mmvq_positions

        return mmvq_positions(expected_launches(self.resolved_model.profile))

    def stopped(self, stop) -> None:
        """A case stopped the session with pytest.exit (or_exit: the cause and the fix in one line)."""
        code = stop.returncode
        if code is not None:  # execnet sends plain values only: an ExitCode (IntEnum) as its int
            code = int(code) if isinstance(code, int) else int(pytest.ExitCode.INTERRUPTED)
        self.stop = {"message": str(stop.msg), "returncode": code}

    def worker_finish(self, session) -> None:
        if self.worker_id is not None:
            output = session.config.workeroutput
            output["palw_facts"] = self.facts()
            if self.stop is not None:  # for the controlling process to stop with (plugin.pytest_runtestloop)
                output["palw_stop"] = self.stop
                # xdist stops the run cleanly only on status 2 ("keyboard-interrupt"); any other status
                # with a case in flight is an INTERNALERROR that hides the line
                output["exitstatus"] = int(pytest.ExitCode.INTERRUPTED)

    # -- what this process runs: handed by the controller, else resolved here on first use ----------
    @cached_property
    def resolved_model(self) -> ResolvedModel:
        return self.handed.model or resolve_model(self.option("palw_model"))

    @cached_property
    def build(self) -> RuntimeBuild:
        location = self.handed.manifest or self.option("palw_lib")  # a worker runs what was checked
        build, line = choose_build(location, None if location else visible_devices(), self.option("palw_build"),
                                   self.option("palw_tools"), self.option("palw_runtime_headers"),
                                   self.option("palw_hook_sha256"), self.option("palw_source"))
        self.runtime_line = line or self.runtime_line
        return build

    @cached_property
    def pin_observation(self) -> dict | None:
        """A brought CUDA runtime's pinned cc as the pin probe observed it on this machine's first device
        (probes/pin_probe.py: observe_pinned_cc), handed by the controller, else observed here; None for
        a `palw build` output (its manifest states the pin), a CPU runtime, or no visible device."""
        if self.handed.pin is not None:
            return self.handed.pin
        build = self.build
        if build.origin == ORIGIN_BUILD or build.variant != "cuda":
            return None
        devices = visible_devices()
        if not devices:
            return None
        from pytest_palw.probes.pin_probe import observe_pinned_cc

        return observe_pinned_cc(build.location, self.resolved_model.path, devices[0].cc)

    @property
    def pinned_cc(self) -> int | None:
        """The cc the runtime's trace is pinned to: its manifest's (the overlay's default when unset), or
        for a brought runtime the one observed (None when not observed); None for a CPU runtime."""
        build = self.build
        if build.variant != "cuda":
            return None
        if build.origin == ORIGIN_BUILD:
            return build.pinned_cc if build.pinned_cc is not None else PALW_DEFAULT_PIN
        observation = self.pin_observation
        return observation.get("pinned_cc") if observation else None

    @cached_property
    def runtime(self) -> Runtime:
        self.used = True
        runtime = Runtime(self.build)
        self.library_digests = MappedDigests(self.build.lib_dir)  # beside the cases, read once
        if self.build.variant == "cuda":
            runtime.gpu_slots = slots_for(self.gpu_slots, worker_number(self.worker_id))
        self.mark("runtime_loaded")
        return runtime

    @cached_property
    def gpu_slots(self) -> int:
        return self._count("palw_gpu_slots", "no limit", 2)

    @cached_property
    def lookahead(self) -> Lookahead:
        """The next cases' runtime work on --palw-lookahead threads (lookahead.py)."""
        return Lookahead(self._count("palw_lookahead", "each case runs its own work, in its call", 4))

    def _count(self, dest: str, zero: str, example: int) -> int:
        """An option that counts (0 or more); anything else is a usage error naming the option."""
        value = self.option(dest)
        try:
            count = int(value)
        except ValueError:
            count = -1
        if count < 0:
            flag = "--" + dest.replace("_", "-")
            raise pytest.UsageError(f"{flag} {value!r} is not a count: give 0 ({zero}) or more, e.g. {example}")
        return count

    @cached_property
    def model(self) -> Model:
        resolved = self.resolved_model  # a wrong model stops in one line before it is loaded
        if self.handed.model and resolved.changed():
            # each case that needs the model errors with this line (stopping a worker would stop xdist)
            raise AssertionError(f"{resolved.path} changed since the controller checked it (size, mtime or "
                                 "inode): keep the model file unchanged while the suite runs")
        model = self.runtime.load_model(resolved.path, resolved.profile)
        self.mark("model_loaded")
        return model

    @property
    def model_profile(self):
        """The model's profile (model_check: widths, attention geometry), as resolved."""
        return self.resolved_model.profile

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
    def kernel_digest(self) -> KernelDigest:
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
            brought = self.build.origin != ORIGIN_BUILD
            pinned = self.pinned_cc
            if pinned is None:
                why = (self.pin_observation or {}).get("why", "no device to observe it on")
                return (f"the pinned cc of this brought runtime was not observed: {why}; check the runtime on a "
                        "device of the cc it was built for (-DPALW_CUDA_PINNED_CC)")
            device = self.device
            if device is None or device.cc != pinned:
                seen = device.cc if device else "unknown"
                fix = (f"rebuild it with -DPALW_CUDA_PINNED_CC={seen}" if brought else
                       f"rebuild with `palw build --variant cuda --pinned-cc {seen}`")
                return (f"device cc {seen} is not the runtime's pinned cc {pinned}: {fix} to trace on this device "
                        "(the device-pin case checks the fail-closed path instead)")
        return None

    # -- facts for the certificate ------------------------------------------------------
    def facts(self) -> dict:
        if not self.used:
            return {"worker": self.worker_facts(), "deselected": self.deselected}
        build = self.build
        device = self.device
        facts = {
            "runtime": {"lib_dir": str(build.lib_dir), "variant": build.variant,
                        "has_cuda_trace": self.runtime.has_cuda_trace, "chosen_by": self.runtime_line,
                        "origin": build.origin, "tools": build.tools,
                        **(runtime_statement(build.manifest) if build.origin == ORIGIN_BUILD
                           else brought_statement(build, self.pin_observation)),
                        "manifest": build.manifest, "libraries": self.library_digests.result()},
            "device": ({"kind": "cuda", "name": device.name, "cc": device.cc, "driver": device.driver}
                       if device else {"kind": "cpu", "name": "cpu", "cc": None, "driver": None}),
            "pinned_cc": (build.pinned_cc if build.origin == ORIGIN_BUILD else self.pinned_cc)
                         if build.variant == "cuda" else None,
            "kernel_digest": kernel_digest_statement(self.kernel_digest),
            "model": self.resolved_model.statement(),
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
                "model_resolved": ("handed by the controller" if self.handed.model else
                                   "here" if "resolved_model" in self.__dict__ else None),
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


def stamp(item, report) -> None:
    """The witness on a call's report (plain values: they cross xdist's wire)."""
    entries = item.stash.get(_ENTRIES, [])
    report.palw_body = item.stash.get(_BODY, None)
    report.palw_entries = len(entries)
    report.palw_raised = [raised for raised in entries if raised is not None]
    report.palw_swapped = sorted(item.stash.get(_SWAPPED, ()))


class _Restamp:
    """A call report logged after more entries of its body (pytest-retry reruns the call inside
    pytest_runtest_makereport and logs the first report at the end) carries the witness as it is
    when logged, before xdist sends it or the controller reads it."""

    def __init__(self, session):
        self.session = session

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        last = self.session.last_call
        if last is not None and last[0] is report:
            stamp(last[1], report)




@cache  # the installed packages' directories: fixed for the process
def trusted_roots() -> tuple[Path, ...]:
    """Where the code a certification may run comes from (the fixtures a suite case uses, the
    plugins `palw certify` loads): pytest, syrupy, xdist, the plugin and the suite (directories)."""
    import _pytest
    import syrupy
    import xdist

    return (*(Path(module.__file__).resolve().parent for module in (_pytest, syrupy, xdist)),
            paths.PACKAGE_DIR.resolve(), paths.CONFORMANCE_DIR.resolve())


def requested_fixtures(item, info) -> set[str]:
    """The fixtures a case requests (its arguments, its usefixtures marks) and those they request in
    turn; an autouse fixture nothing requests runs around the case but hands it nothing."""
    names = list(info.argnames) + [name for mark in item.iter_markers("usefixtures") for name in mark.args]
    seen: set[str] = set()
    while names:
        name = names.pop()
        if name in seen:
            continue
        seen.add(name)
        definitions = info.name2fixturedefs.get(name)
        if definitions:
            names.extend(definitions[-1].argnames)
    return seen


def foreign_fixtures(item) -> set[str]:
    """The fixtures ``item`` requests that come from neither the plugin, the suite nor pytest and its
    suite plugins: what a conftest or another plugin put in their place. The origin is the file the
    fixture's function was compiled from (its __module__ is only a name anyone can set)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    roots = trusted_roots()
    found = set()
    for name in requested_fixtures(item, info):
        definitions = info.name2fixturedefs.get(name)
        if not definitions:
            continue  # request, or a parameter pytest names itself
        function = getattr(definitions[-1], "func", None)  # the one the case gets
        code = getattr(function, "__code__", None)
        source = paths.resolved(code.co_filename) if code is not None else None
        if source is not None and within(source, roots):
            continue
        found.add(f"{name} ({source or repr(function)})")
    return found


# Once per file, not once per fixture of each of the suite's 3 075 cases (9 s of 40 under cProfile).
@cache
def within(source: Path, roots: tuple[Path, ...]) -> bool:
    return any(root in source.parents for root in roots)


def skip_if_tier_unavailable(session: PalwSession, item) -> None:
    tier = tier_of(item.keywords)
    if tier is None:
        return
    reason = or_exit(lambda: session.tier_skip_reason(tier))
    if reason:
        pytest.skip(f"{tier.upper()} tier: {reason}")
