#!/usr/bin/env bash
# Benchmark (not a test): generation on the seed model compiled with
# --decode, on one rank and on the seed plan (TP2 x CP2 x DP4 x PP2, 32 ranks
# of the local backend): time to first token (the prefill that chooses it),
# time per output token and tokens/s for 1, 8 and 32 concurrent requests of
# a 64-token prompt, against re-running prefill for every new token (what a
# prefill-only program must do), each program against its own prefill.
# Times are the program's own (--report decode), free of process start and
# weight load. On a machine with fewer cores than ranks the 32 ranks share
# them: the seed plan's figures are then its overheads, not its speed.
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
    --out "$work/o.safetensors" --report decode "${@:2}" | grep '^req .*: decode:'
}
# Median of `reps` values of the awk program $1 over the report of $2...
median_of() {
  local sum="$1"; shift
  for _ in $(seq "$reps"); do report "$@" | awk "$sum"; done | median
}
ttft='{ for (i = 1; i <= NF; ++i) if ($i == "prefill") s += $(i + 1); n++ } END { print s / n }'
tpot='{ for (i = 1; i <= NF; ++i) if ($i == "steps" && $(i + 2) == "ms") s += $(i + 1); n++ } END { print s / n }'
sum_prefill='{ for (i = 1; i <= NF; ++i) if ($i == "prefill") s += $(i + 1) } END { print s }'

printf 'seed model (8 layers, 32 experts top-2, d 64), %d-token prompts, %d new tokens, medians of %d runs\n\n' "$prompt" "$new" "$reps"
printf '%-10s %9s %9s %9s %10s %12s\n' program requests "TTFT ms" "TPOT ms" "tokens/s" "vs prefill"
prompts 1 "$prompt" "$work/one.txt"
awk -v n="$new" '{ for (s = 0; s < n; ++s) { line = $0; for (i = 0; i < s; ++i) line = line " " (i * 7 + 1) % 512; print line } }' \
  "$work/one.txt" > "$work/grow.txt"
for prog in one seed; do
  # Re-running prefill per token: a prompt grown one token per step, each
  # length its own request (prefill only); their prefill times summed.
  regrow=$(median_of "$sum_prefill" "$work/grow.txt" --max-new-tokens 1)
  for count in 1 8 32; do
    prompts "$count" "$prompt" "$work/p.txt"
    flags=(--max-new-tokens "$new" --ignore-eos)
    t1=$(median_of "$ttft" "$work/p.txt" "${flags[@]}")
    t2=$(median_of "$tpot" "$work/p.txt" "${flags[@]}")
    awk -v p="$prog" -v c="$count" -v t1="$t1" -v t2="$t2" -v regrow="$regrow" -v n="$new" 'BEGIN {
      per = t1 + t2 * (n - 1)
      printf "%-10s %9d %9.3f %9.3f %10.1f %11.1fx\n", p, c, t1, t2, 1e3 * n / per, regrow / per }'
  done
done
printf '\nTTFT: a request'"'"'s prefill (its logits choose the first token); TPOT: a decode step with\n'
printf 'its choice; tokens/s: a request'"'"'s tokens over its prefill and decode time (a replica runs its\n'
printf 'requests one after another: no batching yet; the seed plan'"'"'s 4 replicas run 4 at once); vs prefill:\n'
printf '%d prefills of %d..%d tokens on the same program, what a\n' "$new" "$prompt" "$((prompt + new - 1))"
printf 'prefill-only program runs for %d tokens, over TTFT + %d TPOT.\n' "$new" "$((new - 1))"
