#!/usr/bin/env bash
# Benchmark (not a test; needs one NVIDIA GPU): the CUDA target's generated
# kernels at realistic dims, against cuBLAS and a roofline.
#
# One Mixtral layer (bench/mixtral-layer.json: d 4096, 32/8 heads of 128, 32
# experts of FFN 14336, top-2), bf16 weights, one rank, one prompt of T =
# 4096 tokens: the runtime times every kernel launch (MFRT_PROFILE_KERNELS=1)
# and prints them by total time; then the generated matrix products and
# attention are set beside their FLOPs (achieved TFLOP/s) and beside
# cuBLAS's time for the same products (bench/gpu-kernels, bf16 in, fp32
# accumulation), whose report also has the attention roofline.
#
#   bench/gpu-layer.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-$here/../build}" && pwd)"
work="${2:-$build/gpu-layer}"
bin="$build/bin"
mkdir -p "$work"

if [ ! -x "$bin/gpu-kernels" ]; then
  echo "gpu-layer: $bin/gpu-kernels was not built (CUDA toolkit / cuBLAS missing?)" >&2
  exit 1
fi

echo "== cuBLAS and the attention roofline (bench/gpu-kernels --tokens 4096)"
"$bin/gpu-kernels" --tokens 4096 --iters 10 | tee "$work/cublas.txt"

echo
echo "== the generated kernels of one layer at T = 4096"
"$bin/meshfold-import-hf" "$here/mixtral-layer.json" -o "$work/model.mlir"
[ -s "$work/weights.safetensors" ] ||
  "$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 --dtype bf16 \
    -o "$work/weights.safetensors"
awk 'BEGIN { s = ""; for (i = 0; i < 4096; i++) s = s (i ? " " : "") (i * 7919) % 32000; print s }' \
  >"$work/prompt.txt"
"$bin/meshfold-compile" "$work/model.mlir" --target cuda -o "$work/prefill"
MFRT_PROFILE_KERNELS=1 "$work/prefill" --weights "$work/weights.safetensors" \
  --prompts "$work/prompt.txt" --out "$work/out.safetensors" --timeout 300 \
  2>"$work/profile.txt"
sed -n '/^kernel profile/,$p' "$work/profile.txt" | head -25

# Generated time per op family (kernel names are <op>_<n>), and cuBLAS's
# time for the same products (the "us" column of its report).
gen() {
  sed -n '/^kernel profile/,$p' "$work/profile.txt" |
    awk -v p="$1" '$1 ~ "^"p"_[0-9]+$" { t += $3 } END { printf "%.3f", t }'
}
cub() { sed -n "s/^  $1 .* \([0-9.]*\) us .*/\1/p" "$work/cublas.txt" | head -1; }
lin=$(gen linear) ffn=$(gen experts) att=$(gen attention)
qkv=$(cub qkv) o=$(cub o) f13=$(cub ffn13-all) f2=$(cub ffn2-all)
echo
echo "== generated vs cuBLAS and FLOPs"
awk -v lin="$lin" -v ffn="$ffn" -v att="$att" -v qkv="${qkv:-0}" \
  -v o="${o:-0}" -v f13="${f13:-0}" -v f2="${f2:-0}" 'BEGIN {
  # FLOPs at T = 4096 (2 per multiply-add): the q/k/v/o projections and
  # the router; the routed experts (top-2, SwiGLU: w1, w3, w2); causal
  # attention (QK^T and PV over half the pairs).
  T = 4096; d = 4096; kv = 1024; ff = 14336; h = 32; dh = 128
  flin = 2 * T * d * (d + kv + kv + d) + 2 * T * d * 32
  fffn = 2 * T * 2 * 3 * d * ff
  fatt = 2 * 2 * T * T / 2 * h * dh
  printf "  linear (q/k/v/o, router, head): %.3f ms, %.2f TFLOP/s", lin, (lin > 0 ? flin / lin / 1e9 : 0)
  if (qkv + o > 0) printf "; cuBLAS q/k/v/o %.3f ms: %.1fx its time", (qkv + o) / 1000, lin / ((qkv + o) / 1000)
  printf "\n  expert FFN: %.3f ms, %.2f TFLOP/s", ffn, (ffn > 0 ? fffn / ffn / 1e9 : 0)
  if (f13 + f2 > 0) printf "; cuBLAS w1/w3 + w2 over the routed rows %.3f ms: %.1fx its time", (f13 + f2) / 1000, ffn / ((f13 + f2) / 1000)
  printf "\n  attention: %.3f ms, %.2f TFLOP/s (roofline above)\n", att, (att > 0 ? fatt / att / 1e9 : 0) }'
if [ "$lin" = "0.000" ] || [ "$ffn" = "0.000" ]; then
  echo "gpu-layer: no linear / experts kernels in the profile" >&2
  exit 1
fi
