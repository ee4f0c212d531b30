"""What a certificate states about the run besides its cases: what the kernel digest proves, the
runtime's pin, patches and toolchain, and the pytest that ran. Computed from facts the processes
report (session.py), rendered by every output of the one document."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_palw.cache import sha256_file

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



def kernel_digest_statement(digest) -> dict:
    """A runtime.kernel_digest.KernelDigest as the certificate states it, with what it proves and not."""
    return {"sha256": digest.digest.hex(), "source": digest.source, "proves": DIGEST_PROVES[digest.origin],
            "does_not_prove": DIGEST_DOES_NOT_PROVE}


def runtime_statement(manifest: dict) -> dict:
    """What a certificate must always say about the runtime: its pin, the patches applied, the
    toolchain, and the one-C++-runtime check."""
    from pytest_palw.builder.choice import PALW_DEFAULT_PIN

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
        # the runtime-palw/cuda compiled in (`palw build --runtime-dir`, else the package's): its tree digest
        "producer": {key: (inputs.get("native") or {}).get(key) for key in ("path", "sha256")},
    }


def brought_statement(build, pin: dict | None = None) -> dict:
    """What a certificate says about a brought runtime (a RuntimeBuild of origin ``brought``): only what
    its files, this process and the pin probe (``pin``: probes/pin_probe.py, pinned_from) showed
    (runtime/brought.py), and which facts only a manifest knows."""
    from pytest_palw.runtime.brought import MANIFEST_ONLY, mapped_libraries

    observed = {key: value for key, value in build.observed.items() if key != "tools_looked_in"}
    return {
        "pin": ({"cc": pin["pinned_cc"], "from": f"observed: {pin['observed_by']}"}
                if pin and pin.get("pinned_cc") is not None else None),
        "observed": {**observed, "libraries": mapped_libraries(),
                     **({"pinned_cc": pin} if pin is not None else {})},
        "toolchain": observed.get("toolchain"),
        "cxx_runtime_ok": (observed.get("cxx_runtime") or {}).get("ok"),
        "absent": {name: "only a `palw build` manifest knows it" for name in MANIFEST_ONLY},
    }


def absent_tool_reasons(tools: dict, variant: str) -> list[str]:
    """The verdict's reason when a seed tool the runtime's tiers need is absent (the observer for every
    runtime, the smoke for a CUDA one): the tool cases are required claims, so no certificate is
    CERTIFIED without the tools (their cases fail, naming where the tool was looked for)."""
    from pytest_palw.runtime.brought import TOOL_NAMES

    needed = ["observer"] + (["smoke"] if variant == "cuda" else [])
    absent = [TOOL_NAMES[role] for role in needed if not tools.get(role)]
    if not absent:
        return []
    return [f"the seed tool(s) {', '.join(absent)} of this runtime are absent, so their cases (required claims) "
            "could not pass: put them beside the libraries (DIR or DIR/../bin) or pass --palw-tools DIR"]


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
