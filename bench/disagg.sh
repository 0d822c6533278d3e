#!/usr/bin/env bash
# Benchmark (not a test): prefill and decode on separate pools against one
# mesh of the same total size, on the seed model (8 layers, 32 experts).
#   disagg: a prefill pool of TP2 x CP2 x DP2 (8 ranks) and a decode pool of
#           TP2 x DP4 (8 ranks), meshfold-compile --decode-plan
#   mesh:   TP2 x CP2 x DP4 (16 ranks), meshfold-compile --decode
# on a mix of long prompts with short generations and short prompts with
# long ones (all arriving at once): the mean time to first token and time
# per output token, and the run's tokens/s (--report decode: the
# program's own times, free of process start and weight load; the decode
# pool's figures for disagg), medians of N runs side by side. On a machine
# with fewer cores than ranks the ranks share them: the figures are then
# the two layouts' overheads, not their speed on a cluster.
#
#   bench/disagg.sh [BUILD_DIR] [N]   (N: repetitions, median; default 3)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=3
# shellcheck source=bench/common.sh
. "$here/common.sh"
seed_model_and_weights
echo "compiling the two programs (a minute or two each)" >&2
"$bin/meshfold-compile" "$work/model.mlir" --tp 2 --cp 2 --dp 2 \
  --decode-plan "tp=2 dp=4" -o "$work/disagg"
"$bin/meshfold-compile" "$work/model.mlir" --decode --tp 2 --cp 2 --dp 4 \
  -o "$work/mesh"

# 16 requests, alternating prompts of 512 and 32 tokens, each generating 64
awk 'BEGIN { for (r = 0; r < 16; ++r) { t = r % 2 ? 32 : 512; line = "";
  for (i = 0; i < t; ++i) line = line (i ? " " : "") (r * 131 + i * 17) % 512
  print line } }' > "$work/p.txt"

printf 'seed model (8 layers, 32 experts top-2, d 64), 16 requests (8 of 512 prompt tokens, 8 of 32), 64 new tokens each, medians of %d runs\n\n' "$reps"
printf '%-8s %6s %10s %10s %10s\n' program ranks "TTFT ms" "TPOT ms" "tokens/s"
for prog in disagg mesh; do
  for i in $(seq "$reps"); do
    "$work/$prog" --weights "$work/w.safetensors" --prompts "$work/p.txt" \
      --out "$work/o.safetensors" --max-new-tokens 64 --ignore-eos \
      --report decode > "$work/$prog-$i.txt"
  done
  t1=$(for i in $(seq "$reps"); do awk "$decode_ttft" "$work/$prog-$i.txt"; done | median)
  t2=$(for i in $(seq "$reps"); do awk "$decode_tpot" "$work/$prog-$i.txt"; done | median)
  tps=$(for i in $(seq "$reps"); do awk "$decode_rate" "$work/$prog-$i.txt"; done | median)
  printf '%-8s %6d %10.3f %10.3f %10.1f\n' "$prog" 16 "$t1" "$t2" "$tps"
done
printf '\nTTFT: from the start to a request'"'"'s first token (its wait for earlier prefills\n'
printf 'included), mean over the requests; TPOT: a decode step of the batch with its choices,\n'
printf 'mean over the requests; tokens/s: all generated tokens over the decode side'"'"'s wall time.\n'
