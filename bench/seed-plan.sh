#!/usr/bin/env bash
# Benchmark (not a test): the seed model on the seed plan (32 ranks as
# threads, local backend) against the same model on one rank, side by side in
# one run: wall time and peak memory (max RSS) of each, medians of N runs, and
# their ratios; and the compile time of the seed plan.
#
#   bench/seed-plan.sh [BUILD_DIR] [N]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=5
# shellcheck source=bench/common.sh
. "$here/common.sh"
seed_model_and_weights
# More work than the 4 example prompts: 8 requests of 64-256 tokens.
awk 'BEGIN { srand(7); for (r = 0; r < 8; ++r) { n = 64 + int(rand() * 193);
       line = ""; for (i = 0; i < n; ++i) line = line (i ? " " : "") int(rand() * 512);
       print line } }' > "$work/prompts.txt"

compile32=(); compile1=()
for _ in $(seq "$reps"); do
  t0=$(now); "$bin/meshfold-compile" "$work/model.mlir" --tp 2 --cp 2 --dp 4 --pp 2 -o "$work/p32"; t1=$(now)
  compile32+=("$(elapsed "$t0" "$t1")")
  t0=$(now); "$bin/meshfold-compile" "$work/model.mlir" -o "$work/p1"; t1=$(now)
  compile1+=("$(elapsed "$t0" "$t1")")
done

run() { # prog -> "seconds maxrss_kb"
  /usr/bin/time -f "%e %M" "$1" --weights "$work/w.safetensors" \
    --prompts "$work/prompts.txt" --out "$work/out.safetensors" --quiet 2>&1 >/dev/null | tail -1
}
t32=(); m32=(); t1=(); m1=()
for _ in $(seq "$reps"); do
  read -r t m < <(run "$work/p32"); t32+=("$t"); m32+=("$m")
  read -r t m < <(run "$work/p1"); t1+=("$t"); m1+=("$m")
done
c32=$(printf '%s\n' "${compile32[@]}" | median); c1=$(printf '%s\n' "${compile1[@]}" | median)
w32=$(printf '%s\n' "${t32[@]}" | median); w1=$(printf '%s\n' "${t1[@]}" | median)
r32=$(printf '%s\n' "${m32[@]}" | median); r1=$(printf '%s\n' "${m1[@]}" | median)
lens=$(awk '{printf "%s%d", (NR>1?",":""), NF}' "$work/prompts.txt")
echo "seed model, 8 prompts ($lens tokens), medians of $reps runs:"
printf '  compile: seed plan (32 ranks) %.3f s, one rank %.3f s\n' "$c32" "$c1"
printf '  run, wall: 32 ranks %.3f s, one rank %.3f s, ratio %.2f\n' "$w32" "$w1" \
  "$(awk -v a="$w32" -v b="$w1" 'BEGIN {print a / b}')"
printf '  run, peak RSS: 32 ranks %.1f MB, one rank %.1f MB, ratio %.2f\n' \
  "$(awk -v a="$r32" 'BEGIN {print a / 1024}')" "$(awk -v a="$r1" 'BEGIN {print a / 1024}')" \
  "$(awk -v a="$r32" -v b="$r1" 'BEGIN {print a / b}')"
