"""``build()`` the patched runtime (or reuse the cached one) and ``find_manifest()`` without building."""

from __future__ import annotations

import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from pytest_palw.builder import carry
from pytest_palw.builder.config import DEFAULT_CUDA_ARCH, RUNTIME_SUBDIR, BuildConfig, check_pinned_cc_supported
from pytest_palw.builder.cxx_runtime import check_libraries, require_one_runtime
from pytest_palw.builder.llama_cpp_python import ensure_binding, installed_version
from pytest_palw.builder.manifest import MANIFEST_NAME, Manifest
from pytest_palw.builder.ninja import run_logged
from pytest_palw.builder.patching import apply_patch_set, copy_tree
from pytest_palw.builder.plan import Plan, make_plan, native_runtime
from pytest_palw.builder.source import SDIST_VERSION, materialize
from pytest_palw.cache import exclusive, sha256_file
from pytest_palw.errors import BuildError, PalwError
from pytest_palw.files import write_whole
from pytest_palw.paths import cache_dir

SOURCE_SUBDIR, BUILD_SUBDIR = "source", "build"
PATCHED_FLAG = ".palw-patched"  # holds the key: the tree is fully patched for that key


def build(variant: str = "cpu", *, cuda_arch: str = DEFAULT_CUDA_ARCH, pinned_cc: int | None = None,
          source: Path | str | None = None, force: bool = False, jobs: int | None = None,
          build_root: Path | str | None = None, overlays: Path | str | None = None,
          install_binding: bool = True, patched: bool = True, cache_from: Path | str | None = None,
          cache_to: Path | str | None = None, runtime_dir: Path | str | None = None) -> Manifest:
    """Build the runtime for these inputs, or return the cached build (``manifest.cache_hit``).

    ``cache_from``: a directory of `--cache-to` archives; the one of this key, if there, is restored
    instead of compiling. ``cache_to``: write this build's archive there (carry.py).

    ``patched=False`` builds upstream llama.cpp from the same sdist: a reference for A/B
    evidence (the plugin refuses it as a runtime under test).

    ``runtime_dir``: a vendor's runtime-palw/cuda (the seed's PALW_CUDA_RUNTIME_DIR) instead of the
    package's; its digest is in the key and the manifest's ``inputs.native``.
    """
    for option, directory in (("--cache-from", cache_from), ("--cache-to", cache_to)):
        if directory is not None and Path(directory).exists() and not Path(directory).is_dir():
            raise PalwError(f"{option} {directory} is a file, not a directory of build archives: name a "
                            "directory (it is created if missing)")
    build_root = Path(build_root) if build_root else cache_dir("builds")
    plan = make_plan(variant=variant, cuda_arch=cuda_arch, pinned_cc=pinned_cc, source=source,
                     build_root=build_root, overlays=overlays, patched=patched,
                     runtime_dir=Path(runtime_dir).expanduser().resolve() if runtime_dir else None)
    if plan.config.patched and not plan.config.trace:
        print(f"palw: warning: {plan.native.path} has no PALW header yet; building without the "
              "PALW trace (GGML_CUDA_PALW_TRACE=OFF)", file=sys.stderr)
    lock = plan.build_dir.with_name(plan.build_dir.name + ".lock")
    with exclusive(lock, what=f"building {plan.build_dir.name}"):
        manifest = None if force else _reusable(plan, say=True)
        if manifest is None and cache_from is not None and not force:  # checked whole before it is in place
            manifest = _reusable(plan, say=True) if carry.restore(cache_from, plan.build_dir, plan.key) else None
        if manifest is not None:
            manifest.cache_hit = True
            _refresh_binding(manifest, plan, install_binding)
            print(f"palw: cache hit: {manifest.path}", file=sys.stderr)
        else:
            manifest = _build(plan, force=force, jobs=jobs, install_binding=install_binding)
        if cache_to is not None:
            carry.save(manifest, cache_to)
        return manifest


def find_manifest(variant: str = "cpu", *, cuda_arch: str = DEFAULT_CUDA_ARCH,
                  pinned_cc: int | None = None, source: Path | str | None = None,
                  build_root: Path | str | None = None,
                  overlays: Path | str | None = None, patched: bool = True) -> Manifest | None:
    """The finished build for these inputs on this host, or None; never downloads or builds."""
    try:
        plan = make_plan(variant=variant, cuda_arch=cuda_arch, pinned_cc=pinned_cc, source=source,
                         build_root=Path(build_root) if build_root else cache_dir("builds"),
                         overlays=overlays, download=False, patched=patched)
    except PalwError:
        return None  # `palw build` will say what is wrong; finding just finds nothing
    return _reusable(plan) if plan else None


# -- the steps ------------------------------------------------------------------------------

def _reusable(plan: Plan, *, say: bool = False) -> Manifest | None:
    """The finished build of this plan if its outputs are the bytes its manifest records (checked
    now, every time: a cache hit is never trusted on a file's size and mtime). A damaged one is not
    reusable; ``say``: one line says what is damaged (the build that follows repairs it)."""
    path = plan.build_dir / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        manifest = Manifest.load(path)
    except PalwError as error:
        if say:
            print(f"palw: the cached build's manifest is unreadable ({error}): building again", file=sys.stderr)
        return None
    if manifest.key != plan.key:
        return None
    damage = manifest.damage()
    if damage is not None:
        if say:
            print(f"palw: the cached build {plan.build_dir.name} is damaged ({damage}): rebuilding it", file=sys.stderr)
        return None
    return manifest


def _refresh_binding(manifest: Manifest, plan: Plan, install_binding: bool) -> None:
    """A cached build may be reused from another interpreter (a new venv) that lacks the binding."""
    if not install_binding or installed_version() == SDIST_VERSION:
        return
    record = ensure_binding(plan.source.path if plan.source.kind == "sdist" else None)
    if record != manifest.binding:
        manifest.binding = record
        manifest.write(manifest.path)


def _build(plan: Plan, *, force: bool, jobs: int | None, install_binding: bool) -> Manifest:
    started = time.monotonic()
    if force and plan.build_dir.exists():
        shutil.rmtree(plan.build_dir)
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    _remove_damaged(plan)
    (plan.build_dir / MANIFEST_NAME).unlink(missing_ok=True)
    tree = materialize(plan.source)
    source_dir = _patched_tree(plan, tree.tree)
    if plan.config.pinned_cc is not None:
        check_pinned_cc_supported(source_dir)
    build_dir = plan.build_dir / BUILD_SUBDIR
    forget_moved_configuration(build_dir, source_dir)
    runtime_dir = (runtime_copy(plan.native.path, plan.build_dir, plan.native.sha256) if plan.config.trace
                   else plan.native.path)
    cmake_flags = plan.config.cmake_flags(runtime_dir)
    run_logged([str(plan.toolchain.cmake), "-S", str(source_dir), "-B", str(build_dir), "-G", "Ninja",
                *plan.toolchain.cmake_arguments(), *cmake_flags],
               plan.build_dir / "configure.log", step="cmake configure")
    jobs_flag = ["-j", str(jobs)] if jobs else []
    run_logged([str(plan.toolchain.ninja), "-C", str(build_dir), *jobs_flag, *plan.config.targets],
               plan.build_dir / "build.log", step="ninja build",
               progress_label=f"build {plan.config.variant}")
    outputs = _outputs(build_dir / "bin", plan.config)
    cxx_runtime = check_libraries(build_dir / "bin", plan.toolchain.cxx)
    require_one_runtime(cxx_runtime, str(plan.toolchain.cxx))
    binding = ensure_binding(plan.source.path if plan.source.kind == "sdist" else None,
                             skip=not install_binding)
    manifest = Manifest(
        key=plan.key, variant=plan.config.variant,
        cuda_arch=plan.config.cuda_arch if plan.config.cuda else None,
        pinned_cc=plan.config.pinned_cc, trace=plan.config.trace,
        inputs=_inputs(plan), cmake_flags=cmake_flags, tools=plan.toolchain.versions(),
        outputs=outputs, cxx_runtime=cxx_runtime, source_dir=str(source_dir),
        include_dirs=[str(source_dir / "include"), str(source_dir / "ggml" / "include"),
                      str(runtime_dir)],
        binding_python_path=str(tree.binding_python_path) if tree.binding_python_path else None,
        binding=binding, build_seconds=round(time.monotonic() - started, 1),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    manifest.write(plan.build_dir / MANIFEST_NAME)
    what = plan.config.variant + ("" if plan.config.patched else " unpatched reference")
    print(f"palw: built the {what} runtime in {manifest.build_seconds:.0f} s: "
          f"{manifest.path}", file=sys.stderr)
    return manifest


def _remove_damaged(plan: Plan) -> None:
    """Before compiling again over a damaged build: ninja judges by mtime, so a library whose bytes
    changed with its mtime kept would stay; removed, it is linked again. A patched tree without its
    headers is copied and patched again (and then compiled whole)."""
    try:
        old = Manifest.load(plan.build_dir / MANIFEST_NAME)
    except PalwError:
        return
    for path, recorded in old.digested_outputs().items():
        if path.is_file() and sha256_file(path) != recorded:
            path.unlink()
    if not (Path(old.source_dir) / "include" / "llama.h").is_file():
        (plan.build_dir / SOURCE_SUBDIR / PATCHED_FLAG).unlink(missing_ok=True)


def forget_moved_configuration(build_dir: Path, source_dir: Path) -> None:
    """A build directory configured elsewhere (restored from another machine's cache: its
    CMakeCache.txt names the origin's build and source directories, which CMake refuses) is
    configured afresh here, said in one line; with its objects not carried, that is a full compile."""
    cache = build_dir / "CMakeCache.txt"
    try:
        text = cache.read_text(errors="replace")
    except OSError:
        return
    recorded = {line.split(":", 1)[0]: line.split("=", 1)[1].strip() for line in text.splitlines()
                if line.startswith(("CMAKE_CACHEFILE_DIR:", "CMAKE_HOME_DIRECTORY:")) and "=" in line}
    moved = [Path(recorded[name]) for name, here in (("CMAKE_CACHEFILE_DIR", build_dir),
                                                      ("CMAKE_HOME_DIRECTORY", source_dir))
             if name in recorded and Path(recorded[name]) != Path(here)]
    if not moved:
        return
    print(f"palw: {build_dir} was configured for {moved[0]} (a restored build): configuring afresh here, a full "
          "compile", file=sys.stderr)
    cache.unlink()
    shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)


def runtime_copy(producer: Path, build_dir: Path, sha256: str) -> Path:
    """The build's own copy of the producer (``build_dir``/runtime-palw/cuda), the one CMake compiles:
    kept while its tree digest is ``sha256`` (the cache key's), else ``producer`` copied whole (a
    temporary copy renamed) and checked against it, so neither an edit after planning nor a changed
    copy (a byte flipped, a file added) slips in. Inside the build, its path is the same relative to
    every build of the cache: ccache serves a build of another checkout (a new CI clone) the objects
    already compiled."""
    copy = Path(build_dir) / RUNTIME_SUBDIR
    if copy.is_dir() and native_runtime(copy).sha256 == sha256:
        return copy
    partial = copy.with_name(f".{copy.name}.partial")
    try:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(producer, partial, symlinks=True)
        shutil.rmtree(copy, ignore_errors=True)
        partial.rename(copy)
    except OSError as error:
        shutil.rmtree(partial, ignore_errors=True)
        raise BuildError(f"cannot copy the producer {producer} to {copy.parent} ({error.strerror or error}): "
                         "free space there or make it writable, then run `palw build` again") from None
    if native_runtime(copy).sha256 != sha256:
        shutil.rmtree(copy, ignore_errors=True)
        raise BuildError(f"{producer} changed while `palw build` planned (its digest is the cache key's): "
                         "run the build again once it is stable")
    return copy


def _patched_tree(plan: Plan, tree: Path) -> Path:
    """The build's own patched copy of the source; kept across an interrupted build of the same key."""
    source_dir = plan.build_dir / SOURCE_SUBDIR
    flag = source_dir / PATCHED_FLAG
    if flag.is_file() and flag.read_text().strip() == plan.key:
        return source_dir
    print(f"palw: copying the source to {source_dir}", file=sys.stderr)
    copy_tree(tree, source_dir)
    shutil.rmtree(plan.build_dir / BUILD_SUBDIR, ignore_errors=True)  # stale against a new copy
    if not plan.source.patched and not plan.patch_set.is_empty:
        print("palw: applying the seed patch and overlays", file=sys.stderr)
        apply_patch_set(source_dir, plan.patch_set)
    write_whole(flag, plan.key + "\n")
    return source_dir


def _inputs(plan: Plan) -> dict:
    inputs = plan.patch_set.describe()
    inputs["sdist" if plan.source.kind == "sdist" else "source"] = plan.source.describe()
    inputs["native"] = plan.native.describe()
    return inputs


def _outputs(lib_dir: Path, config: BuildConfig) -> dict:
    libllama = lib_dir / "libllama.so"
    observer = lib_dir / "llama-palw-observer" if config.patched else None
    smoke = lib_dir / "llama-palw-mmvq-smoke" if config.cuda and config.patched else None
    missing = [path.name for path in (libllama, observer, smoke) if path and not path.is_file()]
    ggml = sorted(lib_dir.glob("libggml*.so"))
    if not ggml:
        missing.append("libggml*.so")
    if missing:
        raise BuildError(f"the build finished but {lib_dir} lacks {', '.join(missing)}: rerun "
                         "`palw build --force` and check build.log in the build directory")
    return {"lib_dir": str(lib_dir), "libllama": str(libllama),
            "libllama_sha256": sha256_file(libllama),
            "ggml_libs": [{"name": path.name, "path": str(path), "sha256": sha256_file(path)}
                          for path in ggml],
            "tools": {"observer": str(observer) if observer else None,
                      "smoke": str(smoke) if smoke else None}}
