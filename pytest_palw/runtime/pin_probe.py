"""The device pin's fail-closed branch, run for real on the pinned device: a child process in which
the CUDA runtime reports another compute capability.

The patch pins a trace to one ggml compute capability (PALW_CUDA_PINNED_CC) and compares it with
``ggml_cuda_info().devices[d].cc``, which ggml-cuda computes once from
``cudaGetDeviceProperties`` (100 * major + 10 * minor). A certifying run happens on a device of the
pinned cc, so the branch that refuses any other device never runs there. The smallest mechanism
that reaches it without touching the runtime: a child process with a preloaded shim of
``cudaGetDeviceProperties`` (the runtime maps the shared libcudart) that reports
``$PALW_REPORTED_CC`` instead of the device's major/minor, and nothing else. Every line of the
runtime under test runs unchanged, on the real device; only the cc it is told differs. The same
child with the shim reporting the device's true cc is the control.

Run as ``python -m pytest_palw.runtime.pin_probe MANIFEST MODEL TOKEN DIGEST_HEX`` it is the child:
it prints one JSON line with the trace's statuses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pytest_palw.build.toolchain import nvcc_path, tool_version
from pytest_palw.cache import exclusive, key_of
from pytest_palw.paths import cache_dir

REPORTED_CC_VARIABLE = "PALW_REPORTED_CC"
SHIM_SOURCE = r"""
// cudaGetDeviceProperties as the CUDA runtime answers it, except major/minor from $PALW_REPORTED_CC.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cudaError_t (*properties_fn)(cudaDeviceProp *, int);

static int find_cudart(struct dl_phdr_info * info, size_t, void * found) {
    const char * base = info->dlpi_name != NULL ? strrchr(info->dlpi_name, '/') : NULL;
    base = base != NULL ? base + 1 : info->dlpi_name;
    if (base != NULL && strncmp(base, "libcudart", 9) == 0 && strstr(base, ".so") != NULL) {
        *(const char **) found = info->dlpi_name;
        return 1;
    }
    return 0;
}

// The CUDA runtime's own function: the next definition in the global scope, else the loaded
// libcudart's (ctypes loads the runtime's libraries RTLD_LOCAL, out of RTLD_NEXT's reach).
static properties_fn real_function(const char * symbol) {
    void * real = dlsym(RTLD_NEXT, symbol);
    const char * cudart = NULL;
    if (real == NULL && dl_iterate_phdr(find_cudart, &cudart) != 0 && cudart != NULL) {
        void * handle = dlopen(cudart, RTLD_LAZY | RTLD_NOLOAD);
        real = handle != NULL ? dlsym(handle, symbol) : NULL;
    }
    return (properties_fn) real;
}

static cudaError_t reported(const char * symbol, cudaDeviceProp * prop, int device) {
    properties_fn real = real_function(symbol);
    if (real == NULL) {
        fprintf(stderr, "palw pin shim: no %s in a loaded libcudart\n", symbol);
        return cudaErrorUnknown;
    }
    cudaError_t status = real(prop, device);
    const char * cc = getenv("PALW_REPORTED_CC");
    if (status == cudaSuccess && prop != NULL && cc != NULL && atoi(cc) > 0) {
        prop->major = atoi(cc) / 100;
        prop->minor = (atoi(cc) % 100) / 10;
    }
    return status;
}

extern "C" cudaError_t palw_shim_properties(cudaDeviceProp * prop, int device)
    __asm__("cudaGetDeviceProperties");
extern "C" cudaError_t palw_shim_properties(cudaDeviceProp * prop, int device) {
    return reported("cudaGetDeviceProperties", prop, device);
}
extern "C" cudaError_t palw_shim_properties_v2(cudaDeviceProp * prop, int device)
    __asm__("cudaGetDeviceProperties_v2");
extern "C" cudaError_t palw_shim_properties_v2(cudaDeviceProp * prop, int device) {
    return reported("cudaGetDeviceProperties_v2", prop, device);
}
"""


def build_shim() -> Path:
    """The shim library, compiled once per (source, nvcc) into the cache."""
    nvcc = nvcc_path("the device pin case compiles a cudaGetDeviceProperties shim")
    command = [str(nvcc), "-shared", "-Xcompiler", "-fPIC", "-cudart", "none"]
    if os.environ.get("CUDAHOSTCXX"):
        command += ["-ccbin", os.environ["CUDAHOSTCXX"]]
    key = key_of(SHIM_SOURCE, command, tool_version(nvcc))
    target = cache_dir("probes") / f"palw-reported-cc-{key}.so"
    with exclusive(target.with_suffix(".lock"), what="building the device pin shim"):
        if not target.is_file():
            source, partial = target.with_suffix(".cpp"), target.with_suffix(".partial.so")
            source.write_text(SHIM_SOURCE)
            result = subprocess.run(command + [str(source), "-o", str(partial), "-ldl"], capture_output=True, text=True)
            if result.returncode != 0:
                raise AssertionError(f"nvcc could not build the device pin shim ({result.stderr.strip()[-1500:]}): "
                                     f"check the toolkit ({tool_version(nvcc)})")
            partial.replace(target)
    return target


def run_child(manifest: Path, model: Path, token: int, digest: bytes, reported_cc: int, timeout: int = 300) -> dict:
    """One V2 trace in a child whose CUDA runtime reports ``reported_cc``: its statuses (see main)."""
    env = dict(os.environ, LD_PRELOAD=str(build_shim()), **{REPORTED_CC_VARIABLE: str(reported_cc)})
    try:
        result = subprocess.run([sys.executable, "-m", __name__, str(manifest), str(model), str(token), digest.hex()],
                                capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the pin probe child (reported cc {reported_cc}) ran past {timeout} s: the runtime "
                             f"hangs when told another cc; run `python -m {__name__}` by hand to see where") from None
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        errors = [line for line in result.stderr.splitlines() if "error" in line.lower()][:8]
        raise AssertionError(f"the pin probe child (reported cc {reported_cc}) exited {result.returncode} without "
                             "a result:\n" + "\n".join(errors) + f"\n...\n{result.stderr[-1500:]}")
    return json.loads(lines[-1])


def main(manifest: str, model_path: str, token: int, digest_hex: str) -> dict:
    from pytest_palw.runtime.caller import DIGEST_NAMES, TraceCaller
    from pytest_palw.runtime.discovery import discover
    from pytest_palw.runtime.library import Runtime, RuntimeBuild
    from pytest_palw.runtime.names import fault_name, status_name
    from pytest_palw.runtime.run import run_trace

    runtime = Runtime(RuntimeBuild.locate(Path(manifest)))
    lib = runtime.lib
    model = runtime.load_model(Path(model_path))
    discovery = discover(model, token)
    caller = TraceCaller(runtime, discovery.candidates, version=2,
                         digests=dict.fromkeys(DIGEST_NAMES, bytes.fromhex(digest_hex)))
    with model.context() as context:
        run = run_trace(context, caller, token)
    diagnostics = run.before_finalize
    return {
        "reported_cc": int(os.environ.get(REPORTED_CC_VARIABLE, "0")),
        "discovered": len(discovery.candidates),
        "attach": status_name(lib, run.attach_status),
        "kernel_info": None if run.info_status is None else status_name(lib, run.info_status),
        "sm_arch": int(caller.infos.q4.sm_arch) if caller.infos.q4 is not None else None,
        "decode": run.decode_status, "approved": caller.approved, "accepted": run.accepted,
        "count": diagnostics.count if diagnostics else None,
        "committed": diagnostics.committed if diagnostics else None,
        "finalize": None if run.finalize_status is None else status_name(lib, run.finalize_status),
        "records": run.record_count, "fingerprint": run.fingerprint if run.record_count else None,
        "faults": [[status_name(lib, f.status), fault_name(lib, f.fault)] for f in caller.faults],
        "destroy": None if run.destroy_status is None else status_name(lib, run.destroy_status),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])))
