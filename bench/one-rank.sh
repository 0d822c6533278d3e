#!/usr/bin/env bash
# Benchmark (not a test): time to compile the seed example to an executable,
# and time of a one-rank run on the seed prompts; medians of N repetitions.
#
#   bench/one-rank.sh [BUILD_DIR] [N]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=5
# shellcheck source=bench/common.sh
. "$here/common.sh"
seed_model_and_weights
head -n 3 "$seed/prompts.txt" > "$work/prompts3.txt"

compile_times=()
run_times=()
for _ in $(seq "$reps"); do
  t0=$(now); "$bin/meshfold-compile" "$work/model.mlir" -o "$work/prefill"; t1=$(now)
  compile_times+=("$(elapsed "$t0" "$t1")")
  t0=$(now)
  "$work/prefill" --weights "$work/w.safetensors" --prompts "$work/prompts3.txt" \
    --out "$work/out.safetensors" --quiet
  t1=$(now)
  run_times+=("$(elapsed "$t0" "$t1")")
done
lens=$(awk '{printf "%s%d", (NR>1?",":""), NF}' "$work/prompts3.txt")
printf 'compile seed example (8 layers, 32 experts) -> executable: median %.3f s over %d runs\n' \
  "$(printf '%s\n' "${compile_times[@]}" | median)" "$reps"
printf 'one-rank run, 3 prompts (%s tokens), incl. weight load: median %.3f s over %d runs\n' \
  "$lens" "$(printf '%s\n' "${run_times[@]}" | median)" "$reps"
