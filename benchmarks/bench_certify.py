"""The seed smoke loop vs the plugin's GPU tier (issue 8, parts a and b).

    python benchmarks/bench_certify.py --lib MANIFEST --model GGUF \
        [--smoke-sample 0,180,360] [--workers 1,2,4,8] [--json OUT] [--budget-s 300]

(a) the seed's way: one `llama-palw-mmvq-smoke --mixed --reject-index k` process per case
    (plus the positive run), each reloading the model; per-case wall time.
(b) the plugin: `pytest conformance` (all tiers, the full GPU tier included) with -n N xdist
    workers on this GPU; wall time including model loads, per-case durations from JUnit XML.
Prints per-case times, totals and the speed-up (a)/(b), per reject case and overall. A worker
count is skipped, and said so, once --budget-s would be exceeded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_palw.runtime import RuntimeBuild  # noqa: E402
from pytest_palw.session import kernel_digests  # noqa: E402

SMOKE_CLASSES = ("q4", "q6", "qk", "softmax", "pv")
REJECT_CASES = 614  # V2 0..360 + V1 0..252


def smoke_command(smoke: str, model: str, digest: str, reject: int | None) -> list[str]:
    args = [smoke, "--model", model, "--mixed"]
    for name in SMOKE_CLASSES:
        args += [f"--{name}-cubin-sha256", digest]
    if reject is not None:
        args += ["--reject-index", str(reject)]
    return args


def run_smoke_loop(smoke: str, model: str, digest: str, sample: list[int]) -> dict:
    cases = []
    for reject in [None] + sample:
        start = time.perf_counter()
        result = subprocess.run(smoke_command(smoke, model, digest, reject), capture_output=True,
                                text=True, timeout=300)
        seconds = time.perf_counter() - start
        last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "{}"
        try:
            status = json.loads(last).get("status")
        except json.JSONDecodeError:
            status = f"unparsed (rc {result.returncode})"
        cases.append({"reject_index": reject, "seconds": round(seconds, 3), "status": status,
                      "rc": result.returncode})
        print(f"  smoke reject={reject!s:>4}: {seconds:6.2f} s  status={status} rc={result.returncode}",
              flush=True)
    per_case = statistics.median(c["seconds"] for c in cases)
    return {"cases": cases, "median_case_s": round(per_case, 3),
            "projected_614_rejects_plus_positive_s": round(per_case * (REJECT_CASES + 1), 1)}


def run_plugin(lib: str, model: str, workers: int, out_dir: Path, extra: list[str]) -> dict:
    junit = out_dir / f"junit-n{workers}.xml"
    args = [sys.executable, "-m", "pytest", str(ROOT / "conformance"), f"--palw-lib={lib}",
            f"--palw-model={model}", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
            "-o", "console_output_style=classic", *extra]
    if workers > 0:
        args += ["-n", str(workers)]
    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    tail = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    durations, reject_durations, outcomes = [], [], {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    if junit.is_file():
        for case in ET.parse(junit).iter("testcase"):
            seconds = float(case.get("time", 0))
            durations.append(seconds)
            if "test_reject_v" in case.get("name", ""):
                reject_durations.append(seconds)
            kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            outcomes[{"failure": "failed"}.get(kind, kind)] += 1
    row = {"workers": workers, "wall_s": round(wall, 2), "rc": result.returncode, "summary": tail,
           "cases": len(durations), "outcomes": outcomes,
           "reject_cases": len(reject_durations),
           "median_reject_case_s": round(statistics.median(reject_durations), 4) if reject_durations else None,
           "sum_case_s": round(sum(durations), 2)}
    print(f"  plugin -n {workers}: wall {wall:6.1f} s, {row['cases']} cases {outcomes}, "
          f"median reject case {row['median_reject_case_s']} s  [{tail}]", flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True, help="palw-manifest.json of a cuda build")
    parser.add_argument("--model", required=True, help="GGUF path of the full profile (the smoke's --model)")
    parser.add_argument("--palw-model", default="profile:full",
                        help="the same model for the plugin (profile:full keeps the golden names)")
    parser.add_argument("--smoke-sample", default="0,180,360")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/palw-bench"))
    parser.add_argument("--json")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    build = RuntimeBuild.locate(Path(args.lib))
    smoke = build.manifest.get("outputs", {}).get("tools", {}).get("smoke")
    digest = kernel_digests(build.lib_dir)["q4_k"].hex()
    report = {"lib_dir": str(build.lib_dir), "model": args.model}

    print("(a) seed smoke loop, one process per case:", flush=True)
    sample = [int(x) for x in args.smoke_sample.split(",") if x]
    report["smoke"] = run_smoke_loop(smoke, args.model, digest, sample)

    print("(b) plugin, full conformance suite:", flush=True)
    report["plugin"] = []
    for workers in (int(x) for x in args.workers.split(",")):
        spent = time.perf_counter() - started
        if report["plugin"] and spent + report["plugin"][-1]["wall_s"] > args.budget_s:
            print(f"  plugin -n {workers}: skipped, {spent:.0f} s of the {args.budget_s:.0f} s budget spent")
            report["plugin"].append({"workers": workers, "skipped": "time budget"})
            continue
        report["plugin"].append(run_plugin(args.lib, args.palw_model, workers, out_dir, args.pytest_args))

    ran = [row for row in report["plugin"] if "wall_s" in row and row["rc"] == 0]
    smoke_case = report["smoke"]["median_case_s"]
    if ran:
        best = min(ran, key=lambda row: row["wall_s"])
        amortized = best["wall_s"] / best["cases"]
        report["best"] = {"workers": best["workers"], "wall_s": best["wall_s"],
                          "amortized_case_s": round(amortized, 4),
                          "speedup_per_case_amortized": round(smoke_case / amortized, 1),
                          "speedup_per_reject_case": (round(smoke_case / best["median_reject_case_s"], 1)
                                                      if best["median_reject_case_s"] else None),
                          "speedup_overall_projected": round(
                              report["smoke"]["projected_614_rejects_plus_positive_s"] / best["wall_s"], 1)}
        print(f"best: -n {best['workers']} {best['wall_s']} s for {best['cases']} cases; smoke "
              f"{smoke_case} s/case vs plugin {amortized:.4f} s/case amortized -> "
              f"{report['best']['speedup_per_case_amortized']}x; per reject case "
              f"{report['best']['speedup_per_reject_case']}x; 615 smoke runs projected "
              f"{report['smoke']['projected_614_rejects_plus_positive_s']} s -> "
              f"{report['best']['speedup_overall_projected']}x")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
