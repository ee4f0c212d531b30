"""Where a `palw build` compile's time goes, from its .ninja_log (issue 23, item 1).

    python benchmarks/build_profile.py BUILD_DIR/.ninja_log [--top 15]

Each ninja step's duration, grouped by what it compiles: ggml-cuda's template instances (the
flash-attention and mmq instance files under template-instances/), its other CUDA sources, the
CPU backend, ggml's base, llama's per-architecture graph builders (src/models/: the certification
needs qwen3 and qwen35moe of them) and the rest of llama, tools and tests, links. Prints the groups
(steps, summed seconds, share) and the longest steps; with N cores the wall time is at least
sum / N and at least the longest step.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

GROUPS = (  # first match wins
    ("fattn template instances", re.compile(r"template-instances/fattn")),
    ("mmq template instances", re.compile(r"template-instances/mmq")),
    ("mmf template instances", re.compile(r"template-instances/mmf")),
    ("other template instances", re.compile(r"template-instances/")),
    ("ggml-cuda fattn*.cu", re.compile(r"ggml-cuda/.*fattn[^/]*\.cu")),
    ("ggml-cuda other .cu", re.compile(r"ggml-cuda/.*\.cu")),
    ("PALW native runtime", re.compile(r"runtime-palw|producer_|record_codec")),
    ("ggml-cpu", re.compile(r"ggml-cpu")),
    ("ggml base", re.compile(r"ggml/src/CMakeFiles/ggml(-base)?\.dir/")),
    ("llama model architectures (src/models/)", re.compile(r"llama\.dir/models/")),
    ("llama other", re.compile(r"llama\.dir/")),
    ("tools, common, tests", re.compile(r"(tools|common|tests|examples)/")),
    ("links", re.compile(r"(^|/)bin/")),
)


def read_steps(log: Path) -> list[tuple[float, str]]:
    """(seconds, output) of each step of the last build the log records."""
    steps: dict[str, float] = {}
    for line in log.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _mtime, output, _hash = line.split("\t")
        steps[output] = (int(end) - int(start)) / 1000
    return sorted(((s, o) for o, s in steps.items()), reverse=True)


def group_of(output: str) -> str:
    return next((name for name, pattern in GROUPS if pattern.search(output)), "other")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    if not args.log.is_file():
        print(f"build_profile: no {args.log}: a cache hit or a restored archive has no compile to profile",
              file=sys.stderr)
        return 2
    steps = read_steps(args.log)
    total = sum(s for s, _ in steps)
    groups: dict[str, list[float]] = collections.defaultdict(list)
    for seconds, output in steps:
        groups[group_of(output)].append(seconds)
    print(f"{len(steps)} steps, {total:.0f} s summed")
    print("| group | steps | seconds | share |\n| --- | --- | --- | --- |")
    for name, values in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {name} | {len(values)} | {sum(values):.0f} | {100 * sum(values) / total:.0f} % |")
    print(f"\nlongest {args.top}:")
    for seconds, output in steps[:args.top]:
        print(f"  {seconds:7.1f} s  {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
