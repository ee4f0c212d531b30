"""The device pin probe's child (pytest_palw.probes.pin_probe), on the CPU runtime: it loads the
runtime named by a manifest, discovers and traces one token, and prints the statuses the device
pin case judges. On a CPU runtime attach refuses (no CUDA backend), so nothing is approved; the
GPU side (the shim reaching ggml-cuda) is judged by conformance/test_device_pin.py."""

import json
import os
import subprocess
import sys

import pytest

from pytest_palw.builder.toolchain import nvcc_path
from pytest_palw.fixtures.models.catalog import ensure_model
from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.probes.pin_probe import REPORTED_CC_VARIABLE, build_shim


def test_the_child_reports_the_trace_statuses(cpu_build):
    model = ensure_model("tiny")
    result = subprocess.run([sys.executable, "-m", "pytest_palw.probes.pin_probe", str(cpu_build.path),
                             str(model), "0", "11" * 32], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["discovered"] == V2_COUNT
    assert report["attach"] == "INVALID_ARGUMENT" and report["kernel_info"] is None
    assert (report["approved"], report["records"], report["fingerprint"]) == (0, 0, None)
    assert report["faults"] == [["INVALID_ARGUMENT", "INVALID_REQUEST"]]


FAKE_CUDART = r"""
#include <cuda_runtime_api.h>
#include <string.h>
// A CUDA runtime whose one device is cc 9.0, under both spellings of the properties call.
extern "C" cudaError_t fake(cudaDeviceProp * p, int) __asm__("cudaGetDeviceProperties");
extern "C" cudaError_t fake(cudaDeviceProp * p, int) { memset(p, 0, sizeof *p); p->major = 9; return cudaSuccess; }
extern "C" cudaError_t fake_v2(cudaDeviceProp * p, int) __asm__("cudaGetDeviceProperties_v2");
extern "C" cudaError_t fake_v2(cudaDeviceProp * p, int) { return fake(p, 0); }
"""
CONSUMER = r"""
#include <cuda_runtime_api.h>
// ggml_cuda_init's reading of the cc.
extern "C" int cc() {
    cudaDeviceProp p;
    return cudaGetDeviceProperties(&p, 0) == cudaSuccess ? 100 * p.major + 10 * p.minor : -1;
}
"""


def test_the_shim_reaches_a_cuda_runtime_loaded_rtld_local(tmp_path):
    """As in the runtime under test: a library linked to a shared libcudart, loaded by ctypes
    (RTLD_LOCAL), asks for the device's properties; with the shim preloaded it is told
    $PALW_REPORTED_CC, without $PALW_REPORTED_CC the device's own."""
    try:
        nvcc = str(nvcc_path("the shim test compiles against the CUDA headers"))
    except AssertionError as error:
        pytest.skip(f"{error}")
    (tmp_path / "fake.cpp").write_text(FAKE_CUDART)
    (tmp_path / "consumer.cpp").write_text(CONSUMER)
    library = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-cudart", "none"]
    for command in ([*library, "fake.cpp", "-o", "libcudart.so.12"],
                    [*library, "consumer.cpp", "-L.", "-l:libcudart.so.12", f"-Xlinker=-rpath,{tmp_path}",
                     "-o", "libconsumer.so"]):
        subprocess.run(command, cwd=tmp_path, check=True, capture_output=True)
    probe = [sys.executable, "-c", f"import ctypes; print(ctypes.CDLL({str(tmp_path / 'libconsumer.so')!r}).cc())"]

    def told(**env) -> str:
        result = subprocess.run(probe, capture_output=True, text=True, env=dict(os.environ, **env), check=True)
        return result.stdout.strip()

    shim = str(build_shim())
    assert told() == "900"
    assert told(LD_PRELOAD=shim, **{REPORTED_CC_VARIABLE: "890"}) == "890"
    assert told(LD_PRELOAD=shim) == "900"
