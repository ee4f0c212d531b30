#!/usr/bin/env bash
# How one reject case's latency grows with concurrent processes on one GPU (issue 23, item 2):
# N copies of bench_decode.py at once (N = $COPIES, default "1 2 4 8"), each its own CUDA context,
# as N xdist workers are. Prints a table of the reject case's and the traced case's median per N.
#
#   bash benchmarks/bench_contention.sh MANIFEST MODEL
set -uo pipefail
cd "$(dirname "$0")/.."
manifest=$1 model=$2 out=${OUT:-/tmp/palw-contention}; mkdir -p "$out"
echo "| processes | reject case median ms (each process) | traced case median ms (each process) | wall s |"
echo "| --- | --- | --- | --- |"
for n in ${COPIES:-1 2 4 8}; do
  start=$(date +%s.%N)
  for i in $(seq 1 "$n"); do
    python3 benchmarks/bench_decode.py --lib "$manifest" --model "$model" --repeat 20 \
        --json "$out/n$n-$i.json" > "$out/n$n-$i.log" 2>&1 &
  done
  wait
  wall=$(python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.1f}')" "$start")
  python3 - "$out" "$n" "$wall" <<'PY'
import json, sys
out, n, wall = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = []
for i in range(1, n + 1):
    try:
        rows.append(json.load(open(f"{out}/n{n}-{i}.json")))
    except (OSError, ValueError):
        pass
reject = " ".join(f"{r['reject_case']['median_ms']:.1f}" for r in rows) or "failed"
traced = " ".join(f"{r['traced_case']['median_ms']:.1f}" for r in rows) or "failed"
print(f"| {n} | {reject} | {traced} | {wall} |")
PY
done
