#!/usr/bin/env bash
# Benchmark (not a test): what expert placement from measured routing
# (meshfold-compile --expert-placement, --redundant-experts) does to the
# load of the EP ranks, on the seed model (8 layers, 32 experts top-2,
# d 64) and the seed plan (TP2 x CP2 x DP4 x PP2: EP 16 per stage).
#
#   bench/expert-placement.sh [BUILD_DIR] [PROMPTS]   (default 32 prompts)
#
# Three routings: --force-routing zipf:1.2 and zipf:0.8 (the expert of rank
# r in a per-layer order drawn with weight 1/r^S: a hot few), and the
# model's own router on real text (the paragraphs of docs/design.md through
# the 512-token test tokenizer; the weights are synthetic, seed 1, so the
# skew is this model's, not a trained checkpoint's). For each, the
# contiguous program measures the routing of prompt set A (--routing-json),
# the compiler places from it with R = 0, 16 and 48 replicas (EP | 32 + R:
# 0, 1 and 3 more experts per EP rank), and every program runs prompt set B
# (held out: other requests, the same distribution):
#   modeled: max/mean of the rows per EP rank that A's routing gives each
#     placement (--explain-placement), and the modeled EP time of a layer
#     (its busiest rank's rows) over the contiguous placement's;
#   measured: max/mean of the prefill expert rows per EP rank that B's run
#     counts (--report traffic), the mean over the layers and the worst;
#   both over layers 1-7: the last layer, narrowed to the rows that reach
#     an output (one per request), has too few rows to weigh a load;
#   IB: the elements dispatch and combine send over IB per GPU and layer
#     (--report traffic on B): a row whose expert has as many replicas on
#     every node of the EP group stays on its own node;
#   memory: the weight bytes the replicas add to rank 0 (f32, its stage's
#     layers) beside the rank's weights (--report memory --memory-dtype f32).
# The outputs of every placed run equal the contiguous program's
# (meshfold-compare --rtol 1e-5, checked). The local backend runs the 32
# ranks as threads, so no wall time is reported: a machine with fewer cores
# than ranks measures its own sharing, not the cluster's EP time.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=1
build_hint="bench/expert-placement.sh BUILD_DIR [PROMPTS]"
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
esac
# shellcheck source=bench/common.sh
. "$here/common.sh"
prompts="${2:-32}"
[[ "$prompts" =~ ^[0-9]+$ && "$prompts" -ge 2 ]] ||
  { echo "$bench_name: PROMPTS must be a number of at least 2, got '$prompts'" >&2; exit 1; }
bench_need_tools meshfold-import-hf meshfold-gen-weights meshfold-compile meshfold-compare meshfold-tokenize
plan=(--tp 2 --cp 2 --dp 4 --pp 2)

seed_model_and_weights
mkdir -p "$work/ckpt"
cp "$work/w.safetensors" "$work/ckpt/model.safetensors"
cp "$seed/config.json" "$work/ckpt/config.json"
cp "$here/../test/e2e/Inputs/tokenizer-512.json" "$work/ckpt/tokenizer.json"

# Prompt sets A and B of `prompts` lines each: token ids (48 .. 79 tokens a
# prompt), and the text paragraphs, odd ones to A and even ones to B.
awk -v n="$prompts" -v w="$work" 'BEGIN { for (r = 0; r < 2 * n; ++r) { t = 48 + (r * 7) % 32; line = ""
  for (i = 0; i < t; ++i) line = line (i ? " " : "") 3 + (r * 131 + i * 17) % 509
  print line > (w (r % 2 ? "/ids-B.txt" : "/ids-A.txt")) } }'
awk -v w="$work" 'BEGIN { RS = ""; n = 0 } length($0) > 200 { gsub(/\n/, " ")
  print > (w ((n++ % 2) ? "/text-B.txt" : "/text-A.txt")) }' "$here/../docs/design.md"
for s in A B; do
  "$bin/meshfold-tokenize" --tokenizer "$work/ckpt" "$work/text-$s.txt" -o "$work/tok-$s.txt"
  head -n "$prompts" "$work/tok-$s.txt" | cut -d' ' -f1-96 > "$work/words-$s.txt"
done

echo "compiling the contiguous program" >&2
"$bin/meshfold-compile" "$work/model.mlir" "${plan[@]}" -o "$work/contiguous"
# Rank 0's weight bytes (f32) as the memory report counts them; $@: more
# flags.
rank_weights() {
  "$bin/meshfold-compile" "$work/model.mlir" "${plan[@]}" --report memory \
    --memory-dtype f32 --max-prompt 64 "$@" | awk '$1 == "0" && $2 == "0" { print $3 }'
}
weights_bytes=$(rank_weights)

# Both figures leave out the last layer: narrowed (mf-narrow-last-layer),
# it computes one row per request, 2 x PROMPTS rows over 16 ranks.
# The measured prefill rows per EP rank of a --report traffic: mean and
# worst max/mean over layers 0-6.
measured() {
  awk '/expert rows per rank in prefill/ { on = 1; next }
       on && /^  layer [0-6]: max/ { for (i = 1; i <= NF; ++i) if ($i == "max/mean") { r = $(i + 1); s += r; if (r > w) w = r; n++ } next }
       on && !/^  layer/ { on = 0 }
       END { printf "%.3f %.3f\n", s / n, w }' "$1"
}
# The elements dispatch and combine send over IB per GPU and layer (mean
# over layers 0-6) in a --report traffic.
ib_elements() {
  awk '$1 ~ /^[0-6]$/ && ($2 == "dispatch" || $2 == "combine") && $3 == "ib" { s += $4; l[$1] = 1 }
       END { n = 0; for (k in l) n++; printf "%.1f\n", n ? s / n : 0 }' "$1"
}
# The modeled figures of an --explain-placement, means over layers 0-6:
# max/mean contiguous, placed, and the time ratio.
modeled() {
  awk '/^layer / { on = ($2 + 0 <= 6) }
       on && /rows per EP rank, contiguous/ { a += $NF; n++ }
       on && /rows per EP rank, placed/ { b += $NF }
       on && /modeled EP time/ { for (i = 1; i <= NF; ++i) if ($i ~ /x$/ && $i + 0 > 0) t += $i + 0 }
       END { printf "%.3f %.3f %.3f\n", a / n, b / n, t / n }' "$1"
}

rows=()
for routing in zipf:1.2:7 zipf:0.8:7 text; do
  set_a=("$work/ids-A.txt") set_b=("$work/ids-B.txt") force=(--force-routing "$routing")
  if [[ "$routing" == text ]]; then
    set_a=("$work/words-A.txt") set_b=("$work/words-B.txt") force=()
  fi
  run() { # program prompts out traffic
    "$work/$1" --weights "$work/w.safetensors" --prompts "$2" --out "$work/$3.safetensors" \
      --quiet ${force[@]+"${force[@]}"} --report traffic > "$work/$3.traffic"
  }
  echo "$routing: measuring set A, running set B on the contiguous program" >&2
  "$work/contiguous" --weights "$work/w.safetensors" --prompts "${set_a[0]}" --out "$work/a.safetensors" \
    --quiet ${force[@]+"${force[@]}"} --routing-json "$work/routing.json"
  run contiguous "${set_b[0]}" base
  read -r base_mean base_worst <<< "$(measured "$work/base.traffic")"
  rows+=("$routing contiguous - - - $base_mean $base_worst $(ib_elements "$work/base.traffic") 0")
  for r in 0 16 48; do
    echo "$routing: placing with $r replicas, running set B" >&2
    "$bin/meshfold-compile" "$work/model.mlir" "${plan[@]}" --expert-placement "$work/routing.json" \
      --redundant-experts "$r" --explain-placement --memory-dtype f32 -o "$work/placed" > "$work/explain.txt"
    run placed "${set_b[0]}" placed
    "$bin/meshfold-compare" --rtol 1e-5 "$work/placed.safetensors" "$work/base.safetensors" > /dev/null ||
      { echo "$bench_name: the placed program's outputs differ from the contiguous one's ($routing, R=$r)" >&2; exit 1; }
    read -r m_before m_after m_time <<< "$(modeled "$work/explain.txt")"
    read -r p_mean p_worst <<< "$(measured "$work/placed.traffic")"
    m_bytes=$(( $(rank_weights --expert-placement "$work/routing.json" --redundant-experts "$r") - weights_bytes ))
    rows+=("$routing R=$r $m_before $m_after $m_time $p_mean $p_worst $(ib_elements "$work/placed.traffic") $m_bytes")
  done
done

echo
echo "expert placement: seed model (8 layers, 32 experts top-2, d 64), seed plan (EP 16 per stage),"
echo "  placed from set A's routing ($prompts prompts), measured on set B ($prompts other prompts; text: paragraphs,"
echo "  $(wc -l < "$work/words-A.txt") and $(wc -l < "$work/words-B.txt") of up to 96 tokens);"
echo "  max/mean: the busiest EP rank's expert rows over the mean; modeled on A, measured (prefill) on B;"
echo "  layers 1-7 (the narrowed last layer computes one row per request: left out);"
echo "  time: modeled EP time of a layer (busiest rank's rows) over the contiguous placement's, mean over layers;"
echo "  IB elems: f32 elements dispatch and combine send over IB per GPU and layer (measured on B, hierarchical:"
echo "    the EP group of a stage spans 2 nodes of 8); a replica on the row's own node keeps it off IB"
echo "  replicas B: the f32 weight bytes the replicas add to rank 0 (its stage's 4 layers), beside its $weights_bytes bytes of weights"
printf '%-12s %-11s %13s %13s %8s %15s %16s %10s %12s\n' routing placement "modeled cont." "modeled plac." time "measured mean" "measured worst" "IB elems" "replicas B"
for row in "${rows[@]}"; do
  read -r routing what mb ma mt pm pw ib bytes <<< "$row"
  printf '%-12s %-11s %13s %13s %8s %15s %16s %10s %12s\n' "$routing" "$what" "$mb" "$ma" "$mt" "$pm" "$pw" "$ib" "$bytes"
done
