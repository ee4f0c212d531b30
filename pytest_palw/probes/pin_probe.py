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

Run as ``python -m pytest_palw.probes.pin_probe MANIFEST MODEL TOKEN DIGEST_HEX`` it is the child:
it prints one JSON line with the trace's statuses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pytest_palw.builder.toolchain import nvcc_path, tool_version
from pytest_palw.cache import key_of
from pytest_palw.paths import cache_dir
from pytest_palw.probes.compile import compile_once

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
    return compile_once(cache_dir("probes") / f"palw-reported-cc-{key}.so", command,
                        what="building the device pin shim", source=(SHIM_SOURCE, ".cpp"), after=["-ldl"],
                        failure=lambda stderr: f"nvcc could not build the device pin shim ({stderr.strip()[-1500:]}): "
                                               f"check the toolkit ({tool_version(nvcc)})")


def run_child(manifest: Path, model: Path, token: int | None, digest: bytes | None, reported_cc: int | None,
              timeout: int = 300) -> dict:
    """One V2 trace in a child whose CUDA runtime reports ``reported_cc`` (None: no shim, the device as it
    is): its statuses (see main). ``token`` None: the model's default; ``digest`` None: the mapped
    libggml-cuda.so's sha256, as the session computes it."""
    env = dict(os.environ)
    if reported_cc is not None:
        env.update({"LD_PRELOAD": str(build_shim()), REPORTED_CC_VARIABLE: str(reported_cc)})
    arguments = [str(manifest), str(model), "default" if token is None else str(token),
                 "mapped" if digest is None else digest.hex()]
    try:
        result = subprocess.run([sys.executable, "-m", __name__, *arguments],
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


# ggml ccs (100 * major + 10 * minor) a pin can name, newest first: where a brought runtime's trace does not
# commit on this device, the pin probe tells the runtime each of those below the device's cc in turn.
PIN_CANDIDATES = (1200, 1030, 1000, 900, 890, 870, 860, 800, 750, 720, 700, 620, 610, 600, 530, 520, 500)
FIRST_LAUNCH_REFUSED = [["INVALID_ARGUMENT", "UNSUPPORTED_DISPATCH"]]


def commits(result: dict, cc: int) -> bool:
    """Did a child told ``cc`` commit the whole V2 trace, with kernel info reporting that architecture?"""
    from pytest_palw.fixtures.oracles.launch_table import V2_COUNT

    return (result.get("finalize") == "OK" and result.get("records") == V2_COUNT
            and (result.get("sm_arch") or 0) * 10 == cc)


def refused_first_launch(result: dict) -> bool:
    """Did the child fail closed at its first launch, as the dispatch hook does on a device of another cc?"""
    return (result.get("decode") not in (None, 0) and result.get("approved") == 1
            and result.get("accepted") == 0 and result.get("faults") == FIRST_LAUNCH_REFUSED)


def pinned_from(device_cc: int, probes: list[dict]) -> dict:
    """The observation from the probes' results (``probes[0]``: the device as it is; then the children told
    each candidate cc, in order): ``pinned_cc`` (None when not observed), how it was observed, the probes."""
    if not probes:
        return {"pinned_cc": None, "observed_by": None, "why": "no probe ran", "probes": []}
    own = probes[0]
    if commits(own, device_cc):
        return {"pinned_cc": device_cc, "probes": probes,
                "observed_by": (f"a V2 trace on this device (cc {device_cc}) committed its {own['records']} records "
                                f"and kernel info reported sm_{own['sm_arch']}")}
    if not refused_first_launch(own):
        return {"pinned_cc": None, "observed_by": None, "probes": probes,
                "why": (f"a V2 trace on this device (cc {device_cc}) neither committed nor failed closed at its first "
                        f"launch (finalize {own.get('finalize')}, decode {own.get('decode')}, faults "
                        f"{own.get('faults')})")}
    for result in probes[1:]:
        cc = result.get("reported_cc")
        if cc and commits(result, cc):
            return {"pinned_cc": cc, "probes": probes,
                    "observed_by": (f"a V2 trace on this device (cc {device_cc}) failed closed at its first launch; "
                                    f"told cc {cc} (pin probe), it committed its {result['records']} records and "
                                    f"kernel info reported sm_{result['sm_arch']}")}
    told = [result.get("reported_cc") for result in probes[1:]]
    return {"pinned_cc": None, "observed_by": None, "probes": probes,
            "why": (f"a V2 trace on this device (cc {device_cc}) failed closed at its first launch, and told "
                    f"{told or 'no other cc'} it committed under none")}


def observe_pinned_cc(location: Path, model: Path, device_cc: int) -> dict:
    """A brought CUDA runtime's pinned cc, observed (no manifest states it): one V2 trace in a child on
    this device as it is; only when that fails closed at its first launch, children told each candidate cc
    below the device's (PIN_CANDIDATES, up to three at once) until one commits. See ``pinned_from``."""
    from concurrent.futures import ThreadPoolExecutor

    def probe(cc: int | None) -> dict:
        try:
            return run_child(location, model, None, None, cc)
        except Exception as error:  # noqa: BLE001 - a child that hung, died or could not start (no nvcc for
            # the shim): a result that neither commits nor refuses
            return {"reported_cc": cc or 0, "error": str(error)[:400]}

    probes = [probe(None)]
    if refused_first_launch(probes[0]):
        candidates = [cc for cc in PIN_CANDIDATES if cc < device_cc]
        with ThreadPoolExecutor(3) as pool:
            for start in range(0, len(candidates), 3):
                batch = list(pool.map(probe, candidates[start:start + 3]))
                probes += batch
                if any(commits(result, result.get("reported_cc") or 0) for result in batch):
                    break
    return pinned_from(device_cc, probes)


def main(manifest: str, model_path: str, token_text: str, digest_hex: str) -> dict:
    from pytest_palw.preflight.model_check import read_profile
    from pytest_palw.runtime.caller import DIGEST_NAMES, TraceCaller
    from pytest_palw.runtime.discovery import discover
    from pytest_palw.runtime.kernel_digest import kernel_digest
    from pytest_palw.runtime.library import Runtime, RuntimeBuild
    from pytest_palw.runtime.names import fault_name, status_name
    from pytest_palw.runtime.run import run_trace

    runtime = Runtime(RuntimeBuild.locate(Path(manifest)))
    lib = runtime.lib
    model = runtime.load_model(Path(model_path), read_profile(Path(model_path)))
    token = model.default_token() if token_text == "default" else int(token_text)
    digest = kernel_digest(runtime).digest if digest_hex == "mapped" else bytes.fromhex(digest_hex)
    discovery = discover(model, token)
    caller = TraceCaller(runtime, discovery.candidates, version=2, digests=dict.fromkeys(DIGEST_NAMES, digest))
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
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])))
