"""Where a certification's wall time went, read from its certificate alone (issue 32, item 6).

    python benchmarks/timeline.py CERTIFICATE.json [--bucket 2.0]

Prints, in seconds from the controller's process start:
- the controller's moments and each worker's (process start ... last case end), with its case
  count and case-seconds;
- case-seconds and case counts per module, with the median case;
- per time bucket, how many workers were in a case of each module (the "who shares the GPU when"
  view), so a family that waits behind another shows as a long, thin band.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_certify import CONTROLLER_MOMENTS, MOMENTS, timeline_table  # noqa: E402


def module_of(case: dict) -> str:
    return case["nodeid"].split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py").removeprefix("test_")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("certificate")
    parser.add_argument("--bucket", type=float, default=2.0, help="seconds per row of the band view")
    args = parser.parse_args(argv)
    document = json.loads(Path(args.certificate).read_text())
    controller = (document.get("workers") or {}).get("controller", {}).get("timeline", {})
    cases = [c for c in document["cases"] if c.get("started_at") and c.get("finished_at")]
    zero = controller.get("process_start") or min(c["started_at"] for c in cases)
    verdict = document["verdict"]
    ends = [c["finished_at"] for c in cases] + [controller.get("finished", 0)]
    print(f"{'CERTIFIED' if verdict['certified'] else 'not certified'} {verdict['passed']} of "
          f"{verdict['expected']}; controller start to finish {max(ends) - zero:.1f} s")

    rows = timeline_table(document, zero)
    print(f"{'worker':11}" + "".join(f"{m[:12]:>13}" for m in MOMENTS) + f"{'cases':>7}{'case_s':>8}")
    for row in rows:
        if row["worker"] == "controller":
            print("controller: " + ", ".join(f"{m} {row[m]:.2f}" for m in CONTROLLER_MOMENTS if m in row)
                  + (f"; {row['cases']} cases, {row['case_s']} case-s" if row["cases"] else ""))
            continue
        print(f"{row['worker']:11}" + "".join(f"{row.get(m, float('nan')):13.2f}" for m in MOMENTS)
              + f"{row['cases']:7d}{row['case_s']:8.1f}")

    by_module: dict[str, list[dict]] = defaultdict(list)
    for case in cases:
        by_module[module_of(case)].append(case)
    total = sum(c["duration_s"] for c in cases)
    print(f"\ncase-seconds {total:.1f} in {len(cases)} cases; per module (first start, last end):")
    order = sorted(by_module, key=lambda m: -sum(c["duration_s"] for c in by_module[m]))
    for module in order:
        group = by_module[module]
        seconds = [c["duration_s"] for c in group]
        first, last = min(c["started_at"] for c in group) - zero, max(c["finished_at"] for c in group) - zero
        print(f"  {module:28} {sum(seconds):7.1f} s {len(group):5d} cases  "
              f"median {statistics.median(seconds) * 1e3:7.1f} ms  {first:6.1f}-{last:6.1f}")

    shown = order[:8]
    print(f"\nworkers in a case, per {args.bucket:g} s (columns: " + ", ".join(
        f"{i}={m}" for i, m in enumerate(shown)) + ")")
    start = min(c["started_at"] for c in cases) - zero
    end = max(c["finished_at"] for c in cases) - zero
    t = args.bucket * int(start / args.bucket)
    while t < end:
        cells = []
        for module in shown:
            busy = sum(max(0.0, min(c["finished_at"] - zero, t + args.bucket) - max(c["started_at"] - zero, t))
                       for c in by_module[module])
            cells.append(f"{busy / args.bucket:5.1f}")
        print(f"  {t:6.1f}" + "".join(cells))
        t += args.bucket
    return 0


if __name__ == "__main__":
    sys.exit(main())
