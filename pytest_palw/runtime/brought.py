"""A brought runtime: a directory of PALW-patched llama.cpp libraries from any build, with no
`palw build` manifest (a vendor's own CMake, toolchain, producer or packaging).

What the certificate states about such a runtime is observed here, from its files, never filled in
from our sources: which PALW functions and backend procs it exports, its variant, the toolchain
named in its ELF ``.comment`` notes, the C++-runtime check (builder/cxx_runtime.py, the rule `palw
build` applies) and the ABI of its trace requests, read from the compare instructions of its attach
entry points and checked against the suite's own copy of the ABI (native/runtime-palw/cuda). The
facts only a manifest knows (the patches applied, the cache key, the build's inputs) are absent.

The cffi binding compiles from the suite's own copy of the ABI the seed patch defines
(``suite_abi_dir``: the sdist's headers with the seed patch and overlays applied, and the runtime
header of native/) and links against the brought libraries.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from pytest_palw.errors import RuntimeLibraryError, ToolMissingError

LIBLLAMA = "libllama.so"
TOOL_NAMES = {"observer": "llama-palw-observer", "smoke": "llama-palw-mmvq-smoke"}
ORIGIN_BUILD, ORIGIN_BROUGHT = "palw-build", "brought"
# Facts only a `palw build` manifest knows; a brought runtime's certificate says they are absent.
MANIFEST_ONLY = ("patches applied", "build inputs (sdist, native producer)", "cache key", "CMake flags",
                 "pinned cc flag")
# The trace requests whose (abi_version, struct_size) an attach entry point compares first, by the
# library's exported entry points that compare them (the context's method, else the C wrapper).
REQUESTS = {
    "palw_cuda_llama_mmvq_request_v1": ("PALW_CUDA_LLAMA_MMVQ_REQUEST_ABI_VERSION_V1",
                                        ("_ZN13llama_context22palw_cuda_trace_attachEmPK31palw_cuda_llama_mmvq_request_v1",
                                         "llama_palw_cuda_trace_attach")),
    "palw_cuda_llama_trace_request_v2": ("PALW_CUDA_LLAMA_TRACE_REQUEST_ABI_VERSION_V2",
                                         ("_ZN13llama_context25palw_cuda_trace_attach_v2EmPK32palw_cuda_llama_trace_request_v2",
                                          "llama_palw_cuda_trace_attach_v2")),
}
ABI_SUBDIRS = ("include", "ggml/include")  # the headers the binding compiles (patched llama.h included)
BACKEND_OPS_SOURCE = "tests/test-backend-ops.cpp"  # the GPU tier builds it from the runtime's tree


def lib_dir_of(location: Path) -> Path:
    """The directory of the libraries a brought --palw-lib names (the directory or its libllama.so)."""
    location = Path(location).resolve()
    if location.is_file() and location.name.startswith(LIBLLAMA):
        return location.parent
    if location.is_dir() and (location / LIBLLAMA).is_file():
        return location
    raise RuntimeLibraryError(
        f"no {LIBLLAMA} in {location} and no palw-manifest.json at or above it: --palw-lib names a directory "
        "of PALW-patched llama.cpp libraries (or its libllama.so), or a `palw build` output")


def find_tools(lib_dir: Path, tools_dir: Path | str | None = None) -> dict[str, str | None]:
    """The seed tools of a runtime: in ``tools_dir`` (--palw-tools) only, else beside the libraries
    (the same directory, then ../bin). A tool not found is None (its cases say where it was looked for)."""
    if tools_dir:
        tools_dir = Path(tools_dir).expanduser().resolve()
        if not tools_dir.is_dir():
            raise RuntimeLibraryError(f"--palw-tools {tools_dir} is not a directory: name the directory holding "
                                      f"{' and '.join(TOOL_NAMES.values())}")
    places = [tools_dir] if tools_dir else tool_places(lib_dir)
    found = {}
    for role, name in TOOL_NAMES.items():
        found[role] = next((str(place / name) for place in places
                            if (place / name).is_file() and os.access(place / name, os.X_OK)), None)
    return found


HOOK_HEADER = "palw_cuda_producer_trace.cuh"  # the device hook a capturing kernel compiles against


def device_hook(headers_dir: Path | str | None, hook_sha256: str | None) -> dict:
    """The device hook the producer fault cases' toy kernel compiles against for a brought runtime:
    the vendor's (--palw-runtime-headers DIR), or the suite's copy only when --palw-hook-sha256
    states its digest; otherwise none, and those cases fail saying so."""
    from pytest_palw.cache import sha256_file
    from pytest_palw.paths import NATIVE_RUNTIME_DIR

    if headers_dir:
        directory = Path(headers_dir).expanduser().resolve()
        missing = [name for name in ("palw_cuda_llama_mmvq.h", HOOK_HEADER) if not (directory / name).is_file()]
        if missing:
            raise RuntimeLibraryError(f"--palw-runtime-headers {directory} lacks {', '.join(missing)}: name the "
                                      "runtime-palw/cuda directory the libraries were built with")
        return {"dir": str(directory), "sha256": sha256_file(directory / HOOK_HEADER), "from": "--palw-runtime-headers"}
    ours = sha256_file(NATIVE_RUNTIME_DIR / HOOK_HEADER)
    if hook_sha256 and hook_sha256.lower() == ours:
        return {"dir": str(NATIVE_RUNTIME_DIR), "sha256": ours,
                "from": "the suite's copy, its sha256 stated equal by --palw-hook-sha256"}
    why = (f"--palw-hook-sha256 {hook_sha256[:80]} is not the suite's {HOOK_HEADER} ({ours})" if hook_sha256 else
           "a brought runtime names no device hook header")
    return {"dir": None, "sha256": None, "from": None,
            "why": f"{why}: pass --palw-runtime-headers DIR (the runtime-palw/cuda the libraries were built with), "
                   f"or --palw-hook-sha256 with the sha256 of their {HOOK_HEADER} when it is the suite's"}


def tool_places(lib_dir: Path) -> list[Path]:
    return [Path(lib_dir), Path(lib_dir).parent / "bin"]


# -- observing the files -----------------------------------------------------------------------------

def _run(tool: str, *args: str) -> str:
    found = shutil.which(tool)
    if not found:
        raise ToolMissingError(f"{tool} is not installed (needed to read a brought runtime's libraries): "
                               "apt-get install binutils")
    result = subprocess.run([found, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeLibraryError(f"{tool} cannot read {args[-1]} ({result.stderr.strip()[:200]}): --palw-lib must "
                                  "name ELF shared libraries of a llama.cpp build")
    return result.stdout


def dynamic_symbols(path: Path) -> dict[str, tuple[int, int]]:
    """{name: (address, size)} of the functions ``path`` exports."""
    symbols = {}
    for line in _run("readelf", "--dyn-syms", "-W", str(path)).splitlines():
        fields = line.split()  # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) >= 8 and fields[3] == "FUNC" and fields[6] != "UND":
            try:
                size = int(fields[2], 0)
            except ValueError:
                continue
            symbols[fields[7].split("@", 1)[0]] = (int(fields[1], 16), size)
    return symbols


def comment_notes(path: Path) -> list[str]:
    """The ELF ``.comment`` strings (the compilers that made the objects), as readelf prints them."""
    result = subprocess.run([shutil.which("readelf") or "readelf", "-p", ".comment", str(path)],
                            capture_output=True, text=True, check=False)
    return sorted({match.strip() for match in re.findall(r"^\s*\[\s*[0-9a-f]+\]\s+(.*)$", result.stdout, re.M)})


def backend_procs(lib_dir: Path, names: list[str]) -> dict[str, list[str]]:
    """Per ggml backend library, which of the PALW proc names it carries (get_proc_address matches
    them by string)."""
    found = {}
    for path in sorted(Path(lib_dir).glob("libggml*.so")):
        data = path.read_bytes()
        present = [name for name in names if name.encode() + b"\x00" in data]
        if present:
            found[path.name] = present
    return found


def request_abi(libllama: Path, symbols: dict[str, tuple[int, int]]) -> dict[str, dict]:
    """Per trace request, the (abi_version, struct_size) the library's attach entry point compares the
    request with, read from its machine code (x86-64: one 64-bit compare of both fields, or two 32-bit
    compares at offsets 0 and 4); ``None`` fields when the code could not be read."""
    from pytest_palw.runtime.binding.hostabi import load_host_abi

    host = load_host_abi()
    observed = {}
    for struct, (constant, entry_points) in REQUESTS.items():
        ours = (int(getattr(host.lib, constant)), host.ffi.sizeof(struct))
        code = "".join(_disassemble(libllama, *symbols[name]) for name in entry_points if name in symbols)
        seen = _compared_pair(code, ours)
        observed[struct] = {"abi_version": seen[0], "struct_size": seen[1],
                            "suite": {"abi_version": ours[0], "struct_size": ours[1]},
                            "read_from": next((name for name in entry_points if name in symbols), None)}
    return observed


def _disassemble(path: Path, address: int, size: int) -> str:
    if not shutil.which("objdump") or size <= 0:
        return ""
    result = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={address:#x}",
                             f"--stop-address={address + size:#x}", str(path)], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else ""


_MOVABS = re.compile(r"\bmovabs\s+\$0x([0-9a-f]+),")
_CMP32 = re.compile(r"\bcmpl\s+\$0x([0-9a-f]+),(0x4)?\(%\w+\)")


def _compared_pair(code: str, ours: tuple[int, int]) -> tuple[int | None, int | None]:
    """The (version, size) pair compared in ``code``: ours when present; else the one that differs
    from ours in one field; else (None, None)."""
    version, size = ours
    pairs = [(value & 0xFFFFFFFF, value >> 32) for value in (int(v, 16) for v in _MOVABS.findall(code))]
    first = [int(v, 16) for v, offset in _CMP32.findall(code) if not offset]
    second = [int(v, 16) for v, offset in _CMP32.findall(code) if offset]
    pairs += [(v, s) for v in first for s in second]
    if ours in pairs:
        return ours
    for low, high in pairs:
        if high == size and low < 1 << 16:
            return low, high
        if low == version and 0 < high < 1 << 16:
            return low, high
    return None, None


def check_abi(lib_dir: Path, observed: dict[str, dict]) -> None:
    """RuntimeLibraryError, one line naming the library and the field, where the library's ABI differs."""
    for struct, seen in observed.items():
        for field in ("abi_version", "struct_size"):
            if seen[field] is not None and seen[field] != seen["suite"][field]:
                raise RuntimeLibraryError(
                    f"{Path(lib_dir) / LIBLLAMA} compares {struct}.{field} with {seen[field]}, the suite's ABI "
                    f"(native/runtime-palw/cuda, the seed patch's) has {seen['suite'][field]}: the library was built "
                    "with another runtime header; rebuild it with the seed patch's palw_cuda_llama_mmvq.h")


def check_cxx_runtime(lib_dir: Path, report: dict) -> None:
    """`palw build`'s rule (builder/cxx_runtime.py) on the libraries a vendor brings: RuntimeLibraryError,
    in one line, before anything maps them, when one links libstdc++ statically and exports it."""
    from pytest_palw.builder.cxx_runtime import own_runtime_libraries

    bad = own_runtime_libraries(report)
    if bad:
        name, facts = next(iter(bad.items()))
        raise RuntimeLibraryError(
            f"{Path(lib_dir) / name} links libstdc++ statically and exports {facts['runtime_exports']} of its "
            f"symbols (e.g. {facts['example']}), so under Python the other libraries' calls would run in its copy "
            f"({len(bad)} of {len(report['libraries'])} libraries are so): relink them with {report['linker_flags']} "
            "(CMAKE_SHARED_LINKER_FLAGS) or against a shared libstdc++.so.6, and bring the relinked libraries")


def observe(lib_dir: Path) -> dict:
    """Every fact the certificate states about a brought runtime that its files show."""
    from pytest_palw.builder.cxx_runtime import check_libraries
    from pytest_palw.builder.toolchain import find_tool
    from pytest_palw.paths import NATIVE_RUNTIME_DIR

    lib_dir = Path(lib_dir)
    libllama = lib_dir / LIBLLAMA
    symbols = dynamic_symbols(libllama)
    procs = re.findall(r'#define PALW_CUDA_LLAMA_\w+_PROC_V\d+ "(\w+)"',
                       (NATIVE_RUNTIME_DIR / "palw_cuda_llama_mmvq.h").read_text())
    backend = backend_procs(lib_dir, procs)
    variant = "cuda" if any("palw_cuda_llama_trace_bind_v2" in names for names in backend.values()) else "cpu"
    cxx = find_tool("c++", env_var="CXX") or find_tool("g++")
    return {
        "variant": variant,
        "palw_functions": sorted(name for name in symbols if name.startswith("llama_palw_")),
        "backend_procs": backend,
        "request_abi": request_abi(libllama, symbols),
        "toolchain": {path.name: comment_notes(path) for path in sorted(lib_dir.glob("lib*.so"))},
        "cxx_runtime": check_libraries(lib_dir, cxx),
    }


def mapped_libraries() -> dict[str, str]:
    """{path: sha256 of the mapped bytes} of every llama.cpp library (libllama*, libggml*) this process
    mapped, wherever it came from: a library loaded from outside the brought directory (an RUNPATH of
    the build tree) shows here under its own path."""
    from pytest_palw.runtime.kernel_digest import Mapping, mapped_sha256

    found: dict = {}
    try:
        with open("/proc/self/maps") as maps:
            lines = [line.split(maxsplit=5) for line in maps]
    except OSError:
        return found
    for fields in lines:
        path = Path(fields[5].strip()) if len(fields) == 6 else None
        if path is not None and path.name.startswith(("libllama", "libggml")) and str(path) not in found:
            found[str(path)] = mapped_sha256(Mapping(path, fields[0], int(fields[4])))
    return dict(sorted(found.items()))


# -- the suite's own copy of the ABI -------------------------------------------------------------------

def suite_abi_dir(source: Path | str | None = None) -> tuple[Path, Path | None]:
    """(the headers the binding compiles, the sdist's llama_cpp package dir): the seed-patched
    ``include/`` and ``ggml/include/`` of the llama.cpp the seed patch targets and the sdist's Python
    binding, made once per (sdist, patch set) into the cache.

    Made from ``source`` (--palw-source: the sdist or a `palw source` archive made from it), else from
    the cached sdist, downloaded on first use. Once made, no process needs the sources again (a worker,
    a probe's child, an offline machine), and ``source`` is not read: the copy is keyed by the sdist's
    sha256 and the patch set, which any valid source has."""
    from pytest_palw.builder.patching import apply_patch_set, current_patch_set
    from pytest_palw.builder.source import SDIST_SHA256
    from pytest_palw.cache import exclusive, sha256_bytes
    from pytest_palw.paths import cache_dir

    patch_set = current_patch_set()
    key = sha256_bytes(repr((SDIST_SHA256, patch_set.marker_digests())).encode())[:16]
    target = cache_dir("abi") / key
    if _abi_complete(target):  # never replaced once made: other processes import from it
        return target, target / ABI_BINDING
    with exclusive(cache_dir("abi") / f"{key}.lock", what="preparing the suite's ABI headers"):
        if not _abi_complete(target):
            tree = _sdist_tree(source, patch_set)
            scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{key}-"))
            try:
                for sub in ABI_SUBDIRS:
                    shutil.copytree(tree.tree / sub, scratch / sub)
                (scratch / BACKEND_OPS_SOURCE).parent.mkdir(parents=True)
                shutil.copy2(tree.tree / BACKEND_OPS_SOURCE, scratch / BACKEND_OPS_SOURCE)
                if tree.binding_python_path is not None:
                    shutil.copytree(tree.binding_python_path / "llama_cpp", scratch / ABI_BINDING / "llama_cpp")
                if not tree.ref.patched:  # a `palw source` archive is patched already (its marker checked)
                    apply_patch_set(scratch, patch_set, only=ABI_SUBDIRS)
                shutil.rmtree(target, ignore_errors=True)
                os.replace(scratch, target)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    return target, target / ABI_BINDING


ABI_BINDING = "python"  # the sdist's llama_cpp package, beside the headers


def _abi_complete(target: Path) -> bool:
    return (target / "include" / "llama.h").is_file() and (target / ABI_BINDING / "llama_cpp" / "__init__.py").is_file()


def _sdist_tree(source: Path | str | None, patch_set):
    """The llama.cpp tree of the sdist the seed patch targets: ``source`` if it is that sdist or a `palw
    source` archive made from it with this patch set (SourceError in one line otherwise), else the cached or
    downloaded sdist."""
    from pytest_palw.builder.patching import check_recorded
    from pytest_palw.builder.source import SDIST_SHA256, locate_source, materialize
    from pytest_palw.errors import SourceError

    ref = locate_source(source)
    if ref is None or ref.kind not in ("sdist", "palw-source"):
        raise SourceError(f"--palw-source {source} is not the llama-cpp-python sdist nor a `palw source` archive: "
                          "the suite's ABI copy is made from the sources the seed patch targets; pass one of those")
    made_from = ref.sha256 if ref.kind == "sdist" else ((ref.marker or {}).get("sdist") or {}).get("sha256")
    if made_from != SDIST_SHA256:
        raise SourceError(f"--palw-source {source} was made from another sdist (sha256 {made_from}, expected "
                          f"{SDIST_SHA256}): remake it with this pytest-palw's `palw source --output FILE`")
    if ref.patched:
        check_recorded(ref.marker or {}, patch_set, ref.path)
    return materialize(ref)
