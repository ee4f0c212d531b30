"""What an installed pytest-palw costs a pytest run that does not use it.

Runs an unrelated one-test suite (a temporary directory) N times with the plugin autoloaded and N
times with ``-p no:palw``, alternating, and prints the median wall time and peak RSS of each and
their ratio. The plugin's budget is 5 % (a lazy entry point: the session, the runtime, numpy and
cffi load only when a run uses the suite).

    python benchmarks/bench_plugin_overhead.py [--runs 15]

Exit status 0 whatever the figures (it measures; tests/plugin/test_lazy_plugin.py checks what is
imported)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {"plugin": [], "no:palw": ["-p", "no:palw"]}


def one_run(suite: Path, extra: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one pytest process on ``suite``."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(suite)]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=suite, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_plugin_overhead: {' '.join(command)} failed:\n{output.decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each variant (median taken)")
    args = parser.parse_args(argv)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PALW_")}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="palw-overhead-") as directory:
        suite = Path(directory)
        (suite / "test_unrelated.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        for extra in VARIANTS.values():  # warm the file cache once each
            one_run(suite, extra, env)
        for _ in range(args.runs):
            for name, extra in VARIANTS.items():
                results[name].append(one_run(suite, extra, env))
    medians = {name: (statistics.median(w for w, _ in runs), statistics.median(m for _, m in runs))
               for name, runs in results.items()}
    print(f"unrelated one-test suite, {args.runs} runs each, median (python {sys.version.split()[0]})")
    print(f"{'variant':<10} {'wall s':>8} {'peak MiB':>9}")
    for name, (wall, rss) in medians.items():
        print(f"{name:<10} {wall:>8.3f} {rss:>9.1f}")
    ratio = medians["plugin"][0] / medians["no:palw"][0]
    print(f"overhead: {100 * (ratio - 1):+.1f} % wall, {medians['plugin'][1] - medians['no:palw'][1]:+.1f} MiB peak")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
