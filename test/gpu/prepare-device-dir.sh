#!/usr/bin/env bash
# Prepares, on a machine with LLVM/MLIR and the CUDA toolkit (no GPU
# needed), the folder that test/gpu/run-on-device.sh --prebuilt DIR runs on a
# GPU machine that has the CUDA driver and toolkit but no LLVM, no MLIR and
# no package registry:
#
#   bin/      meshfold-compare (no LLVM library needed), gpu-kernels (cuBLAS
#             from the GPU machine's toolkit), the runtime's GPU unit tests
#   lib/      the shared libraries the emitted programs need beyond the C
#             and C++ runtimes and the CUDA driver (OpenMP, SentencePiece,
#             Oniguruma, utf8proc), and the nccl plugin (libmfrt_nccl.so)
#   seed/     the seed example: prompts, the CPU reference's outputs
#             (prefill, and decode with step logits) on the bf16 weights of
#             meshfold-gen-weights --seed 1, which the programs generate on
#             the GPU machine (--random-weights 1: the same values), and its
#             programs for --target cuda: one rank (prefill-1), the seed plan
#             (prefill-32), the seed plan with a tp=2 dp=8 decode pool
#             (pools), one rank and the seed plan with --wgmma
#             (prefill-1-wgmma, prefill-32-wgmma), one rank with
#             --gemm-backend cublaslt (prefill-1-cublaslt)
#   layer/    one Mixtral layer (bench/mixtral-layer.json) for --target cuda:
#             generated (prefill), --wgmma (prefill-wgmma), --gemm-backend
#             cublaslt (prefill-cublaslt); each generates its 11 GB of
#             weights on the GPU machine (--random-weights)
#   kernels.ptx   the seed model's kernels (gpu-kernels --ptx lists them)
#   BUILT     what made the folder (commit, compiler, toolkit)
#
#   test/gpu/prepare-device-dir.sh [--build BUILD_DIR] DIR
#
# BUILD_DIR (default build/) must be configured with the CUDA toolkit. DIR
# is replaced; it comes to about 55 MB.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/build"
while [ $# -gt 0 ]; do
  case "$1" in
  --build) build="$2"; shift 2 ;;
  -h | --help) sed -n '2,26s/^# \{0,1\}//p' "$0"; exit 0 ;;
  -*) echo "prepare-device-dir: unknown option '$1' (see --help)" >&2; exit 1 ;;
  *) break ;;
  esac
done
if [ $# -ne 1 ]; then
  echo "prepare-device-dir: give the folder to prepare (see --help)" >&2
  exit 1
fi
dir="$1"
bin="$build/bin"
for tool in meshfold-import-hf meshfold-gen-weights meshfold-reference \
  meshfold-compile meshfold-compare gpu-kernels; do
  if [ ! -x "$bin/$tool" ]; then
    echo "prepare-device-dir: $bin/$tool is missing (build with the CUDA toolkit first)" >&2
    exit 1
  fi
done
if ldd "$bin/meshfold-compare" | grep -q libLLVM; then
  echo "prepare-device-dir: $bin/meshfold-compare needs the LLVM library" >&2
  exit 1
fi

examples="$root/python-free-examples"
config="$examples/seed/config.json"
# shellcheck disable=SC2054 # commas are part of the --order value
plan=(--tp 2 --cp 2 --dp 4 --pp 2 --order tp,cp,dp,pp --gpus-per-node 8)
step() { printf '%s\n' "-- $*"; }

rm -rf "$dir"
mkdir -p "$dir"/{bin,lib,seed,layer}
dir="$(cd "$dir" && pwd)"

step "tools"
cp "$bin/meshfold-compare" "$bin/gpu-kernels" "$dir/bin/"
for t in CudaRuntimeTest CudaErrorTest; do
  [ -x "$build/unittests/$t" ] && cp "$build/unittests/$t" "$dir/bin/"
done

step "seed example: weights, reference outputs, programs"
s="$dir/seed"
cp "$examples/seed/prompts.txt" "$s/prompts.txt"
"$bin/meshfold-import-hf" "$config" -o "$s/model.mlir"
# The weights stay here (the folder must fit a device call's 64 MiB).
weights="$(mktemp -d)/weights.safetensors"
"$bin/meshfold-gen-weights" "$s/model.mlir" --seed 1 --dtype bf16 --quiet \
  -o "$weights"
"$bin/meshfold-reference" --config "$config" --weights "$weights" \
  --prompts "$s/prompts.txt" --out "$s/reference.safetensors" >/dev/null
"$bin/meshfold-reference" --config "$config" --weights "$weights" \
  --prompts "$s/prompts.txt" --out "$s/reference-decode.safetensors" \
  --max-new-tokens 8 --step-logits >/dev/null
rm -rf "$(dirname "$weights")"
"$bin/meshfold-compile" "$s/model.mlir" --target cuda -o "$s/prefill-1"
"$bin/meshfold-compile" "$s/model.mlir" "${plan[@]}" --target cuda \
  -o "$s/prefill-32"
"$bin/meshfold-compile" "$s/model.mlir" "${plan[@]}" --decode-plan "tp=2 dp=8" \
  --target cuda -o "$s/pools"
"$bin/meshfold-compile" "$s/model.mlir" --target cuda --wgmma \
  -o "$s/prefill-1-wgmma"
"$bin/meshfold-compile" "$s/model.mlir" "${plan[@]}" --target cuda --wgmma \
  -o "$s/prefill-32-wgmma"
"$bin/meshfold-compile" "$s/model.mlir" --target cuda --gemm-backend cublaslt \
  -o "$s/prefill-1-cublaslt"
"$bin/meshfold-compile" "$s/model.mlir" --target cuda --emit ptx \
  -o "$dir/kernels.ptx"

step "one Mixtral layer"
"$bin/meshfold-import-hf" "$root/bench/mixtral-layer.json" -o "$dir/layer/model.mlir"
"$bin/meshfold-compile" "$dir/layer/model.mlir" --target cuda \
  -o "$dir/layer/prefill"
"$bin/meshfold-compile" "$dir/layer/model.mlir" --target cuda --wgmma \
  -o "$dir/layer/prefill-wgmma"
"$bin/meshfold-compile" "$dir/layer/model.mlir" --target cuda \
  --gemm-backend cublaslt -o "$dir/layer/prefill-cublaslt"

step "shared libraries"
# The nccl plugin (without libnccl itself, over 200 MB: the GPU machine's
# toolkit has it, or step c says it is missing).
if [ -f "$build/lib/libmfrt_nccl.so" ]; then
  cp "$build/lib/libmfrt_nccl.so" "$dir/lib/"
fi
# Every library the programs and tools load, except the C and C++ runtimes
# (the GPU machine's are newer) and the CUDA driver and toolkit (its own).
ldd "$dir"/bin/* "$s/prefill-1" "$dir/layer/prefill" 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libcuda|libcublas|libcublasLt|libcudart|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$dir/lib/"; done
ls "$dir/lib"

{
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "made $(date -u '+%Y-%m-%d %H:%M UTC')"
  "$bin/meshfold-compile" --version | sed 's/^ */compiler /'
  cuda_root=$(sed -n 's/^MESHFOLD_CUDA_ROOT:[A-Z]*=//p' "$build/CMakeCache.txt")
  echo "toolkit $("${cuda_root:-/usr/local/cuda}/bin/ptxas" --version | tail -1)"
} >"$dir/BUILT"
du -sh "$dir" | awk '{ print "-- " $2 ": " $1 }'
