#!/usr/bin/env bash
# Build the seed-patched ggml (plus overlays) with CUDA and this runtime, then run
# native/tests/ggml_trace_e2e.cpp on the current GPU. Run from the repository root:
#
#   native/tests/ggml_trace_e2e.sh PATCHED_LLAMA_TREE [BUILD_DIR] [PINNED_CC] [CUDA_ARCH]
#
# PATCHED_LLAMA_TREE: llama.cpp with the seed patch and patches/overlays applied.
# PINNED_CC defaults to 900 and CUDA_ARCH to 90-real (H100/H200); use 890 / 89-real on Ada.
# GGML_LIB_DIR: the libggml*.so of an existing CUDA trace build of that tree (e.g. `palw build
# --variant cuda`'s build/bin, whose source/ is the tree): used as they are, nothing is built.
set -euo pipefail

tree=${1:?usage: $0 PATCHED_LLAMA_TREE [BUILD_DIR] [PINNED_CC] [CUDA_ARCH]}
build=${2:-/tmp/palw-ggml-e2e-build}
pinned_cc=${3:-900}
cuda_arch=${4:-90-real}
root=$PWD
runtime="$root/native/runtime-palw/cuda"

if [ -n "${GGML_LIB_DIR:-}" ]; then
    libs=$GGML_LIB_DIR
else
    # The vendored ggml has no tests/, examples/ or ggml.pc.in; build it standalone anyway.
    source_dir="$build.src"
    if [ ! -f "$build/build.ninja" ]; then
        rm -rf "$source_dir" && cp -r "$tree/ggml" "$source_dir"
        touch "$source_dir/ggml.pc.in"
        cmake -G Ninja -S "$source_dir" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
            -DGGML_NATIVE=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
            -DGGML_CUDA=ON -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_COMPRESSION_MODE=none \
            -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" -DGGML_CUDA_PALW_TRACE=ON \
            -DPALW_CUDA_RUNTIME_DIR="$runtime" -DPALW_CUDA_PINNED_CC="$pinned_cc"
    fi
    ninja -C "$build" ggml
    libs="$build/src"
fi
mkdir -p "$build"
g++ -std=c++17 -O1 -I"$tree/ggml/include" -I"$runtime" "$root/native/tests/ggml_trace_e2e.cpp" \
    -L"$libs" -lggml -lggml-base -Wl,-rpath,"$libs" -Wl,-rpath,"$libs/ggml-cuda" \
    -o "$build/ggml_trace_e2e"
# No CUDA graph may exist when a trace binds.
GGML_CUDA_DISABLE_GRAPHS=1 "$build/ggml_trace_e2e"
