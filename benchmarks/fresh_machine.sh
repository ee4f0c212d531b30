#!/usr/bin/env bash
# A vendor's CI gate on a fresh GPU machine, as one command with a table (issue 23's goals):
#   build + first certify (goal <= 180 s wall), warm certify (<= 15 s), one reject case alone (<= 15 ms).
#
#   bash benchmarks/fresh_machine.sh [--source ARCHIVE] [--cache-from DIR] [--workers N]
#
# Runs the README's GPU commands with an empty pytest-palw cache ($FRESH_CACHE, default a new temp
# dir), so nothing earlier on this machine helps: `palw build --model profile:full` synthesizes the
# model beside the build and compiles the binding and test-backend-ops, as a user's job does it. --cache-from DIR restores a `palw build --cache-to` archive instead of compiling
# (what a CI gate caches). Prints a Markdown table; writes it and the certificates to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
SOURCE=(); CACHE_FROM=(); WORKERS=8
while [ $# -gt 0 ]; do case $1 in
  --source) SOURCE=(--source "$2"); shift 2;;
  --cache-from) CACHE_FROM=(--cache-from "$2"); shift 2;;
  --workers) WORKERS=$2; shift 2;;
  *) echo "fresh_machine.sh: unknown option $1 (see the header)" >&2; exit 2;;
esac; done
export PALW_CACHE_DIR=${FRESH_CACHE:-$(mktemp -d /tmp/palw-fresh.XXXX)}
OUT=${OUT:-/tmp/palw-fresh-out}; mkdir -p "$OUT"
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }
verdict() { python3 -c "import json,sys; v=json.load(open(sys.argv[1]))['verdict']; f=json.load(open(sys.argv[1]))['fingerprints']; \
print(('CERTIFIED' if v['certified'] else 'not certified') + f\" {v['passed']}/{v['expected']}, v2 {f.get('v2')}\")" "$1" 2>/dev/null \
  || echo "no certificate"; }
rows=()
t0=$(now)
t=$(now); palw build --variant cuda --model profile:full "${SOURCE[@]}" "${CACHE_FROM[@]}" --print-manifest \
    > "$OUT/build.log" 2>&1
rc=$?; rows+=("| palw build --variant cuda --model profile:full ${CACHE_FROM[*]} | $(since "$t") | rc=$rc $(grep -o 'cache hit\|restored\|built the cuda runtime in [0-9]* s' "$OUT/build.log" | head -n 1); $(sed -n 's/^palw: prepared \(.*\) in \([0-9.]*\) s.*/\1 \2 s/p' "$OUT/build.log" | tr '\n' ';') |")
t=$(now); palw certify --model profile:full -n "$WORKERS" --require-certified --certificate "$OUT/first.json" \
    > "$OUT/first.log" 2>&1; rc=$?
rows+=("| first palw certify | $(since "$t") | rc=$rc $(verdict "$OUT/first.json") |")
rows+=("| **build + first certify** | **$(since "$t0")** | goal <= 180 s |")
t=$(now); palw certify --model profile:full -n "$WORKERS" --require-certified --certificate "$OUT/warm.json" \
    > "$OUT/warm.log" 2>&1; rc=$?
rows+=("| **warm palw certify** | **$(since "$t")** | rc=$rc $(verdict "$OUT/warm.json"); goal <= 15 s |")
manifest=$(tail -n 1 "$OUT/build.log")
model=$(python3 -c "from pytest_palw.preflight.resolve import resolve_model; print(resolve_model('profile:full').path)")
python3 benchmarks/bench_decode.py --lib "$manifest" --model "$model" --repeat 20 --json "$OUT/decode.json" \
    > "$OUT/decode.log" 2>&1
reject=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['reject_case']; print(f\"{r['median_ms']:.1f} ms median, p90 {r['p90_ms']:.1f}\")" \
    "$OUT/decode.json" 2>/dev/null || echo "no result (see $OUT/decode.log)")
rows+=("| **one reject case alone** (bench_decode, index 180) | | $reject; goal <= 15 ms |")
{ echo "| step | wall s | result |"; echo "| --- | --- | --- |"; printf '%s\n' "${rows[@]}"; } | tee "$OUT/table.md"
