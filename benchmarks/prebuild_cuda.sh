#!/usr/bin/env bash
# Build the CUDA runtime on a machine WITHOUT a GPU (the dev machine: nvcc 13.0 but no cuBLAS and
# no driver) and pack it for the device: .carry/cuda-prebuilt.tgz (~35 MB for sm_90).
#   - cuBLAS headers and libraries come from PyPI's nvidia-cublas wheel (CUDA 13);
#   - libcuda.so is a link-time stub generated from cuda.h (SONAME libcuda.so.1): the device's
#     real driver library resolves the symbols at run time.
# Both are copied into the toolkit directory, which is why this is a dev-machine helper only.
# 36.5 min on 2 cores (2026-12-03).
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLKIT=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")/targets/x86_64-linux
WORK=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: -d "$WORK" 'nvidia-cublas>=13,<14'
(cd "$WORK" && unzip -q -o nvidia_cublas-*.whl 'nvidia/cu13/include/*' 'nvidia/cu13/lib/*')
cp "$WORK"/nvidia/cu13/include/* "$TOOLKIT/include/"
cp "$WORK"/nvidia/cu13/lib/libcublas.so.13 "$WORK"/nvidia/cu13/lib/libcublasLt.so.13 "$TOOLKIT/lib/"
ln -sf libcublas.so.13 "$TOOLKIT/lib/libcublas.so"; ln -sf libcublasLt.so.13 "$TOOLKIT/lib/libcublasLt.so"
python3 - "$TOOLKIT/include/cuda.h" > "$WORK/stub.c" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
names = set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", text)) | set(re.findall(r"#define\s+cu\w+\s+(cu\w+)", text))
print("".join(f"void {name}(void) {{}}\n" for name in sorted(names)))
PY
mkdir -p "$TOOLKIT/lib/stubs"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$TOOLKIT/lib/stubs/libcuda.so" "$WORK/stub.c"
MANIFEST=$(palw build --variant cuda --cuda-arch 90 --pinned-cc 900 --no-binding-install --print-manifest)
BUILD=$(dirname "$MANIFEST")
BINDING=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['binding_python_path'])" "$MANIFEST")
mkdir -p .carry
tar czf .carry/cuda-prebuilt.tgz -C / "${MANIFEST#/}" "${BUILD#/}/build/bin" "${BUILD#/}/source/include" \
    "${BUILD#/}/source/ggml/include" "${BINDING#/}"
ls -la .carry/cuda-prebuilt.tgz
