#!/usr/bin/env bash
# One device call (nvidia-h200, no network), with the README's GPU commands as a user types them:
#   palw build --variant cuda      (offline: --source the carried `palw source` archive)
#   palw certify --model profile:full -n N --require-certified
# plus the acceptance evidence around them (seed smoke fingerprints, goldens, benchmarks).
# No LD_PRELOAD, no --lib, the image's own CC/CXX/CUDAHOSTCXX (static-libstdc++ wrappers there).
#
#   carry: .carry (whl/ wheels, palw-source.tar.gz; optionally build/ parts from pack_build)
#   run:   bash benchmarks/device_session.sh [STEP...]   (default: every step, in order)
#
# Each step is time-boxed and logged; a failing step does not stop the later ones, so one call
# returns every result it could get. STOP_AT (seconds since start) skips the late steps.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/palw-out}; RES=/tmp/palw-results; mkdir -p "$OUT" "$RES"
START=$(date +%s); STOP_AT=${STOP_AT:-570}; VENDOR=/root/.cache/vendor
export PYTHONUNBUFFERED=1 PALW_CACHE_DIR=/root/.cache/pytest-palw
# The image sets PYTHONDONTWRITEBYTECODE=1: every process would compile pytest, the plugin and the
# suite (assertion rewriting too) from source again. A user's machine writes bytecode by default;
# certify_nopyc measures the image's way (the figures up to 2026-12-07 were taken so).
unset PYTHONDONTWRITEBYTECODE
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "== [$(elapsed)s] $*" | tee -a "$RES/steps.log"; }
pack() { cp "$RES/steps.log" "$OUT/steps.log"; tar czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null; }
ONLY=" $* "
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  if [ "$ONLY" != "  " ] && [[ "$ONLY" != *" $name "* ]] && [[ " setup build " != *" $name "* ]]; then
    return 0; fi
  local left=$(( STOP_AT - $(elapsed) ))
  if (( left < 15 )); then log "$name: skipped (time)"; return 0; fi
  (( limit > left )) && limit=$left
  local t0=$(date +%s)
  timeout -s INT -k 30 "$limit" bash -c '"$@"' _ "$@" > "$RES/$name.log" 2>&1; local rc=$?
  log "$name: rc=$rc in $(( $(date +%s) - t0 ))s"; tail -n 6 "$RES/$name.log" | sed 's/^/   /' | tee -a "$RES/steps.log"
  pack; return $rc
}

setup() {  # the wheels compiled at install, as a user's pip does (every process imports their bytecode)
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade \
      --target /tmp/site .carry/whl/*.whl || return 1
  python3 -m pip install -q --no-deps --no-build-isolation --no-index --break-system-packages -e . \
      || return 1
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  echo "CC=${CC-} CXX=${CXX-} CUDAHOSTCXX=${CUDAHOSTCXX-}"; command -v palw python3 nvcc
  PYTHONPATH=/tmp/site python3 -c "import pytest, xdist, syrupy; print('pytest', pytest.__version__, 'xdist', xdist.__version__)"
  env | grep -E '^PYTHON' || true
}
startup() {  # what each pytest process pays before its first case: the image's autoloaded plugins
  for autoload in on off; do
    local env=() plugins=(); [ $autoload = off ] && env=(PYTEST_DISABLE_PLUGIN_AUTOLOAD=1) \
        plugins=(-p pytest_palw.plugin -p xdist.plugin -p syrupy)
    local t0=$(date +%s%N)
    env "${env[@]}" python3 -m pytest "${plugins[@]}" --co -q -p no:cacheprovider conformance --palw-model=profile:full 2>&1 | tail -n 1
    echo "pytest --co conformance, autoload $autoload: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  done
  python3 -m pytest --version -VV 2>&1 | head -n 3
  python3 -X importtime -m pytest --co -q -p no:cacheprovider conformance 2>"$RES/importtime.txt" >/dev/null
  sort -t'|' -k2 -n "$RES/importtime.txt" | tail -n 25
}
build() {  # the README's command; the archive stands in for the PyPI download (no network)
  if [ -d .carry/build ]; then  # a build an earlier call packed (pack_build): then this is a cache hit
    cat .carry/build/palw-build.tgz.* | tar xzf - -C / || return 1
  fi
  palw build --variant cuda --source .carry/palw-source.tar.gz --print-manifest
}
structure() {  # what the build's C++ runtime check recorded, and the raw facts behind it
  python3 - "$MANIFEST" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print("pinned_cc", m["pinned_cc"], "cuda_arch", m["cuda_arch"], "build_seconds", m["build_seconds"])
print(json.dumps(m["cxx_runtime"], indent=1)); print(json.dumps(m["tools"], indent=1))
PY
  for lib in "$LIBDIR"/*.so; do echo "$(basename "$lib"): $(readelf -d "$lib" | grep -c 'NEEDED.*libstdc++') NEEDED libstdc++, $(nm -D --defined-only "$lib" | grep -c ' _ZNS') exported _ZNS"; done
}
smoke() { "$SMOKE" --model "$MODEL" "$@"; }
smoke_acceptance() {
  local mixed=(--mixed --q4-cubin-sha256 $DIGEST --q6-cubin-sha256 $DIGEST --qk-cubin-sha256 $DIGEST
      --softmax-cubin-sha256 $DIGEST --pv-cubin-sha256 $DIGEST)
  echo "legacy:"; smoke --kernel-binary-sha256 $DIGEST | tail -n 1
  echo "mixed run 1:"; smoke "${mixed[@]}" | tail -n 1
  echo "mixed run 2:"; smoke "${mixed[@]}" | tail -n 1
  for k in 0 180 360; do echo "mixed reject $k:"; smoke "${mixed[@]}" --reject-index $k | tail -n 1; done
}
goldens() {  # records the device goldens (one process: syrupy's update sees every golden case)
  python3 -m pytest conformance/test_golden_streams.py --palw-model=profile:full -q -p no:cacheprovider \
      --snapshot-update --snapshot-no-cleanup -rA && cp -r fixtures/goldens "$RES/"
}
new_cases() {  # cases that never ran on a GPU ($NEW_CASES, default: this session's modules), verbose
  python3 -m pytest ${NEW_CASES:-conformance/test_device_pin.py conformance/test_backend_ops.py \
      conformance/test_tool_gates.py conformance/test_class_oracle.py} --palw-model=profile:full \
      -p no:cacheprovider -q -rfE -n "${WORKERS:-8}" --durations=8 --palw-certificate "$RES/new-cases.json"
}
native_selftest() {  # native/tests/producer_selftest.cu by its header's build line, for this GPU
  local arch; arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
  local runtime=native/runtime-palw/cuda
  nvcc -std=c++17 -O2 -gencode "arch=compute_$arch,code=sm_$arch" -I $runtime native/tests/producer_selftest.cu \
      $runtime/producer_accumulator.cu $runtime/producer_contract.cpp $runtime/record_codec.cpp \
      -o /tmp/producer_selftest && /tmp/producer_selftest
}
native_e2e() {  # native/tests/ggml_trace_e2e.sh on this build's ggml (no standalone ggml build)
  GGML_LIB_DIR="$LIBDIR" native/tests/ggml_trace_e2e.sh "$(dirname "$MANIFEST")/source"
}
bench_decode() {
  python3 benchmarks/bench_decode.py --lib "$MANIFEST" --model "$MODEL" --repeat 20 \
      --json "$RES/bench_decode.json" --profile "$RES/reject.prof" --threads "${BENCH_THREADS:-1,2,4}"
}
certify() {  # the README's certification command, timed; the certificate comes back
  local t0=$(date +%s%N) name=${CERT:-certificate}
  palw certify --model profile:full -n "${WORKERS:-8}" --require-certified \
      --certificate "$RES/$name.json" "$@" -- -p no:cacheprovider; local rc=$?
  echo "palw certify $*: rc=$rc wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  verdict_line "$RES/$name.json"; return $rc
}
certify_warm() { CERT=certificate-warm certify; }
certify_nopyc() {  # the warm command as the figures up to 2026-12-07 ran it: no bytecode read or written
  PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX=/tmp/palw-no-pyc CERT=certificate-nopyc certify
}  # the same command again: the warm figure and its timeline
vendor_build() {  # #29: the patched tree built with plain cmake (no palw build); libraries + tools in one directory
  local src arch; src="$(dirname "$MANIFEST")/source"
  if [ ! -d "$src" ]; then  # no palw build in this call: the carried `palw source` tree (seed-patched)
    rm -rf /root/.cache/vendor-src && mkdir -p /root/.cache/vendor-src
    tar xzf .carry/palw-source.tar.gz -C /root/.cache/vendor-src && src=/root/.cache/vendor-src/palw-source/llama.cpp
  fi
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
  local t0=$(date +%s)
  cmake -S "$src" -B /root/.cache/vendor-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DGGML_CUDA=ON -DGGML_CUDA_FA=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_CUDA_PALW_TRACE=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
      -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--exclude-libs,libstdc++.a:libsupc++.a" \
      -DPALW_CUDA_RUNTIME_DIR="$PWD/native/runtime-palw/cuda" -DPALW_CUDA_PINNED_CC="${arch}0" || return 1
  nice -n 10 cmake --build /root/.cache/vendor-build -j "$(nproc)" \
      --target llama ggml llama-palw-observer llama-palw-mmvq-smoke | tail -n 3 || return 1
  rm -rf "$VENDOR" && mkdir -p "$VENDOR"
  for f in /root/.cache/vendor-build/bin/*; do case $(basename "$f") in
      libllama.so*|libggml*|llama-palw-observer|llama-palw-mmvq-smoke) cp -a "$f" "$VENDOR/";; esac; done
  echo "plain cmake build: $(( $(date +%s) - t0 )) s"; ls -la "$VENDOR"; sha256sum "$VENDOR"/lib*
}
vendor_wait() {  # the background vendor_build of this call
  while [ ! -f "$RES/vendor_build.rc" ]; do sleep 2; done
  tail -n 20 "$RES/vendor_build.log"; return "$(cat "$RES/vendor_build.rc")"
}
certify_brought() {  # #29: the plain-cmake libraries, no manifest anywhere above them
  CERT=certificate-brought certify --lib "$VENDOR" --runtime-headers native/runtime-palw/cuda \
      --source .carry/palw-source.tar.gz; local rc=$?
  python3 - "$RES/certificate-brought.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); r = d.get("runtime") or {}
print("origin", r.get("origin"), "pinned_cc", d.get("pinned_cc"), "pin", r.get("pin"), "absent", r.get("absent"))
print("cxx_runtime_ok", r.get("cxx_runtime_ok"), "variant", r.get("variant"), "tools", r.get("tools"))
for path, digest in (r.get("libraries") or {}).items(): print(" ", digest, path)
PY
  return $rc
}
runtime_dir_mutant() {  # #29: a vendor's producer through `palw build --runtime-dir`, with one catalog mutant in it
  local rt=/root/.cache/rt-mutant name=${RT_MUTANT:-records-swapped}
  rm -rf "$rt" && cp -r native/runtime-palw/cuda "$rt" || return 1
  python3 - "$rt" "$name" <<'PY' || return 1
import sys
from pathlib import Path
from pytest_palw.mutants.catalog import MUTANTS
m = next(m for m in MUTANTS if m.name == sys.argv[2]); assert m.root == "native", m
f = Path(sys.argv[1]) / m.path; text = f.read_text(); assert text.count(m.old) == 1
f.write_text(text.replace(m.old, m.new)); print("mutant", m.name, "applied to", f, "-", m.claim)
PY
  local t0=$(date +%s)
  palw build --variant cuda --runtime-dir "$rt" --source .carry/palw-source.tar.gz --print-manifest > "$RES/rt-build.out" 2>&1
  local rc=$?; tail -n 3 "$RES/rt-build.out"; echo "palw build --runtime-dir: rc=$rc in $(( $(date +%s) - t0 )) s"
  (( rc == 0 )) || return 1
  local manifest; manifest=$(tail -n 1 "$RES/rt-build.out")
  CERT=certificate-rt-mutant certify --lib "$manifest"; rc=$?
  python3 - "$RES/certificate-rt-mutant.json" "$RES/certificate.json" <<'PY'
import json, sys
new = json.load(open(sys.argv[1])); r = new.get("runtime") or {}
try: old = (json.load(open(sys.argv[2])).get("runtime") or {})
except OSError: old = {}
print("origin", r.get("origin"), "key", (r.get("manifest") or {}).get("key"), "default key", (old.get("manifest") or {}).get("key"))
print("producer", json.dumps(r.get("producer")), "default producer", json.dumps(old.get("producer")))
failed = [c["id"] for c in new.get("cases") or [] if c.get("outcome") not in ("passed", "skipped")]
print("failed cases:", len(failed), "first:", failed[:5]); print("verdict", json.dumps(new.get("verdict"))[:600])
PY
  echo "killed: certify rc=$rc (non-zero = the mutant is killed)"; (( rc != 0 ))
}
pack_vendor() {  # the plain-cmake libraries, for a later call
  tar czf /tmp/vendor.tgz -C / "${VENDOR#/}" && mkdir -p "$OUT/vendor" && split -b 15M /tmp/vendor.tgz "$OUT/vendor/vendor.tgz."
  ls -la "$OUT/vendor"
}
verdict_line() {  # VERDICT JSON: the three lines a note quotes
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); v = d["verdict"]
print("verdict:", "CERTIFIED" if v["certified"] else "not certified", f"{v['passed']} of {v['expected']} expected",
      "exit_status", d.get("exit_status"), "inventory", (d.get("inventory") or {}).get("sha256", "")[:16],
      "suite", (d.get("suite") or {}).get("sha256", "")[:16])
for reason in v["reasons"][:6]: print("  reason:", reason[:300])
print("  fingerprints:", json.dumps(d.get("fingerprints")))
PY
}
certify_setup_plan() {  # the issue's route: nothing runs, so nothing may be certified
  palw certify --model profile:full -n "${WORKERS:-8}" --require-certified \
      --certificate "$RES/certificate-setup-plan.json" -- -p no:cacheprovider --setup-plan > "$RES/setup-plan.out" 2>&1
  local rc=$?; tail -n 3 "$RES/setup-plan.out"; echo "palw certify -- --setup-plan: rc=$rc"
  verdict_line "$RES/certificate-setup-plan.json"; [ $rc -ne 0 ]
}
certify_killed() {  # one xdist worker killed (SIGKILL) while the suite runs: never CERTIFIED
  palw certify --model profile:full -n "${WORKERS:-8}" --require-certified \
      --certificate "$RES/certificate-killed.json" -- -p no:cacheprovider > "$RES/killed.out" 2>&1 &
  local pid=$! victim="" i
  for i in $(seq 1 120); do  # once the cases run (10 s in), the first worker
    sleep 0.5; victim=$(pgrep -f 'exec\(eval\(sys.stdin' | head -n 1)
    [ -n "$victim" ] && (( i >= 20 )) && break
  done
  echo "killing worker pid $victim at $((i / 2)) s"; kill -9 "$victim"
  wait $pid; local rc=$?; tail -n 3 "$RES/killed.out"; echo "palw certify with a killed worker: rc=$rc"
  verdict_line "$RES/certificate-killed.json"; [ $rc -ne 0 ]
}
mutants() {  # the GPU mutants named in $MUTANTS (default all), each judged by the whole GPU tier
  local budget=$(( STOP_AT - $(elapsed) - 25 )) only=()
  [ -n "${MUTANTS:-}" ] && only=(--only $MUTANTS)
  timeout -s INT -k 20 "$budget" palw mutants --tier gpu --lib "$MANIFEST" --workers "${WORKERS:-8}" \
      --timeout 150 "${only[@]}" --out "$RES/mutants" --json "$RES/mutants-${MUTANTS_LABEL:-all}.json"
}
pack_build() {  # the finished build (no objects), in 15 MB parts: a later call can carry it back
  local key; key=$(basename "$(dirname "$MANIFEST")")
  tar czf /tmp/palw-build.tgz --exclude='*.o' --exclude='*.a' --exclude='CMakeFiles' \
      -C / "root/.cache/pytest-palw/builds/$key" root/.cache/pytest-palw/sources
  mkdir -p "$OUT/build" && split -b 15M /tmp/palw-build.tgz "$OUT/build/palw-build.tgz."
  ls -la "$OUT/build"
}
contention() {  # benchmarks/bench_contention.sh: a reject case's latency with 1..8 processes on one GPU
  OUT="$RES/contention" bash benchmarks/bench_contention.sh "$MANIFEST" "$MODEL"
}
slow_case() {  # the longest single case of a warm run, alone, with its phases
  python3 -m pytest "conformance/test_misuse.py::test_state_imported" --palw-model=profile:full -p no:cacheprovider \
      -q --durations=0 --setup-show 2>&1 | tail -n 30
}
carry_to() {  # the build's `--cache-to` archive (what a CI gate caches), for fresh_machine
  palw build --variant cuda --source .carry/palw-source.tar.gz --cache-to /tmp/palw-carry && ls -la /tmp/palw-carry
}
fresh_machine() {  # issue 23's table: an empty cache, the build restored from carry_to's archive
  OUT="$RES/fresh" bash benchmarks/fresh_machine.sh --source .carry/palw-source.tar.gz --cache-from /tmp/palw-carry \
      --workers "${WORKERS:-8}"
}
build_profile() {  # issue 23 item 1: which of the build's steps take its time (the fresh compile's .ninja_log)
  python3 benchmarks/build_profile.py "$(dirname "$MANIFEST")/build/.ninja_log"
}
certify_slots() {  # warm certifications per "slots:workers" of $SLOT_RUNS (--palw-gpu-slots, -n), each timed
  local run rc=0
  for run in ${SLOT_RUNS:-2:8 0:8 3:8 2:4}; do
    local slots=${run%%:*} workers=${run##*:} t0=$(date +%s%N)
    PALW_GPU_SLOTS=$slots palw certify --model profile:full -n "$workers" --require-certified \
        --certificate "$RES/certificate-s$slots-n$workers.json" -- -p no:cacheprovider > "$RES/certify-s$slots-n$workers.out" 2>&1 || rc=1
    echo "slots $slots, -n $workers: wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    verdict_line "$RES/certificate-s$slots-n$workers.json" | head -n 1
  done
  return $rc
}
timeline() {  # benchmarks/timeline.py on the warm certificate: who shared the GPU when
  python3 benchmarks/timeline.py "$RES/${CERT:-certificate-warm}.json" --bucket "${BUCKET:-2}"
}
reject_family() {  # the 614 reject cases alone, per "slots:workers" of $REJECT_RUNS, each timed
  local run rc=0
  for run in ${REJECT_RUNS:-2:8 4:8 2:16 0:8}; do
    local slots=${run%%:*} workers=${run##*:} t0=$(date +%s%N) cert="$RES/reject-s${run%%:*}-n${run##*:}.json"
    PALW_GPU_SLOTS=$slots python3 -m pytest conformance/test_reject_index.py -k "reject_v" --palw-model=profile:full \
        -p no:cacheprovider -q -n "$workers" --palw-certificate "$cert" > "$cert.out" 2>&1 || rc=1
    echo "reject family, slots $slots, -n $workers: wall $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(tail -n 1 "$cert.out")"
    python3 benchmarks/timeline.py "$cert" | sed -n '/per module/,/^$/p' | head -n 3
  done
  return $rc
}
spread() {  # benchmarks/spread_order.py: the warm run's case-seconds dealt evenly over the workers, per order
  local order
  for order in ${SPREAD_ORDERS:-longest interleave plain}; do
    local extra=() t0=$(date +%s%N) cert="$RES/certificate-spread-$order.json"
    [ "$order" != plain ] && extra=(-p spread_order)
    SPREAD_FROM="$RES/certificate-warm.json" SPREAD_ORDER=$order PYTHONPATH="$PWD/benchmarks:${PYTHONPATH:-}" \
        palw certify --model profile:full -n "${WORKERS:-8}" --certificate "$cert" -- -p no:cacheprovider "${extra[@]}" \
        > "$cert.out" 2>&1
    echo "order $order: rc=$? wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    python3 benchmarks/timeline.py "$cert" | sed -n '1p;/per module/,/^$/p' | head -n 7
  done
}
reuse() {  # benchmarks/reuse_context.py: the reject cases on one context per process (a claim change, timed)
  local run
  for run in ${REUSE_RUNS:-alone spread family}; do
    local extra=(-p reuse_context) t0=$(date +%s%N) cert="$RES/certificate-reuse-$run.json"
    [ "$run" = spread ] && extra+=(-p spread_order)
    if [ "$run" = family ]; then
      PYTHONPATH="$PWD/benchmarks:${PYTHONPATH:-}" python3 -m pytest conformance/test_reject_index.py -k "reject_v" \
          --palw-model=profile:full -p no:cacheprovider -q -n "${WORKERS:-8}" "${extra[@]}" --palw-certificate "$cert" \
          > "$cert.out" 2>&1
    else
      SPREAD_FROM="$RES/certificate-warm.json" SPREAD_ORDER=longest PYTHONPATH="$PWD/benchmarks:${PYTHONPATH:-}" \
          palw certify --model profile:full -n "${WORKERS:-8}" --certificate "$cert" -- -p no:cacheprovider \
          "${extra[@]}" > "$cert.out" 2>&1
    fi
    echo "reuse $run: rc=$? wall $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(tail -n 1 "$cert.out")"
    python3 - "$cert" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); cases = d.get("cases") or []
bad = [c["nodeid"] for c in cases if c.get("outcome") not in ("passed", "skipped")]
print("  not passed:", len(bad), bad[:4])
PY
    python3 benchmarks/timeline.py "$cert" | sed -n '1p;/per module/,/^$/p' | head -n 7
  done
}
preload() {  # benchmarks/preload.py: each worker loads the runtime, the model and the discovery beside its collection
  local run
  for run in ${PRELOAD_RUNS:-preload preload+reuse}; do
    local extra=(-p preload) t0=$(date +%s%N) cert="$RES/certificate-$run.json"
    [ "$run" = preload+reuse ] && extra+=(-p reuse_context)
    PYTHONPATH="$PWD/benchmarks:${PYTHONPATH:-}" palw certify --model profile:full -n "${WORKERS:-8}" \
        --certificate "$cert" -- -p no:cacheprovider "${extra[@]}" > "$cert.out" 2>&1
    echo "$run: rc=$? wall $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(tail -n 1 "$cert.out")"
    python3 benchmarks/timeline.py "$cert" | sed -n '1,12p;/per module/,/^$/p' | head -n 20
  done
}
lanes() {  # benchmarks/lanes.py: the reject cases in dedicated workers, per "lane workers:slots[:s]" of
  local run  # $LANE_RUNS (":s": strict, LANE_STRICT=1: no other worker takes a reject case)
  for run in ${LANE_RUNS:-0:2 1:1:s 1:2:s 2:2:s 1:2}; do
    local nodes=${run%%:*} rest=${run#*:} strict=0
    local slots=${rest%%:*}; [[ "$run" == *:s ]] && strict=1
    local t0=$(date +%s%N) cert="$RES/certificate-lanes-${run//:/-}.json"
    rm -rf "$RES/slots-${run//:/-}"
    LANE_NODES=$nodes LANE_STRICT=$strict PALW_GPU_SLOTS=$slots SLOT_TIMES="$RES/slots-${run//:/-}" \
        PYTHONPATH="$PWD/benchmarks:${PYTHONPATH:-}" \
        palw certify --model profile:full -n "${WORKERS:-8}" --certificate "$cert" -- -p no:cacheprovider -p lanes \
        > "$cert.out" 2>&1
    echo "lanes $nodes, slots $slots, strict $strict: rc=$? wall $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(tail -n 1 "$cert.out")"
    python3 benchmarks/timeline.py "$cert" | sed -n '1p;/per module/,/^$/p' | head -n 6
    python3 - "$RES/slots-${run//:/-}" <<'PY'
import json, statistics, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    t = json.loads(path.read_text()); w, h = t["wait"], t["hold"]
    if w:
        print(f"  {path.stem}: {len(w)} takes, wait {sum(w):.1f} s (median {statistics.median(w)*1e3:.1f} ms), "
              f"hold {sum(h):.1f} s (median {statistics.median(h)*1e3:.1f} ms)")
PY
  done
}
lookahead() {  # warm certifications per --palw-lookahead count of $THREAD_RUNS ("N" or "N:spread"), each timed
  local run rc=0
  for run in ${THREAD_RUNS:-4 0 8 2}; do
    local threads=${run%%:*} extra=() t0=$(date +%s%N) cert="$RES/certificate-lookahead-${run//:/-}.json"
    [[ "$run" == *:spread ]] && extra+=(-p spread_order)
    PALW_LOOKAHEAD=$threads SPREAD_FROM="$RES/certificate-warm.json" SPREAD_ORDER=longest \
        PYTHONPATH="$PWD/benchmarks:${PYTHONPATH:-}" palw certify --model profile:full -n "${WORKERS:-8}" \
        --certificate "$cert" -- -p no:cacheprovider "${extra[@]}" > "$cert.out" 2>&1 || rc=1
    echo "lookahead $run: wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    verdict_line "$cert" | head -n 3
    python3 benchmarks/timeline.py "$cert" | sed -n '/per module/,/^$/p' | head -n 5
  done
  return $rc
}
bench_certify() {
  python3 benchmarks/bench_certify.py --lib "$MANIFEST" --model "$MODEL" --workers "${BENCH_WORKERS:-8,12,16}" \
      --budget-s $(( STOP_AT - $(elapsed) - 20 )) --out "$RES" --json "$RES/bench_certify.json"
}

command -v palw >/dev/null || palw() { python3 -m pytest_palw.cli "$@"; }
export -f palw 2>/dev/null
export -f elapsed setup startup build structure smoke smoke_acceptance goldens new_cases native_selftest native_e2e
export -f bench_decode certify pack_build bench_certify verdict_line certify_setup_plan certify_killed mutants
export -f certify_warm certify_nopyc vendor_build vendor_wait certify_brought pack_vendor runtime_dir_mutant
export VENDOR
export -f carry_to fresh_machine contention slow_case certify_slots build_profile timeline reject_family spread reuse preload lanes lookahead
export RES OUT START STOP_AT
log "start $(hostname) $(nproc) cores"
step setup 120 setup || { log "setup failed: nothing else can run"; pack; exit 1; }
export PYTHONPATH=/tmp/site
palw models generate --profile full > "$RES/model.log" 2>&1 &  # beside the build
MODEL_PID=$!
if [ -d .carry/vendor ]; then  # plain-cmake libraries an earlier call packed (pack_vendor): no build needed
  cat .carry/vendor/vendor.tgz.* | tar xzf - -C / && log "vendor libraries restored: $(ls "$VENDOR" | tr '\n' ' ')"
  echo 0 > "$RES/vendor_build.rc"; echo "restored from .carry/vendor" > "$RES/vendor_build.log"
fi
[ -n "${NO_BUILD:-}" ] || step build 420 build
MANIFEST=$(tail -n 1 "$RES/build.log" 2>/dev/null); LIBDIR=$(dirname "$MANIFEST")/build/bin
wait $MODEL_PID; log "model: rc=$? $(tail -n 1 "$RES/model.log")"
MODEL=$(tail -n 1 "$RES/model.log" | awk '{print $2}')
SMOKE=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['outputs']['tools']['smoke'])" "$MANIFEST" 2>/dev/null)
DIGEST=$(sha256sum "$LIBDIR/libggml-cuda.so" 2>/dev/null | cut -c1-64)  # the plugin hashes the same file, mapped
export MANIFEST LIBDIR MODEL SMOKE DIGEST
log "manifest=$MANIFEST model=$MODEL digest=$DIGEST"
if [[ "$ONLY" == *" vendor_wait "* ]] && [ ! -f "$RES/vendor_build.rc" ]; then  # beside the first steps: the plain-cmake build (#29)
  (vendor_build > "$RES/vendor_build.log" 2>&1; echo $? > "$RES/vendor_build.rc") &
fi
step structure 30 structure
step build_profile 30 build_profile
step startup 60 startup
step new_cases 240 new_cases
step certify 400 certify
step certify_setup_plan 120 certify_setup_plan
step vendor_wait 420 vendor_wait
step certify_warm 200 certify_warm
step certify_nopyc 200 certify_nopyc
step certify_brought 300 certify_brought
step runtime_dir_mutant 420 runtime_dir_mutant
step pack_vendor 60 pack_vendor
step certify_killed 200 certify_killed
step certify_slots 300 certify_slots
step mutants 600 mutants
step contention 200 contention
step slow_case 90 slow_case
step carry_to 90 carry_to
step fresh_machine 400 fresh_machine
step pack_build 60 pack_build
step smoke 60 smoke_acceptance
step goldens 120 goldens
step native_selftest 90 native_selftest
step native_e2e 90 native_e2e
step bench_decode 90 bench_decode
step timeline 30 timeline
step reject_family 200 reject_family
step spread 200 spread
step reuse 200 reuse
step preload 120 preload
step lanes 300 lanes
step lookahead 300 lookahead
step bench_certify 400 bench_certify
log "done"; pack
