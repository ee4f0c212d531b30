#!/usr/bin/env bash
# How one reject case's latency grows with concurrent processes on one GPU (issue 23, item 2):
# N copies of bench_decode.py at once (N = $COPIES, default "1 2 4 8"), each its own CUDA context,
# as N xdist workers are, without a limit and with the plugin's GPU slots (S = $SLOTS, default
# "0 2": at most S processes hold a context at once, --palw-gpu-slots). Prints a table of the reject
# case's and the traced case's median per process and the reject cases per second of all processes.
#
#   bash benchmarks/bench_contention.sh MANIFEST MODEL
set -uo pipefail
cd "$(dirname "$0")/.."
manifest=$1 model=$2 out=${OUT:-/tmp/palw-contention}; mkdir -p "$out"
echo "| slots | processes | reject case median ms (each process) | reject cases/s, all | on a reused context: median ms (each process) | traced case median ms (each process) | wall s |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for slots in ${SLOTS:-0 2}; do
for n in ${COPIES:-1 2 4 8}; do
  (( slots > 0 && n <= slots )) && continue  # the same run as without a limit
  start=$(date +%s.%N)
  for i in $(seq 1 "$n"); do
    python3 benchmarks/bench_decode.py --lib "$manifest" --model "$model" --repeat 20 --gpu-slots "$slots" \
        --member "$i" --json "$out/s$slots-n$n-$i.json" > "$out/s$slots-n$n-$i.log" 2>&1 &
  done
  wait
  wall=$(python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.1f}')" "$start")
  python3 - "$out" "$slots" "$n" "$wall" <<'PY'
import json, sys
out, slots, n, wall = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = []
for i in range(1, n + 1):
    try:
        rows.append(json.load(open(f"{out}/s{slots}-n{n}-{i}.json")))
    except (OSError, ValueError):
        pass
reject = " ".join(f"{r['reject_case']['median_ms']:.1f}" for r in rows) or "failed"
per_s = f"{sum(r['reject_cases_per_s'] for r in rows):.0f}" if rows else "failed"
traced = " ".join(f"{r['traced_case']['median_ms']:.1f}" for r in rows) or "failed"
reused = " ".join(f"{r['reused_context']['reject_case']['median_ms']:.1f}" for r in rows) or "failed"
print(f"| {slots or 'no limit'} | {n} | {reject} | {per_s} | {reused} | {traced} | {wall} |")
PY
done
done
