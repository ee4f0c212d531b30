"""One C++ runtime per process: the structure check every build ends with.

Some toolchains link libstdc++ statically into every output (image wrappers that add
``-static-libstdc++``, conda and devtoolset compilers in some setups). A shared library built
that way carries its own copy of libstdc++ and, by default, exports it: under Python (which loads
no libstdc++ first) one library's calls then bind to another library's copy. Seen on the H200:
``std::basic_ostream::_M_insert<long>`` called from libllama ran in libggml-cuda's copy and
crashed ``llama_model_load_from_file``. A load test cannot prove the absence of this (a CPU build
of the same structure happened to load), so the build checks the structure itself:

    every built library NEEDS libstdc++.so.6, or exports none of the C++ runtime's core symbols.

"The C++ runtime's core symbols" are those the toolchain's libstdc++.so.6 exports with GLOBAL or
UNIQUE binding: its non-template code and data (``std::ios_base::Init``, operator new, ``__cxa_*``,
locale ids). Template instantiations are WEAK there, and every build, static or not, exports its
own weak instantiations of ``std::`` templates (a normal libllama.so exports a few that
libstdc++.so.6 also has): those are not the hazard. A libstdc++ linked in statically and left
exported brings hundreds of core symbols. Where no libstdc++.so.6 can be found, the check falls
back to counting every exported ``std::`` name.

``LINKER_FLAGS`` keeps a static copy private to its library (``--exclude-libs``), which makes a
statically linking toolchain pass; with a shared libstdc++ the flag does nothing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from pytest_palw.errors import BuildError, ToolMissingError

LIBSTDCXX = "libstdc++.so.6"
# Hide the symbols of a statically linked C++ runtime inside the library that links it.
LINKER_FLAGS = "-Wl,--exclude-libs,libstdc++.a:libsupc++.a"
RULE = f"every library NEEDS {LIBSTDCXX} or exports none of its core (GLOBAL or UNIQUE) symbols"
# Itanium mangling of names in namespace std: _ZSt..., _ZNSt..., _ZNKSt..., the std:: abbreviations
# (So ostream, Si istream, Sd iostream, Ss string, Sa allocator), and their typeinfo/vtables.
_STD_SYMBOL = re.compile(r"^_Z(?:T[VIS])?(?:NK?)?S[taiosd]")
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")


@dataclass(frozen=True)
class LibraryCheck:
    name: str
    needs_libstdcxx: bool
    std_exports: int  # exported names in namespace std (own template instantiations included)
    runtime_exports: int  # exported core symbols of the C++ runtime (see above)
    example: str | None  # one of those, for the error message

    @property
    def ok(self) -> bool:
        return self.needs_libstdcxx or self.runtime_exports == 0


def readelf() -> str:
    found = shutil.which("readelf")
    if not found:
        raise ToolMissingError("readelf is not installed (needed to check the built libraries): "
                               "apt-get install binutils")
    return found


def _dynamic(path: Path, bindings: tuple[str, ...] = ("GLOBAL", "WEAK", "UNIQUE")) -> tuple[set[str], list[str]]:
    """(NEEDED entries, exported symbols: defined, of ``bindings``, default or protected) of one ELF."""
    result = subprocess.run([readelf(), "-d", "--dyn-syms", "-W", str(path)], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"readelf cannot read {path} ({result.stderr.strip()[:200]}): rebuild with "
                         "`palw build --force`")
    exports = []
    for line in result.stdout.splitlines():
        fields = line.split()  # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) >= 8 and fields[0].endswith(":") and fields[4] in bindings \
                and fields[5] in ("DEFAULT", "PROTECTED") and fields[6] != "UND":
            exports.append(fields[7].split("@", 1)[0])
    return set(_NEEDED.findall(result.stdout)), exports


def runtime_symbols(cxx: Path | str | None) -> frozenset[str] | None:
    """The core symbols of the toolchain's libstdc++.so.6; None when the compiler cannot name one."""
    if not cxx:
        return None
    try:
        found = subprocess.run([str(cxx), f"-print-file-name={LIBSTDCXX}"], capture_output=True,
                               text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not found or not Path(found).is_file():
        return None
    return frozenset(_dynamic(Path(found), ("GLOBAL", "UNIQUE"))[1])


def check_library(path: Path, runtime: frozenset[str] | None = None) -> LibraryCheck:
    needed, exports = _dynamic(path)
    std = [name for name in exports if _STD_SYMBOL.match(name)]
    clashing = std if runtime is None else [name for name in exports if name in runtime]
    return LibraryCheck(Path(path).name, LIBSTDCXX in needed, len(std), len(clashing),
                        clashing[0] if clashing else None)


def check_libraries(lib_dir: Path, cxx: Path | str | None = None) -> dict:
    """The manifest's ``cxx_runtime``: the rule, each shared library's facts, and the verdict."""
    runtime = runtime_symbols(cxx)
    checks = [check_library(path, runtime) for path in sorted(Path(lib_dir).glob("*.so"))]
    return {"rule": RULE if runtime is not None else f"every library NEEDS {LIBSTDCXX} or exports "
                                                     "no std:: symbol (no libstdc++.so.6 found to compare)",
            "linker_flags": LINKER_FLAGS, "ok": all(check.ok for check in checks),
            "libraries": {check.name: {key: value for key, value in asdict(check).items() if key != "name"}
                          for check in checks}}


def own_runtime_libraries(report: dict) -> dict:
    """The libraries of a ``check_libraries`` report that break RULE: {name: facts}."""
    return {name: facts for name, facts in report["libraries"].items()
            if not (facts["needs_libstdcxx"] or facts["runtime_exports"] == 0)}


def require_one_runtime(report: dict, compiler: str) -> None:
    """BuildError, in one line, when a library would bring its own exported C++ runtime."""
    bad = own_runtime_libraries(report)
    if bad:
        name, facts = next(iter(bad.items()))
        raise BuildError(
            f"{name} links libstdc++ statically and exports {facts['runtime_exports']} of its symbols "
            f"(e.g. {facts['example']}), so its copy would replace other libraries' under Python; "
            f"{len(bad)} of {len(report['libraries'])} libraries are built so by {compiler}: set "
            "CC/CXX/CUDAHOSTCXX to compilers that link libstdc++ dynamically (e.g. CXX=/usr/bin/g++) "
            "and rerun `palw build --force`")
