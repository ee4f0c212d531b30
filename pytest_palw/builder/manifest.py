"""``palw-manifest.json``: what a build was made from and where its outputs are."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pytest_palw.cache import sha256_file
from pytest_palw.errors import RuntimeLibraryError
from pytest_palw.files import write_whole

MANIFEST_NAME = "palw-manifest.json"
SCHEMA = "pytest-palw.runtime-manifest"
VERSION = 1


@dataclass
class Manifest:
    key: str
    variant: str
    cuda_arch: str | None
    pinned_cc: int | None
    trace: bool
    inputs: dict  # sdist|source, seed_patch, overlays, native
    cmake_flags: list[str]
    tools: dict  # cmake, ninja, cc, cxx, nvcc: version lines
    outputs: dict  # lib_dir, libllama, ggml_libs, tools {observer, smoke}
    source_dir: str
    include_dirs: list[str]
    binding_python_path: str | None
    binding: dict  # what happened to the llama-cpp-python install
    build_seconds: float
    created: str
    # cxx_runtime.check_libraries: each library's libstdc++ linkage and exported std:: symbols
    cxx_runtime: dict = field(default_factory=dict)
    schema: str = SCHEMA
    version: int = VERSION
    # Not stored: where this manifest was read from, and whether `build` reused it.
    path: Path | None = field(default=None, compare=False, repr=False)
    cache_hit: bool = field(default=False, compare=False)

    def to_json(self) -> str:
        data = asdict(self)
        del data["path"], data["cache_hit"]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def write(self, path: Path) -> None:
        """Atomically: a reader never sees half a manifest (it is the build's 'done' flag)."""
        write_whole(path, self.to_json(), fix="free disk space, or point PALW_CACHE_DIR at a writable disk")
        self.path = path

    @classmethod
    def load(cls, path: Path | str) -> "Manifest":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise RuntimeLibraryError(f"cannot read the runtime manifest {path} ({error}): rebuild "
                                      "with `palw build --force`") from error
        if data.get("schema") != SCHEMA or data.get("version") != VERSION:
            raise RuntimeLibraryError(f"{path} is not a {SCHEMA} v{VERSION} manifest: rebuild with "
                                      "`palw build --force`")
        known = {name for name in cls.__dataclass_fields__ if name not in ("path", "cache_hit")}
        optional = {"cxx_runtime"}  # absent from manifests written before the check existed
        try:
            manifest = cls(**{name: data[name] for name in known if name in data or name not in optional})
        except KeyError as missing:
            raise RuntimeLibraryError(f"{path} lacks {missing}: rebuild with `palw build --force`") from None
        manifest.path = path
        return manifest

    # -- conveniences -----------------------------------------------------------------------
    @property
    def lib_dir(self) -> Path:
        return Path(self.outputs["lib_dir"])

    @property
    def libllama(self) -> Path:
        return Path(self.outputs["libllama"])

    def output_files(self) -> list[Path]:
        """Every file the build promised; all must exist for the cache to count as a hit."""
        files = [self.libllama] + [Path(entry["path"]) for entry in self.outputs["ggml_libs"]]
        files += [Path(tool) for tool in self.outputs["tools"].values() if tool]
        return files

    def outputs_exist(self) -> bool:
        return all(path.is_file() for path in self.output_files())

    def digested_outputs(self) -> dict[Path, str]:
        """The libraries with the sha256 the build recorded for each."""
        found = {self.libllama: self.outputs.get("libllama_sha256")}
        found.update((Path(entry["path"]), entry.get("sha256")) for entry in self.outputs["ggml_libs"])
        return {path: digest for path, digest in found.items() if digest}

    def damage(self) -> str | None:
        """What of the build is not as it was written, read now (bytes, not a memo of size and
        mtime: a flipped byte counts): a missing output, a library whose sha256 is not the one
        recorded, or a missing patched header. None when every output is as recorded."""
        missing = [path.name for path in self.output_files() if not path.is_file()]
        if missing:
            return f"{', '.join(missing)} missing"
        for path, recorded in self.digested_outputs().items():
            actual = sha256_file(path)
            if actual != recorded:
                return f"{path.name} has sha256 {actual[:16]}..., its manifest {recorded[:16]}..."
        header = Path(self.source_dir) / "include" / "llama.h"
        if not header.is_file():
            return f"{header} missing"
        return None
