"""The README's main job on CPU: `palw certify` warm, its wall time and peak memory (#32).

    python benchmarks/bench_main_job.py [--runs 5] [--workers N|auto] [--root CHECKOUT]
        [--python PY] [--out DIR] [--json OUT] [-- PALW CERTIFY ARGS]

Runs `palw certify` (``PY -m pytest_palw.cli certify``, in ``CHECKOUT``; default: this checkout and
this interpreter) ``--runs`` times, one after the other, after one warm-up run that is not counted
(it builds or restores what a first run needs). Per run: the wall time, the exit status, the peak
CPU seconds of the whole process tree (user + system of the process and of every child it waited for:
what the run costs the machine, whatever else runs beside it), the peak RSS of the whole process tree,
in two measures:

- ``max_rss_mib``: the largest RSS any one process of the tree reached (the kernel's own high-water
  mark, ``wait4``'s ``ru_maxrss``: pytest's process and, through it, every child it waited for);
- ``tree_rss_mib``: the largest sum of the RSS of every process of the tree at one moment, sampled
  every 20 ms from /proc (pages shared between processes, e.g. one mapped model file, count once
  per process: an upper bound of what the tree held).

From each certificate: the verdict, the counts, and the case-seconds (setup + call + teardown) per
module; of the last run, the ten slowest cases. Then the median, min and max of the wall times and
the peaks. `uptime` before and after says how loaded the machine was.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(child) for child in handle.read().split()]
        except OSError:
            pass
    return found


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


class TreeSampler(threading.Thread):
    """The largest sum of RSS over a process and its descendants, sampled until stopped."""

    def __init__(self, pid: int, interval: float = 0.02):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak, self.peak_processes = pid, interval, 0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            pending, seen, total = [self.pid], set(), 0
            while pending:
                pid = pending.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                total += _rss_bytes(pid)
                pending += _children(pid)
            if total > self.peak:
                self.peak, self.peak_processes = total, len(seen)
            self.done.wait(self.interval)


def module_seconds(document: dict) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for case in document.get("cases", []):
        seconds[case["nodeid"].split("::")[0]] += case.get("duration_s") or 0.0
    return {module: round(value, 2) for module, value in sorted(seconds.items(), key=lambda item: -item[1])}


def run_once(python: str, root: Path, certificate: Path, extra: list[str], log: Path) -> dict:
    argv = [python, "-m", "pytest_palw.cli", "certify", f"--certificate={certificate}", *extra]
    start = time.perf_counter()
    with open(log, "w") as handle:
        process = subprocess.Popen(argv, cwd=root, stdout=handle, stderr=subprocess.STDOUT)
        sampler = TreeSampler(process.pid)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        sampler.done.set()
        sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    row = {"wall_s": round(wall, 2), "rc": process.returncode, "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
           # Linux reports ru_maxrss in KiB: the largest of the process and the children it waited for.
           "max_rss_mib": round(usage.ru_maxrss / 1024, 1),
           "tree_rss_mib": round(sampler.peak / 2**20, 1), "tree_processes_at_peak": sampler.peak_processes}
    if certificate.is_file():
        document = json.loads(certificate.read_text())
        verdict = document["verdict"]
        row.update({"verdict": "CERTIFIED" if verdict["certified"] else "not certified",
                    "passed": verdict["passed"], "expected": verdict["expected"], "summary": document["summary"],
                    "case_s": round(sum(c.get("duration_s") or 0 for c in document.get("cases", [])), 2),
                    "module_case_s": module_seconds(document),
                    "slowest": sorted(((round(c.get("duration_s") or 0, 2), c["nodeid"])
                                       for c in document.get("cases", [])), reverse=True)[:10]})
    return row


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values)}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs first (default 1)")
    parser.add_argument("--workers", help="palw certify -n (default: none given)")
    parser.add_argument("--root", default=str(ROOT), help="the checkout to run in (default: this one)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with that checkout installed")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/palw-bench-main-job"))
    parser.add_argument("--json", help="write the report here too")
    parser.add_argument("certify_args", nargs="*", help="more `palw certify` arguments (after --)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    extra = (["-n", args.workers] if args.workers else []) + list(args.certify_args)
    commit = subprocess.run(["git", "-C", args.root, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    report = {"commit": commit, "root": args.root, "command": "palw certify " + " ".join(extra),
              "cpus": os.cpu_count(), "uptime_before": uptime(), "runs": []}
    print(f"{report['command']} at {commit} ({args.root}); {report['uptime_before']}", flush=True)
    for index in range(args.warmup + args.runs):
        counted = index >= args.warmup
        row = run_once(args.python, Path(args.root), out / f"certificate-{index}.json", extra,
                       out / f"certify-{index}.log")
        print(f"  {'run' if counted else 'warm-up'} {index}: {row['wall_s']:6.2f} s rc {row['rc']}, "
              f"{row['cpu_s']:6.2f} CPU-s, max RSS "
              f"{row['max_rss_mib']:.0f} MiB, tree RSS {row['tree_rss_mib']:.0f} MiB "
              f"({row['tree_processes_at_peak']} processes), {row.get('verdict')} {row.get('passed')}/"
              f"{row.get('expected')}, {row.get('case_s')} case-s", flush=True)
        if counted:
            report["runs"].append(row)
    runs = report["runs"]
    report["uptime_after"] = uptime()
    report["wall_s"] = spread([r["wall_s"] for r in runs])
    report["cpu_s"] = spread([r["cpu_s"] for r in runs])
    report["max_rss_mib"] = spread([r["max_rss_mib"] for r in runs])
    report["tree_rss_mib"] = spread([r["tree_rss_mib"] for r in runs])
    last = runs[-1]
    wall = report['wall_s']
    print(f"wall s: median {wall['median']} (min {wall['min']}, max {wall['max']}); "
          f"CPU s: median {report['cpu_s']['median']}; "
          f"max RSS MiB: median {report['max_rss_mib']['median']} (max {report['max_rss_mib']['max']}); tree RSS "
          f"MiB: median {report['tree_rss_mib']['median']} (max {report['tree_rss_mib']['max']})")
    print(f"case-seconds per module (last run, {last.get('case_s')} in all):")
    for module, seconds in (last.get("module_case_s") or {}).items():
        print(f"  {seconds:8.2f}  {module}")
    print("slowest cases (last run):")
    for seconds, nodeid in last.get("slowest") or []:
        print(f"  {seconds:8.2f}  {nodeid}")
    print(report["uptime_after"])
    if args.json:
        target = Path(args.json)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(report, indent=2) + "\n")
        os.replace(temporary, target)
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
