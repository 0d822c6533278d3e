#!/usr/bin/env bash
# Benchmark (not a test): generation on the seed model compiled with
# --decode, on one rank and on the seed plan (TP2 x CP2 x DP4 x PP2, 32 ranks
# of the local backend), for 1, 8 and 32 concurrent requests of a 64-token
# prompt (all arrive at once; each DP replica decodes its live requests as
# one batch): time to first token (from the start, its wait for earlier
# prefills included), time per output token (a decode step of the batch,
# with its choice), and the run's tokens/s (every generated token over the
# wall time of all prefills and steps), against re-running prefill for
# every new token (what a prefill-only program must do: one request after
# another on each replica). Times are the program's own (--report decode),
# free of process start and weight load. On a machine with fewer cores than
# ranks the 32 ranks share them: the seed plan's figures are then its
# overheads, not its speed. The paged K/V cache's figures (memory, chunked
# prefill, prefix caching) are bench/kv-cache.sh's, which this runs last.
#
#   bench/decode.sh [BUILD_DIR] [N]   (N: repetitions, median; default 3)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=3
# shellcheck source=bench/common.sh
. "$here/common.sh"
new=32
prompt=64
seed_model_and_weights
"$bin/meshfold-compile" "$work/model.mlir" --decode -o "$work/one"
"$bin/meshfold-compile" "$work/model.mlir" --decode --tp 2 --cp 2 --dp 4 --pp 2 -o "$work/seed"

# Prompts: `count` lines of `prompt` ids (deterministic, in the vocabulary).
prompts() {
  awk -v n="$1" -v t="$2" 'BEGIN { for (r = 0; r < n; ++r) {
    line = ""; for (i = 0; i < t; ++i) line = line (i ? " " : "") (r * 131 + i * 17) % 512
    print line } }' > "$3"
}
# The --report decode lines of program $prog for prompts file $1 and flags
# $2...
report() {
  "$work/$prog" --weights "$work/w.safetensors" --prompts "$1" \
    --out "$work/o.safetensors" --report decode "${@:2}" | grep 'decode:'
}
# Median of `reps` values of the awk program $1 over the report of $2...
median_of() {
  local sum="$1"; shift
  for _ in $(seq "$reps"); do report "$@" | awk "$sum"; done | median
}
sum_prefill='/^req/ { for (i = 1; i <= NF; ++i) if ($i == "prefill") s += $(i + 1) } END { print s }'

printf 'seed model (8 layers, 32 experts top-2, d 64), %d-token prompts, %d new tokens, medians of %d runs\n\n' "$prompt" "$new" "$reps"
printf '%-10s %9s %9s %9s %10s %12s\n' program requests "TTFT ms" "TPOT ms" "tokens/s" "vs prefill"
prompts 1 "$prompt" "$work/one.txt"
awk -v n="$new" '{ for (s = 0; s < n; ++s) { line = $0; for (i = 0; i < s; ++i) line = line " " (i * 7 + 1) % 512; print line } }' \
  "$work/one.txt" > "$work/grow.txt"
# The seed plan twice: the whole batch as one step (the default), and one
# micro-batch per pipeline stage (--micro-batches 2).
for label in one seed seed-mb2; do
  prog=${label%-mb2}
  extra=()
  [ "$label" = seed-mb2 ] && extra=(--micro-batches 2)
  replicas=1
  [ "$prog" = seed ] && replicas=4
  # Re-running prefill per token: a prompt grown one token per step, each
  # length its own request (prefill only, one at a time); their prefill
  # times summed: one request's n tokens.
  regrow=$(median_of "$sum_prefill" "$work/grow.txt" --max-new-tokens 1 --max-batch 1)
  for count in 1 8 32; do
    prompts "$count" "$prompt" "$work/p.txt"
    flags=(--max-new-tokens "$new" --ignore-eos "${extra[@]}")
    # One report per repetition; each figure's median over them.
    for i in $(seq "$reps"); do report "$work/p.txt" "${flags[@]}" > "$work/r$i.txt"; done
    t1=$(for i in $(seq "$reps"); do awk "$decode_ttft" "$work/r$i.txt"; done | median)
    t2=$(for i in $(seq "$reps"); do awk "$decode_tpot" "$work/r$i.txt"; done | median)
    tps=$(for i in $(seq "$reps"); do awk "$decode_rate" "$work/r$i.txt"; done | median)
    awk -v p="$label" -v c="$count" -v t1="$t1" -v t2="$t2" -v tps="$tps" -v regrow="$regrow" \
      -v n="$new" -v r="$replicas" 'BEGIN {
      rounds = int((c + r - 1) / r)
      printf "%-10s %9d %9.3f %9.3f %10.1f %11.1fx\n", p, c, t1, t2, tps, tps / (1e3 * c * n / (rounds * regrow)) }'
  done
done
printf '\nTTFT: from the start to a request'"'"'s first token (the prefills before its own included),\n'
printf 'mean over the requests; TPOT: a decode step of the batch with its choices, mean over the\n'
printf 'requests; tokens/s: all generated tokens over the wall time of every prefill and step;\n'
printf 'vs prefill: over the tokens/s of re-running prefill (%d prefills of %d..%d tokens per\n' "$new" "$prompt" "$((prompt + new - 1))"
printf 'request, one request at a time per replica). seed-mb2: the seed plan with --micro-batches 2.\n'
printf '\n'
"$here/kv-cache.sh" "$build" "$reps"
