#!/usr/bin/env bash
# Benchmark (not a test): time to compile the seed example to an executable,
# and time of a one-rank run on the seed prompts; medians of N repetitions.
#
#   bench/one-rank.sh [BUILD_DIR] [N]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-$here/../build}" && pwd)"
reps="${2:-5}"
bin="$build/bin"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ex="$here/../python-free-examples/seed"

"$bin/meshfold-import-hf" "$ex/config.json" -o "$work/model.mlir"
"$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 -o "$work/w.safetensors"
head -n 3 "$ex/prompts.txt" > "$work/prompts3.txt"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s.%N; }

compile_times=()
run_times=()
for _ in $(seq "$reps"); do
  t0=$(now); "$bin/meshfold-compile" "$work/model.mlir" -o "$work/prefill"; t1=$(now)
  compile_times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
  t0=$(now)
  "$work/prefill" --weights "$work/w.safetensors" --prompts "$work/prompts3.txt" \
    --out "$work/out.safetensors" --quiet
  t1=$(now)
  run_times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
done
lens=$(awk '{printf "%s%d", (NR>1?",":""), NF}' "$work/prompts3.txt")
printf 'compile seed example (8 layers, 32 experts) -> executable: median %.3f s over %d runs\n' \
  "$(printf '%s\n' "${compile_times[@]}" | median)" "$reps"
printf 'one-rank run, 3 prompts (%s tokens), incl. weight load: median %.3f s over %d runs\n' \
  "$lens" "$(printf '%s\n' "${run_times[@]}" | median)" "$reps"
