"""`palw mutants`: show that the suite fails on broken runtimes.

Each mutant is one small source edit of the runtime under test (the patched llama.cpp tree
of a build, or our native runtime) and the conformance cases that must fail because of it.

- ``gpu`` mutants: applied in place to a finished CUDA build, which is rebuilt incrementally;
  the named cases run with the kernel digest pinned to the unmutated library (so only the
  mutation differs); the source is restored and rebuilt at the end. Needs the GPU.
- ``cpu`` mutants of the native runtime: the host codec the CPU tier compiles (cffi) from a
  mutated copy of ``native/runtime-palw/cuda`` ($PALW_HOST_ABI_DIR); nothing of ours is touched.
- ``cpu`` mutants of the patched tree (the seed's Qwen3.5-MoE loader fixes, each reverted):
  applied in place to a private CPU build (``mutant-builds/`` in the cache, made once) or to
  ``--lib``, rebuilt incrementally, restored at the end, like the gpu mutants.

A mutant is killed when every named case fails.
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
    tier: str  # "gpu" or "cpu"
    name: str
    claim: str  # what the broken runtime does
    root: str  # "source" (the build's patched llama.cpp tree) or "native" (runtime-palw/cuda)
    path: str
    old: str
    new: str
    must_fail: tuple[str, ...]  # conformance node ids, relative to conformance/


# One codec edit, caught by the GPU tier (runtime codec) and by the CPU tier (host codec).
ROWS_THEN_COLUMNS = "    out.u32(base.output_rows);\n    out.u32(base.output_columns);"
COLUMNS_THEN_ROWS = "    out.u32(base.output_columns);\n    out.u32(base.output_rows);"
# The mixed association's label for the weight type (the legacy one is indented differently).
MIXED_Q6_K_LABEL = ("? PALW_CUDA_TRACE_QUANTIZATION_Q4_K\n                        : weight->type == GGML_TYPE_Q6_K\n"
                    "                            ? PALW_CUDA_TRACE_QUANTIZATION_")


def refusal(request: str, fault: str = "INVALID_REQUEST", guard: str = "") -> str:
    """The start of attach's refusal path in src/llama-context.cpp for one request version."""
    return (f"        const palw_cuda_llama_{request} * request) {{\n"
            "    const auto fail_unbound = [request](palw_cuda_trace_status status) {\n"
            f"        if ({guard}request != nullptr && request->fault != nullptr) {{\n"
            "            request->fault(\n"
            "                request->user_data,\n"
            "                status,\n"
            f"                PALW_CUDA_LLAMA_MMVQ_FAULT_{fault},")


# The seed's Qwen3.5-MoE loader fixes in src/models/qwen35moe.cpp: each mutant reverts one.
QWEN35MOE = "src/models/qwen35moe.cpp"
QWEN35MOE_CASE = "test_qwen35moe.py::test_loads_and_decodes_one_token[{}]"

MUTANTS = (
    Mutant("gpu", "producer-count-off-by-one", "the producer reports one launch more than it captured",
           "native", "producer_accumulator.cu",
           "return context != nullptr ? context->count : 0u;",
           "return context != nullptr ? context->count + (context->count != 0u) : 0u;",
           ("test_reject_index.py::test_reject_v2[5]", "test_positive_trace.py::test_v2_statuses")),
    Mutant("gpu", "records-swapped", "finalize writes the records of launches 0 and 1 in swapped order",
           "native", "producer_accumulator.cu",
           "host_records[i] = context->templates[i];",
           "host_records[i] = context->templates[i < 2u ? 1u - i : i];",
           ("test_positive_trace.py::test_v2_record[0]", "test_positive_trace.py::test_v2_record[1]")),
    Mutant("gpu", "collector-wrong-rows", "the attention collector sketches the next row's outputs",
           "native", "producer_accumulator.cu",
           "value_bits = __float_as_uint(output[row * output_row_stride + column]);",
           "value_bits = __float_as_uint(output[((row + 1u) % output_rows) * output_row_stride + column]);",
           ("test_positive_trace.py::test_device_sketch_equals_host_sketch[3]",
            "test_positive_trace.py::test_device_sketch_equals_host_sketch[5]")),
    Mutant("gpu", "codec-rows-columns-swapped", "the C codec writes output columns before output rows",
           "native", "record_codec.cpp", ROWS_THEN_COLUMNS, COLUMNS_THEN_ROWS,
           ("test_positive_trace.py::test_c_codec_equals_python_encoder[palw_trace]",)),
    Mutant("gpu", "softmax-not-hooked", "the softmax stage launches without the trace hook",
           "source", "ggml/src/ggml-cuda/softmax.cu",
           "if (ggml_cuda_palw_trace_v2_attention_active(&ctx)) {",
           "if (false && ggml_cuda_palw_trace_v2_attention_active(&ctx)) {",
           ("test_positive_trace.py::test_v2_statuses", "test_positive_trace.py::test_v2_record[4]")),
    Mutant("gpu", "q6k-labelled-q4k", "the mixed association labels Q6_K weights as Q4_K",
           "source", "src/llama-context.cpp", MIXED_Q6_K_LABEL + "Q6_K", MIXED_Q6_K_LABEL + "Q4_K",
           ("test_positive_trace.py::test_v2_statuses", "test_reject_index.py::test_reject_v2[1]")),
    Mutant("cpu", "host-codec-rows-columns-swapped", "the host codec writes output columns before rows",
           "native", "record_codec.cpp", ROWS_THEN_COLUMNS, COLUMNS_THEN_ROWS,
           ("test_cpu_reference.py::test_c_codec_equals_python_encoder",)),
    Mutant("cpu", "host-codec-sketch-little-endian", "the host codec writes sketch lanes little-endian",
           "native", "record_codec.cpp",
           "output_[written_ + i] = static_cast<uint8_t>(value >> (8 * (width - 1 - i)));",
           "output_[written_ + i] = static_cast<uint8_t>(value >> (8 * (width == 8 ? i : width - 1 - i)));",
           ("test_cpu_reference.py::test_c_codec_equals_python_encoder",)),
    Mutant("cpu", "rope-sections-4-only", "the loader accepts only 4-entry rope.dimension_sections",
           "source", QWEN35MOE, "if (sections.size() != 3 && sections.size() != 4) {",
           "if (sections.size() != 4) {", (QWEN35MOE_CASE.format("rope-sections-3"),)),
    Mutant("cpu", "ssm-dt-bias-required", "the loader requires the '.bias' spelling of ssm_dt",
           "source", QWEN35MOE, "flags | TENSOR_NOT_REQUIRED);\n            if (!layer.ssm_dt) {",
           "flags);\n            if (!layer.ssm_dt) {", (QWEN35MOE_CASE.format("ssm-dt-plain"),)),
    Mutant("cpu", "bundled-siblings-not-counted", "the loader no longer accounts for bundled v.*/mtp.* tensors",
           "source", QWEN35MOE, "if (is_vision || is_mtp) {", "if (false && (is_vision || is_mtp)) {",
           (QWEN35MOE_CASE.format("bundled-v-mtp"),)),
    Mutant("cpu", "kv-width-from-layer-0", "attention layers take their K/V width from layer 0",
           "source", QWEN35MOE,
           "const int64_t n_embd_k_gqa_attn = hparams.n_embd_k_gqa_max();\n"
           "            const int64_t n_embd_v_gqa_attn = hparams.n_embd_v_gqa_max();",
           "const int64_t n_embd_k_gqa_attn = n_embd_k_gqa;\n"
           "            const int64_t n_embd_v_gqa_attn = n_embd_v_gqa;",
           (QWEN35MOE_CASE.format("per-layer-heads"),)),
    Mutant("cpu", "v2-refusal-without-fault", "a refused V2 attach calls no fault callback",
           "source", "src/llama-context.cpp", refusal("trace_request_v2"),
           refusal("trace_request_v2", guard="false && "),
           ("test_misuse.py::test_invalid_request_field[abi_version-2]",
            "test_misuse.py::test_invalid_context_policy[n_batch-2]")),
    Mutant("cpu", "v1-refusal-wrong-fault", "a refused V1 attach reports a GRAPH fault, not INVALID_REQUEST",
           "source", "src/llama-context.cpp", refusal("mmvq_request_v1"), refusal("mmvq_request_v1", "GRAPH"),
           ("test_misuse.py::test_invalid_request_field[abi_version-1]",
            "test_misuse.py::test_invalid_context_policy[n_batch-1]")),
)


def mutant_roots(manifest: dict) -> dict[str, Path]:
    native = manifest.get("inputs", {}).get("native", {}).get("path")
    return {"source": Path(manifest["source_dir"]), "native": Path(native) if native else None}


def anchor_count(mutant: Mutant, root: Path) -> int:
    path = root / mutant.path
    return path.read_text().count(mutant.old) if path.is_file() else 0


def apply(mutant: Mutant, roots: dict[str, Path]) -> tuple[Path, str]:
    """Edit the file; returns (path, original text) for restore()."""
    path = roots[mutant.root] / mutant.path
    count = anchor_count(mutant, roots[mutant.root])
    if count != 1:
        raise PalwError(f"mutant {mutant.name}: the anchor occurs {count} times in {path} (expected "
                        "once): the runtime changed; update pytest_palw/mutants.py")
    text = path.read_text()
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


def run_cases(mutant: Mutant, options: list[str], workers: int, junit: Path, env=None) -> set[str]:
    nodes = [str(CONFORMANCE_DIR / node) for node in mutant.must_fail]
    args = [sys.executable, "-m", "pytest", *nodes, *options, "-q", "-p", "no:cacheprovider",
            f"--junitxml={junit}"]
    if workers > 1 and len(nodes) > 1:
        args += ["-n", str(min(workers, len(nodes)))]
    subprocess.run(args, capture_output=True, text=True, cwd=PROJECT_ROOT, env=env)
    return failed_cases(junit) if junit.is_file() else set()


def _verdict(mutant: Mutant, failed: set[str], seconds: float) -> dict:
    expected = {node.split("::", 1)[1] for node in mutant.must_fail}
    killed = expected <= failed
    print(f"{'KILLED  ' if killed else 'SURVIVED'} {mutant.name}: {mutant.claim}; failed "
          f"{sorted(failed)} ({seconds:.0f} s)", flush=True)
    return {"mutant": mutant.name, "tier": mutant.tier, "claim": mutant.claim, "seconds": round(seconds, 1),
            "must_fail": sorted(expected), "failed": sorted(failed), "killed": killed}


def run_cpu_mutant(mutant: Mutant, options: list[str], out: Path) -> dict:
    """Mutate a copy of the native runtime; the CPU tier compiles its host codec from it."""
    import os
    import shutil
    import tempfile

    from .paths import NATIVE_RUNTIME_DIR

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"palw-mutant-{mutant.name}-") as scratch:
        copy = Path(scratch) / "cuda"
        shutil.copytree(NATIVE_RUNTIME_DIR, copy)
        apply(mutant, {"native": copy})
        env = dict(os.environ, PALW_HOST_ABI_DIR=str(copy))
        failed = run_cases(mutant, options, 1, out / f"mutant-{mutant.name}.xml", env=env)
    return _verdict(mutant, failed, time.perf_counter() - start)


def private_cpu_build() -> Path:
    """A CPU build of our own to mutate in place: the plugin's default runtime stays untouched."""
    from .build import api
    from .paths import cache_dir

    print("palw: mutants: the patched-tree mutants edit a private CPU build (made once, ~5 min on "
          "2 cores)", file=sys.stderr, flush=True)
    manifest = api.build("cpu", build_root=cache_dir("mutant-builds"))
    if not is_pristine(Path(manifest.source_dir)):
        # A run killed mid-mutation left an edit behind: start again from the patched tree.
        print("palw: mutants: the private build holds a leftover mutation; rebuilding it",
              file=sys.stderr, flush=True)
        manifest = api.build("cpu", build_root=cache_dir("mutant-builds"), force=True)
    return Path(manifest.path)


def is_pristine(source_dir: Path) -> bool:
    """Every cpu patched-tree mutant's anchor occurs exactly once: no edit is left in the tree."""
    return all(anchor_count(mutant, source_dir) == 1 for mutant in MUTANTS
               if mutant.tier == "cpu" and mutant.root == "source")


def run_in_place(mutants: list[Mutant], manifest: Path, options: list[str], workers: int, out: Path,
                 pin_digest: bool) -> list[dict]:
    """Edit the build's own sources, rebuild incrementally, run the cases; restore at the end."""
    from .runtime import RuntimeBuild
    from .session import kernel_digests

    build = RuntimeBuild.locate(manifest)
    roots = mutant_roots(build.manifest)
    build_dir = Path(build.manifest_path).parent / "build"
    targets = ["llama", "ggml"]
    options = [*options, f"--palw-lib={manifest}"]
    if pin_digest:  # the digest of the unmutated library, so that only the mutation differs
        options.append(f"--palw-kernel-digest={kernel_digests(build.lib_dir)['q4_k'].hex()}")
    results = []
    try:
        for mutant in mutants:
            path, original = apply(mutant, roots)
            start = time.perf_counter()
            try:
                rebuild(build_dir, targets)
                failed = run_cases(mutant, options, workers, out / f"mutant-{mutant.name}.xml")
            finally:
                path.write_text(original)
            results.append(_verdict(mutant, failed, time.perf_counter() - start))
    finally:
        rebuild(build_dir, targets)  # the unmutated runtime again
    return results


def main_mutants(args: argparse.Namespace) -> int:
    chosen = [m for m in MUTANTS if m.tier == args.tier and (not args.only or m.name in args.only)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = args.model or ("profile:tiny" if args.tier == "cpu" else "profile:full")
    options = [f"--palw-model={model}"]
    lib = Path(args.lib) if args.lib else None
    if args.tier == "cpu":
        native = [m for m in chosen if m.root == "native"]
        results = [run_cpu_mutant(m, options + ([f"--palw-lib={lib}"] if lib else []), out) for m in native]
        in_tree = [m for m in chosen if m.root == "source"]
        if in_tree:
            results += run_in_place(in_tree, lib or private_cpu_build(), options, args.workers, out,
                                    pin_digest=False)
    else:
        if lib is None:
            raise PalwError("gpu mutants rebuild a finished cuda build in place: pass --lib MANIFEST")
        results = run_in_place(chosen, lib, options, args.workers, out, pin_digest=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    survivors = [r["mutant"] for r in results if not r["killed"]]
    print(f"{len(results) - len(survivors)} of {len(results)} {args.tier} mutants killed"
          + (f"; survived: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("mutants", help="break the runtime on purpose and check the suite notices",
                                   description=__doc__)
    parser.add_argument("--tier", choices=("cpu", "gpu"), default="cpu",
                        help="cpu: mutated host codec and loader on the CPU tier; gpu: mutated CUDA "
                             "build (default cpu)")
    parser.add_argument("--lib", help="palw-manifest.json of the build to mutate in place (gpu: a "
                        "finished cuda build, required; cpu: default a private build in the cache)")
    parser.add_argument("--model", default=None, help="default profile:tiny (cpu) or profile:full (gpu)")
    parser.add_argument("--only", nargs="*", help="mutant names (default: all)",
                        choices=[m.name for m in MUTANTS])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--out", default="palw-mutants")
    parser.add_argument("--json")
    parser.set_defaults(func=main_mutants)
