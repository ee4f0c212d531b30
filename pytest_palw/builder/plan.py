"""Everything a build will use, resolved and digested up front: the cache key comes from this."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_palw import paths
from pytest_palw.builder.cache_key import KeyInputs, build_dir_name, cache_key
from pytest_palw.builder.config import BuildConfig, missing_cuda_sources, trace_available
from pytest_palw.builder.patching import PatchSet, check_recorded, current_patch_set
from pytest_palw.builder.source import SourceRef, locate_source
from pytest_palw.builder.toolchain import Toolchain, detect
from pytest_palw.cache import tree_digest, tree_file_digests
from pytest_palw.errors import BuildError


@dataclass(frozen=True)
class NativeRuntime:
    path: Path
    sha256: str
    files: dict[str, str]

    def describe(self) -> dict:
        return {"path": str(self.path), "sha256": self.sha256, "files": self.files}


@dataclass(frozen=True)
class Plan:
    config: BuildConfig
    toolchain: Toolchain
    patch_set: PatchSet
    source: SourceRef
    native: NativeRuntime
    key: str
    build_dir: Path

    def key_inputs(self) -> KeyInputs:
        return key_inputs(self.config, self.toolchain, self.patch_set, self.source, self.native)


def key_inputs(config: BuildConfig, toolchain: Toolchain, patch_set: PatchSet, source: SourceRef,
               native: NativeRuntime) -> KeyInputs:
    fields = config.key_fields()
    return KeyInputs(
        source_kind=source.kind, source_sha256=source.sha256,
        seed_patch_sha256=patch_set.seed_sha256,
        overlays=tuple((path.name, digest) for path, digest in patch_set.overlays),
        native_sha256=native.sha256,
        variant=fields["variant"], cuda_arch=fields["cuda_arch"], pinned_cc=fields["pinned_cc"],
        trace=fields["trace"], cmake_flags=tuple(config.logical_flags()),
        compilers=tuple(sorted(toolchain.compiler_identity().items())))


def native_runtime(directory: Path | None = None) -> NativeRuntime:
    directory = Path(directory or paths.NATIVE_RUNTIME_DIR).resolve()
    files = tree_file_digests(directory) if directory.is_dir() else {}
    return NativeRuntime(directory, tree_digest(directory, files), files)


UNPATCHED_SUFFIX = "-unpatched"


def check_runtime_dir(directory: Path) -> None:
    """A --runtime-dir must be a runtime-palw/cuda: the ABI header at least (the CUDA variant checks its sources)."""
    from pytest_palw.builder.config import RUNTIME_HEADER

    if not directory.is_dir():
        raise BuildError(f"--runtime-dir {directory} is not a directory: name a runtime-palw/cuda directory "
                         f"(the seed's PALW_CUDA_RUNTIME_DIR), e.g. a copy of {paths.NATIVE_RUNTIME_DIR}")
    if not (directory / RUNTIME_HEADER).is_file():
        raise BuildError(f"--runtime-dir {directory} has no {RUNTIME_HEADER}: name a runtime-palw/cuda directory "
                         f"(the seed's PALW_CUDA_RUNTIME_DIR), e.g. a copy of {paths.NATIVE_RUNTIME_DIR}")


def make_plan(*, variant: str, cuda_arch: str, pinned_cc: int | None, source, build_root: Path,
              overlays=None, download: bool = True, runtime_dir: Path | None = None,
              patched: bool = True) -> Plan | None:
    """Resolve the inputs (cheap checks first); None only when ``download=False`` and no sdist is cached.

    ``patched=False`` plans the upstream tree: empty patch set, no trace, no native runtime.
    ``runtime_dir``: `palw build --runtime-dir`, a vendor's runtime-palw/cuda (default: the package's);
    its tree digest enters the key as the package's does, so a copy of the package's gets the same key.
    """
    if patched and runtime_dir is not None:
        check_runtime_dir(Path(runtime_dir))
    if patched:
        native = native_runtime(runtime_dir)
        config = BuildConfig(variant, cuda_arch, pinned_cc, trace=trace_available(native.path))
    else:
        native = NativeRuntime(Path(paths.NATIVE_RUNTIME_DIR), "", {})  # not compiled in
        config = BuildConfig(variant, cuda_arch, pinned_cc, trace=False, patched=False)
    toolchain = detect(variant)
    if config.cuda and patched:
        missing = missing_cuda_sources(native.path)
        if missing:
            raise BuildError(f"the cuda variant compiles the PALW trace runtime, but {native.path} "
                             f"lacks {', '.join(missing)}: restore native/runtime-palw/cuda")
    patch_set = current_patch_set(overlays) if patched else PatchSet.empty()
    source_ref = locate_source(source, download=download)
    if source_ref is None:
        return None
    if source_ref.patched:
        if not patched:
            raise BuildError(f"{source_ref.path} is a `palw source` archive, already patched: an "
                             "--unpatched build needs the sdist (the default) or an unpatched tree")
        check_recorded(source_ref.marker or {}, patch_set, source_ref.path)
    key = cache_key(key_inputs(config, toolchain, patch_set, source_ref, native))
    name = build_dir_name(variant if patched else variant + UNPATCHED_SUFFIX, key)
    return Plan(config, toolchain, patch_set, source_ref, native, key, Path(build_root).resolve() / name)
