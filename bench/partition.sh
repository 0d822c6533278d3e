#!/usr/bin/env bash
# Benchmark (not a test): time of `meshfold-opt --mf-partition` for the seed
# plan (32 ranks) on the seed model with 8, 32 and 64 layers: the pass
# pipeline's own time from --mlir-timing (parse and print excluded), median
# of N runs; cost growth with model depth.
#
#   bench/partition.sh [BUILD_DIR] [N]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=7
# shellcheck source=bench/common.sh
. "$here/common.sh"
config="$seed/config.json"

for layers in 8 32 64; do
  sed "s/\"num_hidden_layers\": 8/\"num_hidden_layers\": $layers/" "$config" > "$work/c.json"
  "$bin/meshfold-import-hf" "$work/c.json" -o "$work/m.mlir"
  times=()
  for _ in $(seq "$reps"); do
    t=$("$bin/meshfold-opt" "$work/m.mlir" --mf-partition="tp=2 cp=2 dp=4 pp=2" \
          -o /dev/null --mlir-timing 2>&1 |
        awk '/Total Execution Time/ {total=$4}
             /Parser$/ {p=$1} /Output$/ {o=$1}
             END {print total - p - o}')
    times+=("$t")
  done
  printf 'mf-partition, seed plan (32 ranks), %2d layers: median %.4f s over %d runs\n' \
    "$layers" "$(printf '%s\n' "${times[@]}" | median)" "$reps"
done
