"""Speed of a whole GPU certification, and where its wall time goes (issue 12).

    python benchmarks/bench_certify.py --model GGUF [--lib MANIFEST] [--workers 8,12,4]
        [--smoke-sample 0,180,360] [--budget-s 300] [--out DIR] [--json OUT]

(a) the seed's way: one `llama-palw-mmvq-smoke --mixed --reject-index k` process per case, each
    reloading the model; wall time per process.
(b) the plugin's way, exactly as a user runs it: `palw certify --model profile:full -n N`, per
    worker count, wall time including every model load. From the certificate it writes: the
    per-case durations (setup + call + teardown, in the worker), the busy fraction (sum of case
    durations / (wall x workers)), each worker's timeline (process start, session start,
    collected, runtime loaded, model loaded, discovery, first case, last case end, exit) and the
    controller's (preflight, load probe started and done), from which the idle time is attributed.
    A run cut by the budget is reported as inconclusive.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE_CLASSES = ("q4", "q6", "qk", "softmax", "pv")
MOMENTS = ("process_start", "session_start", "collected", "runtime_loaded", "model_loaded", "discovery_done",
           "first_case", "last_case_end", "loop_done", "finished")
# The controller (pytest's own process): its preflight, the load probe beside the workers' start.
CONTROLLER_MOMENTS = ("process_start", "configured", "preflight_start", "model_checked", "runtime_chosen",
                      "probe_started", "probe_done", "loop_done", "finished")


def smoke_command(smoke: str, model: str, digest: str, reject: int | None) -> list[str]:
    args = [smoke, "--model", model, "--mixed"]
    for name in SMOKE_CLASSES:
        args += [f"--{name}-cubin-sha256", digest]
    return args + (["--reject-index", str(reject)] if reject is not None else [])


def run_smoke_loop(smoke: str, model: str, digest: str, sample: list[int]) -> dict:
    cases = []
    for reject in [None] + sample:
        start = time.perf_counter()
        result = subprocess.run(smoke_command(smoke, model, digest, reject), capture_output=True,
                                text=True, timeout=300)
        seconds = time.perf_counter() - start
        last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "{}"
        try:
            report = json.loads(last)
        except json.JSONDecodeError:
            report = {"status": f"unparsed (rc {result.returncode})"}
        cases.append({"reject_index": reject, "seconds": round(seconds, 3), "status": report.get("status"),
                      "fingerprint": report.get("canonical_record_fnv1a64")})
        print(f"  smoke reject={reject!s:>4}: {seconds:6.3f} s  status={report.get('status')}", flush=True)
    return {"cases": cases, "median_process_s": round(statistics.median(c["seconds"] for c in cases), 3)}


def timeline_table(document: dict, wall_start: float) -> list[dict]:
    """Per worker: its own moments (from its facts, present when it finished normally) and, from
    the case reports themselves (present even in an interrupted run), first start and last end."""
    rows = []
    by_worker: dict[str, list[dict]] = {}
    for case in document.get("cases", []):
        by_worker.setdefault(case.get("worker") or "controller", []).append(case)
    workers = document.get("workers") or {}
    for worker in sorted(set(by_worker) | set(workers)):
        moments = workers.get(worker, {}).get("timeline", {})
        row = {"worker": worker, **{m: round(moments[m] - wall_start, 2)
                                    for m in set(MOMENTS) | set(CONTROLLER_MOMENTS) if moments.get(m)}}
        cases = by_worker.get(worker, [])
        starts = [c["started_at"] for c in cases if c.get("started_at")]
        ends = [c["finished_at"] for c in cases if c.get("finished_at")]
        if starts:
            row["first_case"] = round(min(starts) - wall_start, 2)
            row["last_case_end"] = round(max(ends) - wall_start, 2)
        row["cases"] = len(cases)
        row["case_s"] = round(sum(c["duration_s"] for c in cases), 2)
        rows.append(row)
    return rows


def run_certify(model: str, lib: str | None, workers: int, out_dir: Path, budget: float) -> dict:
    certificate = out_dir / f"certificate-n{workers}.json"
    args = [sys.executable, "-m", "pytest_palw.cli", "certify", "--model", model, "-n", str(workers),
            f"--certificate={certificate}"] + ([f"--lib={lib}"] if lib else [])
    log = out_dir / f"certify-n{workers}.log"
    start = time.time()
    with open(log, "w") as handle:
        process = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            rc, cut = process.wait(timeout=budget), False
        except subprocess.TimeoutExpired:  # Ctrl-C: pytest still writes what it has (interrupted)
            process.send_signal(signal.SIGINT)
            try:
                rc, cut = process.wait(timeout=60), True
            except subprocess.TimeoutExpired:
                process.kill()
                rc, cut = process.wait(), True
    wall = time.time() - start
    row = {"workers": workers, "wall_s": round(wall, 1), "rc": rc}
    if cut:
        row["inconclusive"] = f"cut at {wall:.0f} s by the budget (SIGINT)"
        print(f"  certify -n {workers}: INCONCLUSIVE ({row['inconclusive']})", flush=True)
    if not certificate.is_file():
        row["inconclusive"] = row.get("inconclusive", "") + "; no certificate written"
        return row
    document = json.loads(certificate.read_text())
    cases = document["cases"]
    durations = [c["duration_s"] for c in cases]
    rejects = [c["duration_s"] for c in cases if "test_reject_index.py::test_reject_v" in c["nodeid"]]
    row.update({
        "verdict": "CERTIFIED" if document["verdict"]["certified"] else "not certified",
        "reasons": document["verdict"]["reasons"], "summary": document["summary"],
        "sum_case_s": round(sum(durations), 1),
        "busy_fraction": round(sum(durations) / (wall * workers), 3),
        "median_reject_case_s": round(statistics.median(rejects), 4) if rejects else None,
        "timeline": timeline_table(document, start),
    })
    s = document["summary"]
    print(f"  certify -n {workers}: {'(cut) ' if cut else ''}{wall:6.1f} s wall, "
          f"{s['passed']} passed {s['failed']} failed "
          f"{s['skipped']} skipped, busy {row['busy_fraction']:.0%}, median reject case "
          f"{row['median_reject_case_s']} s, {row['verdict']}", flush=True)
    print(f"    {'worker':8}" + "".join(f"{m[:12]:>13}" for m in MOMENTS) + f"{'cases':>7}{'case_s':>8}")
    for line in row["timeline"]:
        if line["worker"] == "controller" and not line["cases"]:
            print("    controller: " + ", ".join(f"{m} {line[m]:.2f}" for m in CONTROLLER_MOMENTS if m in line)
                  + f"; command exit {wall:.2f}")
            continue
        print(f"    {line['worker']:8}" + "".join(f"{line.get(m, float('nan')):13.2f}" for m in MOMENTS)
              + f"{line['cases']:7d}{line['case_s']:8.1f}")
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="GGUF of the full profile (for the smoke)")
    parser.add_argument("--palw-model", default="profile:full", help="the same model for the plugin")
    parser.add_argument("--lib", help="palw-manifest.json (default: the plugin's own choice)")
    parser.add_argument("--smoke-sample", default="0,180,360")
    parser.add_argument("--workers", default="8")
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/palw-bench"))
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    from pytest_palw.runtime.library import RuntimeBuild

    report: dict = {"model": args.model}
    if args.lib:
        build = RuntimeBuild.locate(Path(args.lib))
        smoke = build.manifest["outputs"]["tools"]["smoke"]
        library = sorted(build.lib_dir.glob("libggml-cuda.so*"))[0]
        digest = hashlib.sha256(library.read_bytes()).hexdigest()
        print("(a) seed smoke, one process per case:", flush=True)
        report["smoke"] = run_smoke_loop(smoke, args.model, digest, [int(x) for x in args.smoke_sample.split(",") if x])
    print("(b) palw certify, the whole suite:", flush=True)
    report["certify"] = []
    for workers in (int(x) for x in args.workers.split(",")):
        left = args.budget_s - (time.perf_counter() - started)
        if left < 30:
            print(f"  certify -n {workers}: not run ({left:.0f} s of the budget left)")
            report["certify"].append({"workers": workers, "not_run": "budget"})
            continue
        report["certify"].append(run_certify(args.palw_model, args.lib, workers, out_dir, left))
    done = [row for row in report["certify"] if "busy_fraction" in row]
    if done and "smoke" in report and done[0]["median_reject_case_s"]:
        smoke_s = report["smoke"]["median_process_s"]
        best = min(done, key=lambda row: row["wall_s"])
        report["per_reject_case_speedup"] = round(smoke_s / best["median_reject_case_s"], 1)
        print(f"per reject case: smoke process {smoke_s:.3f} s vs plugin case {best['median_reject_case_s']:.4f} s "
              f"-> {report['per_reject_case_speedup']}x; best wall -n {best['workers']}: {best['wall_s']} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
