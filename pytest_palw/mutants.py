"""`palw mutants`: show that the suite fails on broken runtimes.

Each mutant is one small source edit of the runtime under test (the patched llama.cpp tree
of a build, or our native runtime) and the conformance cases that must fail because of it.
The runner applies one mutant at a time to a finished CUDA build, rebuilds incrementally,
runs the named cases (kernel digest pinned to the unmutated library, so only the mutation
differs), checks each named case failed, restores the source and rebuilds at the end.
It needs the GPU the build traces on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from .errors import BuildError, PalwError
from .paths import CONFORMANCE_DIR, PROJECT_ROOT


@dataclass(frozen=True)
class Mutant:
    name: str
    claim: str  # what the broken runtime does
    root: str  # "source" (the build's patched llama.cpp tree) or "native" (runtime-palw/cuda)
    path: str
    old: str
    new: str
    must_fail: tuple[str, ...]  # conformance node ids, relative to conformance/


MUTANTS = (
    Mutant("producer-count-off-by-one", "the producer reports one launch more than it captured",
           "native", "producer_accumulator.cu",
           "return context != nullptr ? context->count : 0u;",
           "return context != nullptr ? context->count + (context->count != 0u) : 0u;",
           ("test_reject_index.py::test_reject_v2[5]", "test_positive_trace.py::test_v2_statuses")),
    Mutant("records-swapped", "finalize writes the records of launches 0 and 1 in swapped order",
           "native", "producer_accumulator.cu",
           "host_records[i] = context->templates[i];",
           "host_records[i] = context->templates[i < 2u ? 1u - i : i];",
           ("test_positive_trace.py::test_v2_record[0]", "test_positive_trace.py::test_v2_record[1]")),
    Mutant("collector-wrong-rows", "the attention collector sketches the next row's outputs",
           "native", "producer_accumulator.cu",
           "value_bits = __float_as_uint(output[row * output_row_stride + column]);",
           "value_bits = __float_as_uint(output[((row + 1u) % output_rows) * output_row_stride + column]);",
           ("test_positive_trace.py::test_device_sketch_equals_host_sketch[3]",
            "test_positive_trace.py::test_device_sketch_equals_host_sketch[5]")),
    Mutant("codec-rows-columns-swapped", "the C codec writes output columns before output rows",
           "native", "record_codec.cpp",
           "    out.u32(base.output_rows);\n    out.u32(base.output_columns);",
           "    out.u32(base.output_columns);\n    out.u32(base.output_rows);",
           ("test_positive_trace.py::test_c_codec_equals_python_encoder[palw_trace]",)),
    Mutant("softmax-not-hooked", "the softmax stage launches without the trace hook",
           "source", "ggml/src/ggml-cuda/softmax.cu",
           "if (ggml_cuda_palw_trace_v2_attention_active(&ctx)) {",
           "if (false && ggml_cuda_palw_trace_v2_attention_active(&ctx)) {",
           ("test_positive_trace.py::test_v2_statuses", "test_positive_trace.py::test_v2_record[4]")),
    Mutant("q6k-labelled-q4k", "the mixed association labels Q6_K weights as Q4_K",
           "source", "src/llama-context.cpp",
           "? PALW_CUDA_TRACE_QUANTIZATION_Q4_K\n                        : weight->type == GGML_TYPE_Q6_K\n"
           "                            ? PALW_CUDA_TRACE_QUANTIZATION_Q6_K",
           "? PALW_CUDA_TRACE_QUANTIZATION_Q4_K\n                        : weight->type == GGML_TYPE_Q6_K\n"
           "                            ? PALW_CUDA_TRACE_QUANTIZATION_Q4_K",
           ("test_positive_trace.py::test_v2_statuses", "test_reject_index.py::test_reject_v2[1]")),
)


def mutant_roots(manifest: dict) -> dict[str, Path]:
    native = manifest.get("inputs", {}).get("native", {}).get("path")
    return {"source": Path(manifest["source_dir"]), "native": Path(native) if native else None}


def apply(mutant: Mutant, roots: dict[str, Path]) -> tuple[Path, str]:
    """Edit the file; returns (path, original text) for restore()."""
    path = roots[mutant.root] / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise PalwError(f"mutant {mutant.name}: the anchor occurs {text.count(mutant.old)} times in "
                        f"{path} (expected once): the runtime changed; update pytest_palw/mutants.py")
    path.write_text(text.replace(mutant.old, mutant.new))
    return path, text


def rebuild(build_dir: Path, targets: list[str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(["ninja", "-C", str(build_dir), *targets], capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"incremental rebuild failed in {build_dir}:\n{result.stdout[-3000:]}")
    return time.perf_counter() - start


def failed_cases(junit: Path) -> set[str]:
    failed = set()
    for case in ET.parse(junit).iter("testcase"):
        if any(child.tag in ("failure", "error") for child in case):
            failed.add(case.get("name"))
    return failed


def run_cases(mutant: Mutant, lib: str, model: str, digest: str, workers: int, junit: Path) -> set[str]:
    nodes = [str(CONFORMANCE_DIR / node) for node in mutant.must_fail]
    args = [sys.executable, "-m", "pytest", *nodes, f"--palw-lib={lib}", f"--palw-model={model}",
            f"--palw-kernel-digest={digest}", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    if workers > 1:
        args += ["-n", str(min(workers, len(nodes)))]
    subprocess.run(args, capture_output=True, text=True, cwd=PROJECT_ROOT)
    return failed_cases(junit) if junit.is_file() else set()


def main_mutants(args: argparse.Namespace) -> int:
    from .runtime import RuntimeBuild
    from .session import kernel_digests

    build = RuntimeBuild.locate(Path(args.lib))
    manifest = build.manifest
    roots = mutant_roots(manifest)
    build_dir = Path(build.manifest_path).parent / "build"
    targets = ["llama", "ggml"]
    digest = kernel_digests(build.lib_dir)["q4_k"].hex()  # of the unmutated library
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for mutant in chosen:
            path, original = apply(mutant, roots)
            try:
                seconds = rebuild(build_dir, targets)
                failed = run_cases(mutant, args.lib, args.model, digest, args.workers,
                                   out / f"mutant-{mutant.name}.xml")
            finally:
                path.write_text(original)
            expected = {node.split("::", 1)[1] for node in mutant.must_fail}
            killed = expected <= failed
            results.append({"mutant": mutant.name, "claim": mutant.claim, "rebuild_s": round(seconds, 1),
                            "must_fail": sorted(expected), "failed": sorted(failed), "killed": killed})
            print(f"{'KILLED ' if killed else 'SURVIVED'} {mutant.name}: {mutant.claim}; failed "
                  f"{sorted(failed)} (rebuild {seconds:.0f} s)", flush=True)
    finally:
        rebuild(build_dir, targets)  # the unmutated runtime again
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    survivors = [r["mutant"] for r in results if not r["killed"]]
    print(f"{len(results) - len(survivors)} of {len(results)} mutants killed"
          + (f"; survived: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("mutants", help="break the runtime on purpose and check the suite notices",
                                   description=__doc__)
    parser.add_argument("--lib", required=True, help="palw-manifest.json of a finished cuda build")
    parser.add_argument("--model", default="profile:full")
    parser.add_argument("--only", nargs="*", help="mutant names (default: all)",
                        choices=[m.name for m in MUTANTS])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--out", default="palw-mutants")
    parser.add_argument("--json")
    parser.set_defaults(func=main_mutants)
