#!/usr/bin/env bash
# Benchmark (not a test): generation on the seed model, one rank, compiled
# with --decode: time to first token, time per output token and tokens/s for
# 1, 8 and 32 concurrent requests of a 64-token prompt, against re-running
# prefill for every new token (what a prefill-only program must do).
# The seed plan (32 ranks) is not measured: the decode step of a partitioned
# plan is not built yet.
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
"$bin/meshfold-compile" "$work/model.mlir" --decode -o "$work/gen"

# Prompts: `count` lines of `prompt` ids (deterministic, in the vocabulary).
prompts() {
  awk -v n="$1" -v t="$2" 'BEGIN { for (r = 0; r < n; ++r) {
    line = ""; for (i = 0; i < t; ++i) line = line (i ? " " : "") (r * 131 + i * 17) % 512
    print line } }' > "$3"
}
# Median seconds of `reps` runs of the program.
time_runs() {
  local times=() t0 t1
  for _ in $(seq "$reps"); do
    t0=$(now); "$@" --quiet; t1=$(now)
    times+=("$(elapsed "$t0" "$t1")")
  done
  printf '%s\n' "${times[@]}" | median
}
run() { time_runs "$work/gen" --weights "$work/w.safetensors" --prompts "$1" --out "$work/o.safetensors" "${@:2}"; }

prompts 1 1 "$work/one.txt"
load=$(run "$work/one.txt")
printf 'seed model (8 layers, 32 experts top-2, d 64), one rank, %d-token prompts, %d new tokens, medians of %d runs\n' "$prompt" "$new" "$reps"
printf 'load (weights, setup, a 1-token prefill): %.3f s\n\n' "$load"
printf '%11s %10s %10s %11s %12s\n' requests "TTFT ms" "TPOT ms" "tokens/s" "vs prefill"
for count in 1 8 32; do
  prompts "$count" "$prompt" "$work/p.txt"
  first=$(run "$work/p.txt" --max-new-tokens 1)
  all=$(run "$work/p.txt" --max-new-tokens "$new" --ignore-eos)
  # Re-running prefill per token: one request's prompt grown one token per
  # step, every length run as its own prefill.
  awk -v n="$new" '{ for (s = 0; s < n; ++s) { line = $0; for (i = 0; i < s; ++i) line = line " " (i * 7 + 1) % 512; print line } }' \
    <(head -n 1 "$work/p.txt") > "$work/grow.txt"
  regrow=$(run "$work/grow.txt")
  awk -v c="$count" -v n="$new" -v load="$load" -v first="$first" -v all="$all" -v regrow="$regrow" 'BEGIN {
    ttft = (first - load) / c; tpot = (all - first) / (c * (n - 1))
    per_req_decode = (all - load) / c; per_req_prefill = regrow - load
    printf "%11d %10.2f %10.3f %11.1f %11.1fx\n", c, 1e3 * ttft, 1e3 * tpot, c * n / (all - load), per_req_prefill / per_req_decode }'
done
printf '\nTTFT: (run with 1 new token - load) / requests; TPOT: the extra time of %d new tokens per token;\n' "$new"
printf 'tokens/s: generated tokens over the run minus load; vs prefill: re-running prefill for each of\n'
printf 'one request'"'"'s %d tokens (prompts of %d..%d tokens) over generating them (per request).\n' "$new" "$prompt" "$((prompt + new - 1))"
