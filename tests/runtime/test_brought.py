"""A brought runtime (runtime/brought.py): a directory of PALW-patched libraries without a manifest.

The libraries are the real ones of this host's CPU build, copied into a fresh directory; the
refusals run the real `palw certify` in a child process."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.runtime.brought import REQUESTS, _compared_pair, find_tools, observe
from pytest_palw.runtime.library import RuntimeBuild


def bring(manifest, directory: Path, *, tools: bool = True) -> Path:
    """The build's libraries (their soname links too) and, with ``tools``, its observer, copied into
    ``directory`` as a vendor's package would hold them."""
    directory.mkdir(parents=True)
    for path in sorted(manifest.lib_dir.iterdir()):
        if path.name.startswith(("libllama.so", "libggml")) or (tools and path.name == "llama-palw-observer"):
            shutil.copy2(path, directory / path.name, follow_symlinks=False)
    return directory


def test_the_compared_pair_is_read_from_either_instruction_form():
    merged = "  dd06a:\tmovabs $0x3800000002,%rdx\n  dd074:\tcmp    %rdx,(%rbx)\n"
    split = "  10:\tcmpl   $0x2,(%rdi)\n  14:\tcmpl   $0x38,0x4(%rdi)\n"
    assert _compared_pair(merged, (2, 56)) == (2, 56)
    assert _compared_pair(split, (2, 56)) == (2, 56)
    assert _compared_pair(merged.replace("0x3800000002", "0x3800000003"), (2, 56)) == (3, 56)
    assert _compared_pair(merged.replace("0x3800000002", "0x4000000002"), (2, 56)) == (2, 64)
    assert _compared_pair("  0:\tret\n", (2, 56)) == (None, None)


def test_a_brought_directory_is_observed_not_described(cpu_build, tmp_path):
    lib_dir = bring(cpu_build, tmp_path / "vendor" / "lib")
    build = RuntimeBuild.locate(lib_dir)
    assert build.origin == "brought" and build.manifest == {} and build.manifest_path is None
    assert build.location == lib_dir and build.variant == "cpu" and build.pinned_cc is None
    observed = build.observed
    assert "llama_palw_cuda_trace_attach_v2" in observed["palw_functions"]
    assert observed["backend_procs"] == {} and observed["variant"] == "cpu"
    for struct, seen in observed["request_abi"].items():
        assert struct in REQUESTS
        suite = seen["suite"]
        assert (seen["abi_version"], seen["struct_size"]) == (suite["abi_version"], suite["struct_size"])
        assert seen["abi_version"] is not None
    comments = observed["toolchain"]["libllama.so"]
    assert comments and all(line for line in comments)
    assert observed["cxx_runtime"]["ok"] is True and set(observed["cxx_runtime"]["libraries"]) >= {"libllama.so"}
    # The binding compiles from the suite's ABI copy: the seed-patched llama.h, not the build's tree.
    assert "llama_palw_cuda_trace_attach_v2" in (build.source_dir / "include" / "llama.h").read_text()
    assert Path(cpu_build.source_dir) not in build.source_dir.parents
    # The libllama.so path names the same runtime; the observer is found beside the libraries.
    assert RuntimeBuild.locate(lib_dir / "libllama.so").lib_dir == lib_dir
    # A palw build's own libllama.so is that build (its manifest is above it), not a brought runtime.
    assert RuntimeBuild.locate(cpu_build.lib_dir / "libllama.so").manifest_path == cpu_build.path
    assert build.tools == {"observer": str(lib_dir / "llama-palw-observer"), "smoke": None}


def test_tools_are_found_in_bin_beside_lib_or_where_named(cpu_build, tmp_path):
    lib_dir = bring(cpu_build, tmp_path / "pkg" / "lib", tools=False)
    assert find_tools(lib_dir) == {"observer": None, "smoke": None}
    reason = RuntimeBuild.locate(lib_dir).tool_absent("observer")
    assert f"looked in {lib_dir}, {lib_dir.parent / 'bin'}" in reason and "--palw-tools" in reason
    (tmp_path / "pkg" / "bin").mkdir()
    shutil.copy2(cpu_build.lib_dir / "llama-palw-observer", tmp_path / "pkg" / "bin")
    assert find_tools(lib_dir)["observer"] == str(tmp_path / "pkg" / "bin" / "llama-palw-observer")
    elsewhere = tmp_path / "tools"
    elsewhere.mkdir()
    assert find_tools(lib_dir, elsewhere) == {"observer": None, "smoke": None}  # the named directory only
    with pytest.raises(RuntimeLibraryError, match="--palw-tools .* is not a directory"):
        find_tools(lib_dir, tmp_path / "missing")
    # A named tools directory applies to a `palw build` runtime too.
    assert RuntimeBuild.locate(cpu_build.path, elsewhere).tools == {"observer": None, "smoke": None}


def patch_request_abi_version(libllama: Path, version: int) -> None:
    """Edit the V2 request's abi_version that libllama's attach compares with, as a build with a runtime
    header of another PALW_CUDA_LLAMA_TRACE_REQUEST_ABI_VERSION_V2 compiles it (x86-64: one movabs of
    struct_size << 32 | abi_version)."""
    symbol = REQUESTS["palw_cuda_llama_trace_request_v2"][1][0]
    line = next(l for l in subprocess.run(["readelf", "--dyn-syms", "-W", str(libllama)], capture_output=True,
                                          text=True, check=True).stdout.splitlines() if l.endswith(symbol))
    start, size = int(line.split()[1], 16), int(line.split()[2], 0)
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start:#x}",
                           f"--stop-address={start + size:#x}", str(libllama)], capture_output=True, text=True,
                          check=True).stdout
    address, value = next((int(m[1], 16), int(m[2], 16)) for m in re.finditer(
        r"^\s*([0-9a-f]+):\s+movabs \$0x([0-9a-f]+),", code, re.M))
    segments = subprocess.run(["readelf", "-lW", str(libllama)], capture_output=True, text=True, check=True).stdout
    for fields in (l.split() for l in segments.splitlines() if l.strip().startswith("LOAD")):
        offset, vaddr, filesz = int(fields[1], 16), int(fields[2], 16), int(fields[4], 16)
        if vaddr <= address < vaddr + filesz:
            break
    data = bytearray(libllama.read_bytes())
    at = address - vaddr + offset + 2  # REX.W + opcode, then the 8-byte immediate
    assert int.from_bytes(data[at:at + 8], "little") == value
    data[at:at + 8] = ((value >> 32) << 32 | version).to_bytes(8, "little")
    libllama.write_bytes(bytes(data))


def _refusal(run_palw, lib: Path, tmp_path: Path) -> tuple[int, list[str], str]:
    result = run_palw("certify", "--lib", lib, "--certificate", tmp_path / "c.json", timeout=600)
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert not (tmp_path / "c.json").exists()
    lines = [line for line in output.splitlines() if line.startswith(("palw:", "Exit:")) or "Exit: palw:" in line]
    return result.returncode, lines, output


def test_a_library_of_another_abi_constant_is_refused(cpu_build, tmp_path, run_palw):
    lib_dir = bring(cpu_build, tmp_path / "lib")
    libllama = (lib_dir / "libllama.so").resolve()
    before = hashlib.sha256(libllama.read_bytes()).hexdigest()
    patch_request_abi_version(libllama, 3)
    assert hashlib.sha256(libllama.read_bytes()).hexdigest() != before
    code, _lines, output = _refusal(run_palw, lib_dir, tmp_path)
    assert code == 7
    refusal = next(line for line in output.splitlines() if "compares" in line)
    assert (f"{lib_dir / 'libllama.so'} compares palw_cuda_llama_trace_request_v2.abi_version with 3, the "
            "suite's ABI") in refusal and "has 2" in refusal and "rebuild it" in refusal


def test_a_directory_without_libllama_is_refused(tmp_path, run_palw):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libggml.so").write_bytes(b"\x7fELF")
    code, _lines, output = _refusal(run_palw, tmp_path / "lib", tmp_path)
    assert code == 7
    assert f"no libllama.so in {tmp_path / 'lib'} and no palw-manifest.json at or above it" in output


def test_the_upstream_build_is_refused(tmp_path, run_palw):
    """Upstream 0.3.34 llama.cpp's libraries (`palw build --unpatched`, the same sdist; cached once for
    the test command), brought in a fresh directory."""
    from pytest_palw.builder import api

    upstream = api.build(variant="cpu", patched=False)
    lib_dir = bring(upstream, tmp_path / "upstream", tools=False)
    code, _lines, output = _refusal(run_palw, lib_dir, tmp_path)
    assert code == 7
    assert f"{lib_dir}/libllama.so exports no llama_palw_* functions: it is not a PALW trace build" in output


def test_without_the_seed_tools_no_certificate_is_certified(cpu_build, tmp_path, run_palw):
    """The rule: the seed tool cases are required claims. A brought runtime without its observer runs
    them, they fail naming where the tool was looked for, and the verdict names the absent tool."""
    lib_dir = bring(cpu_build, tmp_path / "lib", tools=False)
    certificate = tmp_path / "c.json"
    result = run_palw("certify", "--lib", lib_dir, "--certificate", certificate, "--", "-k",
                      "test_tool_gates and observer", timeout=900)
    assert result.returncode == 1, result.stdout[-3000:]
    document = json.loads(certificate.read_text())
    verdict = document["verdict"]
    assert not verdict["certified"]
    assert any("the seed tool(s) llama-palw-observer of this runtime are absent" in reason
               for reason in verdict["reasons"]), verdict["reasons"]
    cases = [case for case in document["cases"] if "observer" in case["nodeid"]]
    assert cases and all("failed" in case["phases"].values() for case in cases)
    looked = f"no llama-palw-observer for this runtime (looked in {lib_dir}, {lib_dir.parent / 'bin'})"
    assert all(looked in (case.get("reason") or "") for case in cases), cases[0]


def test_the_device_hook_is_the_vendors_or_the_suites_only_when_stated_equal(cpu_build, tmp_path):
    """The producer fault cases' toy kernel compiles against a brought runtime's own device hook: the
    headers it names, or the suite's copy only when its sha256 is stated equal; otherwise the cases
    fail with that reason (fault_probe.hook_dir, as the Bench calls it)."""
    from pytest_palw import paths
    from pytest_palw.cache import sha256_file
    from pytest_palw.probes.fault_probe import hook_dir

    lib_dir = bring(cpu_build, tmp_path / "lib")
    unnamed = RuntimeBuild.locate(lib_dir)
    with pytest.raises(AssertionError, match="a brought runtime names no device hook header: pass "
                                             "--palw-runtime-headers DIR"):
        hook_dir(unnamed)
    vendor = tmp_path / "vendor-headers"
    shutil.copytree(paths.NATIVE_RUNTIME_DIR, vendor)
    (vendor / "palw_cuda_producer_trace.cuh").write_text("// the vendor's hook\n")
    named = RuntimeBuild.locate(lib_dir, headers_dir=vendor)
    assert hook_dir(named) == vendor
    assert named.observed["device_hook"] == {"dir": str(vendor), "from": "--palw-runtime-headers",
                                             "sha256": sha256_file(vendor / "palw_cuda_producer_trace.cuh")}
    ours = sha256_file(paths.NATIVE_RUNTIME_DIR / "palw_cuda_producer_trace.cuh")
    assert hook_dir(RuntimeBuild.locate(lib_dir, hook_sha256=ours)) == paths.NATIVE_RUNTIME_DIR
    with pytest.raises(AssertionError, match=f"--palw-hook-sha256 {'0' * 64} is not the suite's"):
        hook_dir(RuntimeBuild.locate(lib_dir, hook_sha256="0" * 64))
    (vendor / "palw_cuda_producer_trace.cuh").unlink()
    with pytest.raises(RuntimeLibraryError, match="lacks palw_cuda_producer_trace.cuh"):
        RuntimeBuild.locate(lib_dir, headers_dir=vendor)


def test_a_library_that_hides_the_producer_fails_the_producer_cases_with_that_reason(cpu_build):
    """The producer cases call the producer the library under test exports; a library without those
    entry points (here the CPU build's libggml-base) makes them fail, never fall back to ours."""
    import ctypes

    import cffi

    from pytest_palw.probes.fault_probe import PRODUCER_FUNCTIONS, c_function

    library = ctypes.CDLL(str(cpu_build.lib_dir / "libggml-base.so"))
    with pytest.raises(AssertionError) as refused:
        c_function(cffi.FFI(), library, PRODUCER_FUNCTIONS["prepare"], "int (*)(void)")
    message = str(refused.value)
    assert f"exports no {PRODUCER_FUNCTIONS['prepare']}" in message
    assert "drive the producer of the library under test" in message and "hides it" in message


def test_a_library_that_brings_its_own_cxx_runtime_is_refused_before_it_loads(cpu_build, tmp_path, run_palw):
    """The rule of `palw build` (builder/cxx_runtime.py), applied to what a vendor brings: a library that
    links libstdc++ statically and exports it would take over the other libraries' C++ runtime under
    Python (on the device a plain-cmake build of that shape killed the load probe with SIGSEGV). Here
    one more real library of that shape sits beside the patched ones."""
    from pytest_palw.builder.cxx_runtime import LINKER_FLAGS

    lib_dir = bring(cpu_build, tmp_path / "lib")
    source = tmp_path / "vendor_extra.cpp"
    source.write_text('#include <sstream>\n#include <string>\n'
                      'extern "C" int vendor_extra(long v) {\n'
                      '  std::ostringstream s; s << v; return (int) s.str().size();\n}\n')
    subprocess.run(["g++", "-shared", "-fPIC", "-static-libstdc++", "-o", str(lib_dir / "libggml-vendor.so"),
                    str(source)], check=True)
    assert observe(lib_dir)["cxx_runtime"]["ok"] is False
    code, _lines, output = _refusal(run_palw, lib_dir, tmp_path)
    assert code == 7
    refusal = next(line for line in output.splitlines() if "libstdc++ statically" in line)
    assert f"{lib_dir / 'libggml-vendor.so'} links libstdc++ statically and exports" in refusal
    assert LINKER_FLAGS in refusal and "palw build --force" not in refusal
    # The same directory with that library relinked as the refusal says passes the check.
    subprocess.run(["g++", "-shared", "-fPIC", "-static-libstdc++", LINKER_FLAGS, "-o",
                    str(lib_dir / "libggml-vendor.so"), str(source)], check=True)
    assert RuntimeBuild.locate(lib_dir).observed["cxx_runtime"]["ok"] is True
