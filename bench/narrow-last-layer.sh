#!/usr/bin/env bash
# Benchmark (not a test): what narrowing the last layer to the rows that
# reach an output (mf-narrow-last-layer) saves, on the seed model (8 layers,
# 32 experts top-2, d 64) and the seed plan (TP2 x CP2 x DP4 x PP2), four
# prompts of T tokens (one per DP replica): the last layer's bytes sent by
# collective and link and its compute (rows and FLOPs), both from the
# runtime's counters (--report traffic), with and without the narrowing,
# beside the analytic share it removes (the query, attention, output
# projection, router and experts of T-1 of the T rows of each request);
# then the prefill wall time of both programs (medians of N runs; a
# machine with fewer cores than ranks shares them, so the times are the
# layouts' overheads, not cluster speed).
#
#   bench/narrow-last-layer.sh [BUILD_DIR] [N] [T]   (defaults: 3 runs, T 256)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=3
# shellcheck source=bench/common.sh
. "$here/common.sh"
tokens="${3:-256}"
seed_model_and_weights
echo "compiling the two programs (a minute each)" >&2
"$bin/meshfold-compile" "$work/model.mlir" --tp 2 --cp 2 --dp 4 --pp 2 \
  -o "$work/narrow"
"$bin/meshfold-compile" "$work/model.mlir" --tp 2 --cp 2 --dp 4 --pp 2 \
  --narrow-last-layer=false -o "$work/whole"

awk -v t="$tokens" 'BEGIN { for (r = 0; r < 4; ++r) { line = "";
  for (i = 0; i < t; ++i) line = line (i ? " " : "") (r * 131 + i * 17) % 512
  print line } }' > "$work/p.txt"

for prog in narrow whole; do
  "$work/$prog" --weights "$work/w.safetensors" --prompts "$work/p.txt" \
    --out "$work/$prog.safetensors" --quiet --report traffic \
    > "$work/$prog-traffic.txt"
done
"$bin/meshfold-compare" "$work/narrow.safetensors" "$work/whole.safetensors" \
  --rtol 1e-5 | tail -n 1

printf '\nseed model, seed plan, 4 prompts of %d tokens: layer 8 (7 from 0)\n' "$tokens"
printf '\nelements sent in layer 8 (7 from 0), per sending GPU (mean, max), by collective and link\n'
printf '%-16s %-7s %12s %8s %12s %8s\n' collective link "narrowed" max whole max
for c in all_gather kv_ring reduce_scatter all_reduce dispatch combine; do
  for l in nvlink ib; do
    a=$(awk -v c="$c" -v l="$l" '$1 == "7" && $2 == c && $3 == l { print $4, $5 }' "$work/narrow-traffic.txt")
    b=$(awk -v c="$c" -v l="$l" '$1 == "7" && $2 == c && $3 == l { print $4, $5 }' "$work/whole-traffic.txt")
    [ -z "$a$b" ] && continue
    # shellcheck disable=SC2086 # two fields each
    printf '%-16s %-7s %12s %8s %12s %8s\n' "$c" "$l" ${a:-0 0} ${b:-0 0}
  done
done

printf '\ncompute of layer 8, summed over the GPUs (rows counted by the runtime)\n'
grep -A 9 '^compute in prefill' "$work/narrow-traffic.txt" | sed -n 2p
for prog in narrow whole; do
  printf '%-7s ' "$prog"
  grep -A 9 '^compute in prefill' "$work/$prog-traffic.txt" | awk '$1 == "7"'
done
# The analytic figure, at the seed model's dims (d 64, 8 heads of 8, 32
# experts of FFN 128, top-2; global FLOPs, a multiply-add 2): per request
# of T rows the whole layer's query and output projections, attention over
# T(T+1)/2 (query, key) pairs, router and experts; the narrowed layer keeps
# one row and its T pairs.
awk -v t="$tokens" '
  FNR == 1 { f++ }
  /^compute in prefill/ { on = 1; next }
  on && $1 == "7" { attn[f] = $8; moe[f] = $9; kv[f] = $7; on = 0 }
  END {
    d = 64; h = 8; dh = 8; e = 32; ffn = 128; k = 2; req = 4
    row = 2 * 2 * d * h * dh + 2 * d * e + k * 6 * d * ffn
    pair = 4 * h * dh
    whole = req * (t * row + t * (t + 1) / 2 * pair)
    kept = req * (row + t * pair)
    saved = (attn[2] + moe[2]) - (attn[1] + moe[1])
    printf "\nlayer 8 MFLOP (measured): whole %.3f (K/V %.3f, attention %.3f, MoE %.3f), narrowed %.3f: %.3f saved (%.1f%% of the layer)\n",
      kv[2] + attn[2] + moe[2], kv[2], attn[2], moe[2], kv[1] + attn[1] + moe[1],
      saved, 100 * saved / (kv[2] + attn[2] + moe[2])
    printf "layer 8 MFLOP (analytic): attention and MoE %.3f whole, %.3f narrowed: %.3f saved\n",
      whole / 1e6, kept / 1e6, (whole - kept) / 1e6
  }' "$work/narrow-traffic.txt" "$work/whole-traffic.txt"

printf '\nprefill wall time, medians of %d runs\n' "$reps"
for prog in narrow whole; do
  for i in $(seq "$reps"); do
    s=$(now)
    "$work/$prog" --weights "$work/w.safetensors" --prompts "$work/p.txt" \
      --out "$work/o.safetensors" --quiet
    elapsed "$s" "$(now)"
  done | median | xargs printf '%-7s %8.3f s\n' "$prog"
done
