#!/usr/bin/env bash
# The seed example end to end, no Python anywhere: import the model from its
# Hugging Face config, generate deterministic weights, compile it to an
# executable for the CPU, run prefill on the prompts, and check the result
# against the plain reference implementation.
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

step() { printf '\n== %s\n' "$*"; }

step "import the model (meshfold-import-hf)"
"$bin/meshfold-import-hf" "$config" -o "$work/model.mlir"
head -n 1 "$work/model.mlir"

step "generate weights (meshfold-gen-weights --seed 1)"
"$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 -o "$work/weights.safetensors"

step "compile for the CPU, one rank (meshfold-compile)"
"$bin/meshfold-compile" "$work/model.mlir" --target cpu -o "$work/prefill" -v

step "run prefill on $(wc -l < "$prompts") prompts"
"$work/prefill" --weights "$work/weights.safetensors" --prompts "$prompts" \
  --out "$work/out.safetensors"

step "check against the plain reference (meshfold-reference)"
"$bin/meshfold-reference" --config "$config" --weights "$work/weights.safetensors" \
  --prompts "$prompts" --out "$work/reference.safetensors"
"$bin/meshfold-compare" "$work/out.safetensors" "$work/reference.safetensors" --rtol 1e-4
