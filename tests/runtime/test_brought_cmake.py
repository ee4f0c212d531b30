"""The vendor's route end to end: a runtime built with plain `cmake` (not `palw build`), its
libraries and observer copied into a fresh directory with no manifest, certified by `palw certify
--lib DIR`. The patched tree is a copy of the cached CPU build's (already patched: no second
patching); only the targets the CPU tier needs are compiled (libllama, libggml*, llama-palw-observer).

With ccache on PATH the build compiles through it, as a vendor's CI may, with `palw build`'s
settings (builder/toolchain.py) and laid out as a `palw build` is (source/, build/ and its copy of
runtime-palw/cuda side by side in the pytest-palw cache): an object compiled alike from the same file
is not compiled twice. What is
linked, and how, is this plain cmake build's."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pytest_palw.builder.config import RUNTIME_SUBDIR
from pytest_palw.builder.toolchain import ccache_launcher, detect, require
from pytest_palw.paths import NATIVE_RUNTIME_DIR, cache_dir

TARGETS = ("llama", "ggml", "llama-palw-observer")
FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DGGML_NATIVE=OFF", "-DLLAMA_OPENSSL=OFF",
         "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF",
         "-DLLAMA_BUILD_TOOLS=ON", "-DGGML_CUDA_PALW_TRACE=ON",
         # the libraries find each other where they are copied, as a packaged runtime's do
         "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON")


def plain_cmake_build(source: Path, build: Path, runtime: Path) -> float:
    """Configure and build ``source`` with cmake alone, its producer ``runtime``; returns the seconds it took."""
    started = time.monotonic()
    ccache = detect("cpu").ccache
    launcher = ";".join(ccache_launcher(ccache)) if ccache else None
    launchers = [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={launcher}" for lang in ("C", "CXX")] if launcher else []
    for command in ([str(require("cmake")), "-S", str(source), "-B", str(build), "-G", "Ninja",
                     f"-DCMAKE_MAKE_PROGRAM={require('ninja')}", f"-DPALW_CUDA_RUNTIME_DIR={runtime}",
                     *FLAGS, *launchers],
                    [str(require("cmake")), "--build", str(build), "--target", *TARGETS]):
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, f"{command[:3]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return time.monotonic() - started


def certify(run_palw, lib, certificate: Path) -> dict:
    result = run_palw("certify", "--lib", lib, "--certificate", certificate, timeout=1200)
    assert certificate.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(certificate.read_text())


def passed_by_tier(document: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for case in document["cases"]:
        if case["outcome"] == "passed":
            counts[case.get("tier") or "none"] = counts.get(case.get("tier") or "none", 0) + 1
    return counts


def test_a_plain_cmake_build_certifies_as_the_palw_build(cpu_build, tmp_path, run_palw):
    work = Path(tempfile.mkdtemp(prefix="plain-cmake-", dir=cache_dir("test-builds")))  # beside builds/
    try:
        shutil.copytree(cpu_build.source_dir, work / "source", symlinks=True)
        shutil.copytree(NATIVE_RUNTIME_DIR, work / RUNTIME_SUBDIR)
        seconds = plain_cmake_build(work / "source", work / "build", work / RUNTIME_SUBDIR)
        print(f"plain cmake build of {', '.join(TARGETS)}: {seconds:.0f} s")
        vendor = tmp_path / "vendor" / "lib"  # what a vendor ships: no palw-manifest.json anywhere above
        vendor.mkdir(parents=True)
        for path in sorted((work / "build" / "bin").iterdir()):
            if path.name.startswith(("libllama.so", "libggml")) or path.name == "llama-palw-observer":
                shutil.copy2(path, vendor / path.name, follow_symlinks=False)
    finally:
        shutil.rmtree(work)  # nothing can be loaded from the build tree any more

    brought = certify(run_palw, vendor, tmp_path / "brought.json")
    baseline = certify(run_palw, cpu_build.path, tmp_path / "palw-build.json")

    runtime = brought["runtime"]
    assert runtime["origin"] == "brought" and runtime["manifest"] == {}
    assert baseline["runtime"]["origin"] == "palw-build"
    assert "patches applied" in runtime["absent"] and "patches_applied" not in runtime
    assert runtime["tools"]["observer"] == str(vendor / "llama-palw-observer")
    # Each library mapped in the run is a file of the brought directory, with that file's sha256.
    mapped = runtime["observed"]["libraries"]
    files = {str(path.resolve()) for path in vendor.iterdir() if path.name.startswith(("libllama", "libggml"))}
    assert set(mapped) == files, (sorted(mapped), sorted(files))
    for path, digest in mapped.items():
        assert digest == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    # The same CPU cases pass as with `palw build`'s CPU runtime.
    assert passed_by_tier(brought)["cpu"] == passed_by_tier(baseline)["cpu"] > 0
    assert brought["verdict"]["passed"] == baseline["verdict"]["passed"]
    assert brought["fingerprints"] == baseline["fingerprints"]
