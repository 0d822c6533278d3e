#!/usr/bin/env bash
# The seed example end to end, no Python anywhere: import the model from its
# Hugging Face config, generate deterministic weights, compile it for the
# seed plan (TP2 x CP2 x DP4 x PP2 attention, EP16 x PP2 experts, 4 nodes of
# 8 GPUs: 32 ranks) and for one rank, run both on the CPU (the 32 ranks as
# threads of one process, a simulated cluster), and check the 32-rank run
# against the one-rank run and against the plain reference implementation.
#
#   python-free-examples/run-seed.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-$here/../build}" && pwd)"
work="${2:-$build/seed-example}"
bin="$build/bin"
mkdir -p "$work"

config="$here/seed/config.json"
prompts="$here/seed/prompts.txt"
plan=(--tp 2 --cp 2 --dp 4 --pp 2 --order tp,cp,dp,pp --gpus-per-node 8)

step() { printf '\n== %s\n' "$*"; }

step "import the model (meshfold-import-hf)"
"$bin/meshfold-import-hf" "$config" -o "$work/model.mlir"
head -n 1 "$work/model.mlir"

step "generate weights (meshfold-gen-weights --seed 1)"
"$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 -o "$work/weights.safetensors"

step "compile for the seed plan, 32 ranks: ${plan[*]}"
"$bin/meshfold-compile" "$work/model.mlir" "${plan[@]}" --target cpu \
  -o "$work/prefill-32" -v

step "run prefill on $(wc -l < "$prompts") prompts on 32 ranks (local backend)"
"$work/prefill-32" --weights "$work/weights.safetensors" --prompts "$prompts" \
  --out "$work/out-32.safetensors" | tee "$work/run-32.txt"

step "compile and run the same model on one rank"
"$bin/meshfold-compile" "$work/model.mlir" --target cpu -o "$work/prefill-1"
"$work/prefill-1" --weights "$work/weights.safetensors" --prompts "$prompts" \
  --out "$work/out-1.safetensors" > "$work/run-1.txt"

step "32 ranks vs one rank"
if diff <(grep '^req' "$work/run-32.txt") <(grep '^req' "$work/run-1.txt"); then
  echo "same next token for every request"
else
  echo "the next tokens differ" >&2
  exit 1
fi
"$bin/meshfold-compare" "$work/out-32.safetensors" "$work/out-1.safetensors" --rtol 1e-4

step "32 ranks vs the plain reference (meshfold-reference)"
"$bin/meshfold-reference" --config "$config" --weights "$work/weights.safetensors" \
  --prompts "$prompts" --out "$work/reference.safetensors"
"$bin/meshfold-compare" "$work/out-32.safetensors" "$work/reference.safetensors" --rtol 1e-4

step "trace the reference token: request 2, position 40 of four 64-token prompts"
"$work/prefill-32" --weights "$work/weights.safetensors" \
  --prompts "$here/seed/four-64.txt" --out "$work/trace.safetensors" --quiet \
  --trace-token 2:40 --force-routing "$here/seed/routing.txt" \
  --trace-svg "$work/trace.svg"
echo "route map: $work/trace.svg"
