#!/usr/bin/env bash
# Benchmark (not a test): what --batch-invariant costs. A Mixtral-shaped
# model of 2 layers (d 1024, FFN 2816, 16 query / 8 KV heads of 64, 8
# experts top-2, vocab 32000), one rank, compiled with and without it:
# prefill of one prompt of T tokens, and decode of 32 tokens after a
# 16-token prompt (one row per step: where the default runs dot tiles and
# --batch-invariant packs), the program's own times (--report decode),
# medians of N runs side by side.
#
#   bench/batch-invariant.sh [BUILD_DIR] [N] [T]   (defaults: 3 runs, T 256)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=3
# shellcheck source=bench/common.sh
. "$here/common.sh"
tokens="${3:-256}"
sed -e 's/"hidden_size": [0-9]*/"hidden_size": 1024/' \
  -e 's/"intermediate_size": [0-9]*/"intermediate_size": 2816/' \
  -e 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 2/' \
  -e 's/"num_attention_heads": [0-9]*/"num_attention_heads": 16/' \
  -e 's/"head_dim": [0-9]*/"head_dim": 64/' \
  -e 's/"num_local_experts": [0-9]*/"num_local_experts": 8/' \
  "$here/mixtral-layer.json" > "$work/config.json"
"$bin/meshfold-import-hf" "$work/config.json" -o "$work/model.mlir"
"$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 -o "$work/w.safetensors"
echo "compiling the two programs" >&2
"$bin/meshfold-compile" "$work/model.mlir" --decode -o "$work/default"
"$bin/meshfold-compile" "$work/model.mlir" --decode --batch-invariant \
  -o "$work/invariant"
awk -v t="$tokens" 'BEGIN { for (i = 0; i < t; ++i) printf "%s%d", (i ? " " : ""), (i * 17) % 32000; print "" }' > "$work/long.txt"
awk 'BEGIN { for (i = 0; i < 16; ++i) printf "%s%d", (i ? " " : ""), (i * 29) % 32000; print "" }' > "$work/short.txt"

printf 'Mixtral-shaped, 2 layers, d 1024, 8 experts top-2, one rank; medians of %d runs\n' "$reps"
printf '%-10s %14s %14s\n' program "prefill s" "decode ms/tok"
for prog in default invariant; do
  pre=$(for _ in $(seq "$reps"); do
    "$work/$prog" --weights "$work/w.safetensors" --prompts "$work/long.txt" \
      --out "$work/o.safetensors" --quiet --max-new-tokens 1 --report decode |
      awk '/^req/ { for (i = 1; i <= NF; ++i) if ($i == "prefill") print $(i + 1) / 1000 }'
  done | median)
  dec=$(for _ in $(seq "$reps"); do
    "$work/$prog" --weights "$work/w.safetensors" --prompts "$work/short.txt" \
      --out "$work/o.safetensors" --quiet --max-new-tokens 32 --ignore-eos \
      --report decode | awk "$decode_tpot"
  done | median)
  printf '%-10s %14.3f %14.3f\n' "$prog" "$pre" "$dec"
done
