#!/usr/bin/env bash
# Benchmark (not a test): decode steps over long K/V histories, two builds
# side by side, e.g. before and after a change to how a step's attention
# reads the paged cache (docs/design.md §6). The seed model (8 layers), one
# rank, --decode, --no-kv-out; each build compiles the model with its own
# meshfold-compile, and the two programs run alternated (A B A B):
#  1. the seed model: 8 requests of 2,000 tokens, 64 new tokens each: the time per step
#     while all decode (--report decode's "decode steady") and tokens/s;
#  2. 32 requests of 16..1024 tokens, 32 new tokens each: tokens/s;
#  3. the CPU benchmarks' Mixtral-shaped model (2 layers, 8 KV heads of 64,
#     weights bf16): 4 requests of 1,536 tokens, 32 new tokens each, the
#     steady time per step.
# Prints the medians of N rounds and the ratios B / A.
#
#   bench/decode-history.sh BUILD_A BUILD_B [N]   (N: rounds; default 3)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_reps=3
build_hint="pass two build folders: BUILD_A BUILD_B [N]"
if [[ $# -lt 2 || ! -x "$1/bin/meshfold-compile" ]]; then
  echo "$(basename "$0"): usage: $(basename "$0") BUILD_A BUILD_B [N] (BUILD_A: a build folder with bin/meshfold-compile)" >&2
  exit 1
fi
bin_a="$(cd "$1" && pwd)/bin"
shift
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_need_tools meshfold-import-hf meshfold-gen-weights meshfold-compile
seed_model_and_weights
"$bin_a/meshfold-compile" "$work/model.mlir" --decode -o "$work/a"
"$bin/meshfold-compile" "$work/model.mlir" --decode -o "$work/b"
mkdir -p "$work/mid"
bench_mixtral_config 2 bfloat16 > "$work/mid/config.json"
"$bin/meshfold-import-hf" "$work/mid/config.json" -o "$work/mid/model.mlir"
"$bin/meshfold-gen-weights" "$work/mid/model.mlir" --seed 1 --dtype bf16 -o "$work/mid/w.safetensors"
"$bin_a/meshfold-compile" "$work/mid/model.mlir" --decode --weight-dtype bf16 -o "$work/mid-a"
"$bin/meshfold-compile" "$work/mid/model.mlir" --decode --weight-dtype bf16 -o "$work/mid-b"

awk 'BEGIN { for (r = 0; r < 8; ++r) { line = ""; for (i = 0; i < 2000; ++i)
  line = line (i ? " " : "") (r * 131 + i * 17) % 512; print line } }' > "$work/long.txt"
awk 'BEGIN { for (r = 0; r < 32; ++r) { t = 16 + (r * 337) % 1009; line = ""
  for (i = 0; i < t; ++i) line = line (i ? " " : "") (r * 131 + i * 17) % 512; print line } }' > "$work/mixed.txt"
awk 'BEGIN { for (r = 0; r < 4; ++r) { line = ""; for (i = 0; i < 1536; ++i)
  line = line (i ? " " : "") (r * 7919 + i * 31) % 32000; print line } }' > "$work/mid.txt"
run() {
  local prog="$1" out="$2" weights="$work/w.safetensors"; shift 2
  [[ "$prog" == mid-* ]] && weights="$work/mid/w.safetensors"
  "$work/$prog" --weights "$weights" --out "$work/o.safetensors" --no-kv-out \
    --ignore-eos --report decode "$@" > "$out"
}
for i in $(seq "$reps"); do
  for p in a b; do
    run "$p" "$work/$p-long$i.txt" --prompts "$work/long.txt" --max-new-tokens 64
    run "$p" "$work/$p-mixed$i.txt" --prompts "$work/mixed.txt" --max-new-tokens 32
    run "mid-$p" "$work/$p-mid$i.txt" --prompts "$work/mid.txt" --max-new-tokens 32
  done
done
med() { for i in $(seq "$reps"); do awk "$1" "$work/$2$i.txt"; done | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", b / a }'; }
printf 'one rank, medians of %d alternated rounds\n' "$reps"
printf 'A: %s\nB: %s\n\n' "$(dirname "$bin_a")" "$build"
printf '%-46s %10s %10s %8s\n' "" A B "B / A"
for row in "8 x 2,000 tokens: ms per steady step|$decode_steady|long" \
           "8 x 2,000 tokens: tokens/s|$decode_rate|long" \
           "32 x 16..1,024 tokens: tokens/s|$decode_rate|mixed" \
           "mid model, 4 x 1,536 tokens: ms per steady step|$decode_steady|mid"; do
  IFS='|' read -r name prog file <<< "$row"
  a=$(med "$prog" "a-$file"); b=$(med "$prog" "b-$file")
  printf '%-46s %10.2f %10.2f %8s\n' "$name" "$a" "$b" "$(ratio "$a" "$b")"
done
