"""CLI: `palw build` and `palw source`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_palw.builder.choice import PALW_DEFAULT_PIN
from pytest_palw.builder.config import DEFAULT_CUDA_ARCH, VARIANTS
from pytest_palw.builder.source import SDIST_NAME, SDIST_VERSION


def register(subparsers) -> None:
    _register_build(subparsers)
    _register_source(subparsers)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _register_build(subparsers) -> None:
    parser = subparsers.add_parser(
        "build", help="build the PALW-patched llama.cpp runtime (cached by its inputs)",
        description=f"Patch llama.cpp (from {SDIST_NAME} {SDIST_VERSION}) with the PALW seed patch and "
                    "overlays, build libllama/libggml and the PALW tools, and write "
                    "palw-manifest.json. A second run with the same inputs reuses the build.")
    parser.add_argument("--variant", choices=VARIANTS, default="cpu", help="default: cpu")
    parser.add_argument("--cuda-arch",
                        help="CMAKE_CUDA_ARCHITECTURES for --variant cuda (default: the visible GPU's, "
                             f"else {DEFAULT_CUDA_ARCH})")
    parser.add_argument("--pinned-cc", type=int, metavar="N",
                        help="pass -DPALW_CUDA_PINNED_CC=N (default for --variant cuda: the visible "
                             "GPU's compute capability, e.g. 900 on an H200; without a GPU the "
                             f"pinned-cc overlay's default, {PALW_DEFAULT_PIN})")
    parser.add_argument("--source", type=Path, metavar="PATH",
                        help="an unpatched llama.cpp directory, the sdist .tar.gz, or a file made "
                             "by `palw source` (default: download the sdist from PyPI once)")
    parser.add_argument("--overlays", type=Path, metavar="DIR",
                        help="overlay patch directory with a `series` file (default: "
                             "$PALW_OVERLAYS_DIR or patches/overlays)")
    parser.add_argument("--runtime-dir", type=Path, metavar="DIR",
                        help="a runtime-palw/cuda directory to compile in (the seed's PALW_CUDA_RUNTIME_DIR: "
                             "a vendor's producer; default: the package's native/runtime-palw/cuda); its "
                             "digest goes into the cache key, the manifest and the certificate")
    parser.add_argument("--force", action="store_true", help="rebuild even if a cached build matches")
    parser.add_argument("--jobs", type=_positive, metavar="N", help="parallel compile jobs (ninja -j)")
    parser.add_argument("--build-root", type=Path, metavar="DIR",
                        help="where builds go (default: the pytest-palw cache's builds/)")
    parser.add_argument("--cache-from", type=Path, metavar="DIR",
                        help="a directory of build archives (--cache-to): restore the one of this build's "
                             "key instead of compiling (a CI gate's cache)")
    parser.add_argument("--cache-to", type=Path, metavar="DIR",
                        help="write this build's archive (outputs, headers; no objects) into DIR, named by "
                             "its key")
    parser.add_argument("--model", metavar="SPEC",
                        help="prepare what `palw certify --model SPEC` would on its first run: the model "
                             "(profile:NAME is synthesized) beside the compile, then this build's cffi "
                             "binding and, for cuda, llama.cpp's test-backend-ops")
    parser.add_argument("--print-manifest", action="store_true",
                        help="print the manifest path on stdout (for scripts)")
    parser.add_argument("--no-binding-install", action="store_true",
                        help="do not pip install llama-cpp-python; use the sdist's copy")
    parser.add_argument("--unpatched", action="store_true",
                        help="build upstream llama.cpp from the same source, without the seed patch "
                             "and overlays (libllama, libggml only): a reference for A/B checks; "
                             "it has no PALW trace, so the plugin refuses it")
    parser.set_defaults(func=_run_build)


def _run_build(args) -> int:
    from pytest_palw.builder.api import build
    from pytest_palw.cli import first_use

    if args.runtime_dir and args.unpatched:
        raise SystemExit("palw build: an --unpatched build compiles no PALW runtime: drop --runtime-dir or --unpatched")
    if args.model and args.unpatched:
        raise SystemExit("palw build: --model prepares a certification, and an --unpatched build is never "
                         "certified: drop one of them")
    cuda_arch, pinned_cc = args.cuda_arch or DEFAULT_CUDA_ARCH, args.pinned_cc
    if args.variant == "cuda" and not args.unpatched:
        from pytest_palw.builder.choice import for_visible_device

        cuda_arch, pinned_cc, line = for_visible_device(args.cuda_arch, args.pinned_cc)
        print(f"palw: {line}", file=sys.stderr)
    jobs = [first_use.start_model(args.model)] if args.model else []
    try:
        manifest = build(args.variant, cuda_arch=cuda_arch, pinned_cc=pinned_cc,
                         source=args.source, force=args.force, jobs=args.jobs,
                         build_root=args.build_root, overlays=args.overlays,
                         install_binding=not args.no_binding_install, patched=not args.unpatched,
                         cache_from=args.cache_from, cache_to=args.cache_to, runtime_dir=args.runtime_dir)
    except BaseException:
        for job in jobs:
            job.process.kill()
        raise
    if args.model:
        jobs += first_use.start_compiles(Path(manifest.path), args.variant)
    failed = first_use.finish(jobs)
    if args.print_manifest:
        print(manifest.path)
    if failed:
        print(f"palw: the build is done, but {failed} of {len(jobs)} preparations failed (above): "
              "`palw certify` would stop on the same cause", file=sys.stderr)
        return 1
    return 0


def _register_source(subparsers) -> None:
    parser = subparsers.add_parser(
        "source", help="write a pruned, already-patched source archive for offline builds",
        description="Write a tar.gz with the patched, pruned llama.cpp tree, the llama_cpp "
                    "Python package and PALW_SOURCE.json; `palw build --source FILE` builds from "
                    "it with no network.")
    parser.add_argument("--output", type=Path, required=True, metavar="FILE", help="the .tar.gz to write")
    parser.add_argument("--source", type=Path, metavar="PATH",
                        help="the sdist .tar.gz or an unpatched llama.cpp directory (default: PyPI sdist)")
    parser.add_argument("--overlays", type=Path, metavar="DIR",
                        help="overlay patch directory (default: $PALW_OVERLAYS_DIR or patches/overlays)")
    parser.set_defaults(func=_run_source)


def _run_source(args) -> int:
    from pytest_palw.builder.archive import make_source_archive

    report = make_source_archive(args.output, source=args.source, overlays=args.overlays)
    print(f"palw: pruned {len(report.pruned)} paths: {' '.join(report.pruned)}", file=sys.stderr)
    print(f"{report.path}  {report.size / 1e6:.2f} MB  {report.files} files")
    return 0
