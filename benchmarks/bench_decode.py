"""Traced vs untraced one-token decode latency on one runtime and model (issue 8, part c).

    python benchmarks/bench_decode.py --lib MANIFEST_OR_LIB_DIR --model GGUF [--repeat 30] [--json OUT]

Each sample is one fresh pinned context (the smoke's policy) and one decode of the smoke's
token; "traced" adds attach (V2, 361 launches), kernel-info queries, unbind, finalize and
destroy around it, exactly as a conformance case does. Reported: median and p90 of the
decode call alone and of the whole case, and the traced/untraced ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT  # noqa: E402
from pytest_palw.preflight.gpu_share import slots_for  # noqa: E402
from pytest_palw.preflight.model_check import read_profile  # noqa: E402
from pytest_palw.runtime.caller import DIGEST_NAMES, TraceCaller, candidate_table  # noqa: E402
from pytest_palw.runtime.discovery import discover  # noqa: E402
from pytest_palw.runtime.kernel_digest import kernel_digest  # noqa: E402
from pytest_palw.runtime.library import Runtime, RuntimeBuild  # noqa: E402
from pytest_palw.runtime.run import run_trace  # noqa: E402


def _summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered) * 1e3, 3),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1e3, 3),
            "min_ms": round(ordered[0] * 1e3, 3), "n": len(ordered)}


class _TimedContext:
    """Wraps a Context so run_trace's decode call is timed on its own."""

    def __init__(self, context):
        self._context, self.decode_seconds = context, None

    def __getattr__(self, name):
        return getattr(self._context, name)

    def decode(self, token):
        start = time.perf_counter()
        status = self._context.decode(token)
        self.decode_seconds = time.perf_counter() - start
        return status


def measure(model, token: int, make_caller, repeat: int) -> dict:
    untraced_decode, untraced_case, traced_decode, traced_case = [], [], [], []
    for _ in range(repeat + 2):  # the first two warm up allocators and kernels
        start = time.perf_counter()
        with model.context() as context:
            t0 = time.perf_counter()
            status = context.decode(token)
            untraced_decode.append(time.perf_counter() - t0)
        untraced_case.append(time.perf_counter() - start)
        assert status == 0, f"untraced decode failed ({status})"

        start = time.perf_counter()
        with model.context() as context:
            timed = _TimedContext(context)
            caller = make_caller()
            run = run_trace(timed, caller, token)
        traced_case.append(time.perf_counter() - start)
        traced_decode.append(timed.decode_seconds or float("nan"))
        assert run.record_count == V2_COUNT, f"traced run committed {run.record_count} records"
    drop = slice(2, None)
    result = {"untraced_decode": _summary(untraced_decode[drop]),
              "traced_decode": _summary(traced_decode[drop]),
              "untraced_case": _summary(untraced_case[drop]),
              "traced_case": _summary(traced_case[drop])}
    result["decode_ratio"] = round(result["traced_decode"]["median_ms"]
                                   / result["untraced_decode"]["median_ms"], 3)
    result["case_ratio"] = round(result["traced_case"]["median_ms"]
                                 / result["untraced_case"]["median_ms"], 3)
    return result


PHASES = ("create", "trace", "free")


def reject_case(model, token: int, make_caller, index: int = 180) -> tuple[float, float, float]:
    """One reject case as the suite runs it (fresh context, caller, trace that fails closed), timed
    by phase: the context's creation, the trace (attach ... destroy) and the context's release."""
    t0 = time.perf_counter()
    context = model.context()
    try:
        t1 = time.perf_counter()
        caller = make_caller(reject_index=index)
        run = run_trace(context, caller, token)
        t2 = time.perf_counter()
    finally:
        context.free()
    t3 = time.perf_counter()
    assert run.decode_status != 0 and caller.rejection_triggered, "the rejection did not fail closed"
    return t1 - t0, t2 - t1, t3 - t2


def reject_cases(model, token: int, make_caller, repeat: int) -> list[tuple[float, float, float]]:
    return [reject_case(model, token, make_caller) for _ in range(repeat + 2)][2:]


def reject_throughput(model, token: int, make_caller, threads: int, cases: int) -> dict:
    """Reject cases served per second by ``threads`` threads of this one process (one CUDA context;
    each case still on its own fresh llama context), each checked as the suite's reject case checks
    its counts. Processes time-slice the GPU (two serve no more cases a second than one); threads
    of one process might not. The indices are spread over the trace."""
    from concurrent.futures import ThreadPoolExecutor

    indices = [(i * 7) % V2_COUNT for i in range(cases)]
    failed: list[int] = []

    def work(chunk: list[int]) -> None:
        for index in chunk:
            context = model.context()
            try:
                caller = make_caller(reject_index=index)
                run = run_trace(context, caller, token)
            finally:
                context.free()
            if not (run.decode_status not in (None, 0) and caller.rejection_triggered
                    and caller.approved == index and run.accepted == index and len(caller.faults) == 1):
                failed.append(index)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, [indices[t::threads] for t in range(threads)]))
    elapsed = time.perf_counter() - start
    return {"threads": threads, "cases": cases, "seconds": round(elapsed, 3),
            "cases_per_s": round(cases / elapsed, 1), "failed": len(failed), "failed_indices": failed[:10]}


def reused_context(model, token: int, make_caller, repeat: int) -> dict:
    """What one context per process would cost: reject cases on one context, its memory cleared
    before each (llama_memory_clear), then a positive trace on it against a fresh context's."""
    llama = model.runtime.llama
    samples = []
    with model.context() as context:
        memory = llama.llama_get_memory(context.pointer)
        for _ in range(repeat + 2):
            start = time.perf_counter()
            llama.llama_memory_clear(memory, True)
            run = run_trace(context, make_caller(reject_index=180), token)
            samples.append(time.perf_counter() - start)
            assert run.decode_status != 0, "the rejection did not fail closed on the reused context"
        llama.llama_memory_clear(memory, True)
        reused = run_trace(context, make_caller(), token)
    with model.context() as context:
        fresh = run_trace(context, make_caller(), token)
    return {"reject_case": _summary(samples[2:]), "positive_after_rejects": reused.fingerprint,
            "positive_fresh": fresh.fingerprint, "same": reused.python_stream == fresh.python_stream}


def profile_rejects(model, token: int, make_caller, path: str) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(20):
        reject_case(model, token, make_caller)
    profiler.disable()
    profiler.dump_stats(path)
    pstats.Stats(path).sort_stats("tottime").print_stats(20)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True, help="palw-manifest.json, build dir or lib dir")
    parser.add_argument("--model", required=True)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--gpu-slots", type=int, default=0,
                        help="hold one of N machine-wide GPU slots per context, as the plugin does "
                             "(--palw-gpu-slots); default 0: no limit")
    parser.add_argument("--member", type=int, default=0, help="this process's number among its peers (slots)")
    parser.add_argument("--threads", default="",
                        help="also time reject cases per second with each of these thread counts of this "
                             "process, e.g. 1,2,4 (--threads-cases each)")
    parser.add_argument("--threads-cases", type=int, default=240)
    parser.add_argument("--profile", help="cProfile 20 reject cases (index 180) into this file and "
                                          "print the top functions")
    args = parser.parse_args(argv)

    build = RuntimeBuild.locate(Path(args.lib))
    runtime = Runtime(build)
    runtime.gpu_slots = slots_for(args.gpu_slots, args.member)
    if not runtime.has_cuda_trace:
        print(f"bench_decode: {build.lib_dir} has no CUDA backend with the PALW procs", file=sys.stderr)
        return 2
    start = time.perf_counter()
    model = runtime.load_model(Path(args.model), read_profile(Path(args.model)))
    load_seconds = time.perf_counter() - start
    token = model.default_token()
    discovery = discover(model, token)
    digests = dict.fromkeys(DIGEST_NAMES, kernel_digest(runtime).digest)
    table = candidate_table(runtime.ffi, discovery.candidates)  # made once, as the suite's palw_caller does

    def make_caller(reject_index=None):
        return TraceCaller(runtime, discovery.candidates, version=2, reject_index=reject_index, digests=digests,
                           table=table)

    result = measure(model, token, make_caller, args.repeat)
    phases = reject_cases(model, token, make_caller, args.repeat)
    rejects = [sum(case) for case in phases]
    result["reject_case"] = _summary(rejects)
    result["reject_cases_per_s"] = round(len(rejects) / sum(rejects), 2)
    result["reject_phases"] = {name: _summary([case[i] for case in phases]) for i, name in enumerate(PHASES)}
    try:
        result["reused_context"] = reused_context(model, token, make_caller, args.repeat)
    except (AssertionError, AttributeError, OSError) as error:  # a runtime that refuses a reused context
        result["reused_context"] = {"error": repr(error), "reject_case": {"median_ms": float("nan")},
                                    "positive_after_rejects": None, "positive_fresh": None}
    result["model_load_s"] = round(load_seconds, 3)
    result["token"] = token
    if args.profile:
        profile_rejects(model, token, make_caller, args.profile)
    result["reject_threads"] = [reject_throughput(model, token, make_caller, int(n), args.threads_cases)
                                for n in filter(None, args.threads.split(","))]
    for key in ("untraced_decode", "traced_decode", "untraced_case", "traced_case", "reject_case"):
        row = result[key]
        print(f"{key:17s} median {row['median_ms']:8.3f} ms  p90 {row['p90_ms']:8.3f} ms  "
              f"min {row['min_ms']:8.3f} ms  (n={row['n']})")
    print("reject case phases: " + ", ".join(f"{name} {row['median_ms']:.3f} ms (p90 {row['p90_ms']:.3f})"
                                             for name, row in result["reject_phases"].items()))
    reused = result["reused_context"]
    print(f"reject case on one reused context: median {reused['reject_case']['median_ms']:.3f} ms; positive "
          f"trace after the rejects {reused['positive_after_rejects']} vs fresh {reused['positive_fresh']}")
    print(f"traced/untraced: decode {result['decode_ratio']}x, whole case {result['case_ratio']}x; "
          f"model load {result['model_load_s']} s")
    for row in result["reject_threads"]:
        print(f"reject cases, {row['threads']} thread(s) of one process: {row['cases_per_s']} a second "
              f"({row['cases']} in {row['seconds']} s), {row['failed']} not as the suite expects "
              f"{row['failed_indices']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
