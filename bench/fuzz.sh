#!/usr/bin/env bash
# Fuzzing (not a test): runs each libFuzzer target of fuzz/ (built by clang
# with ASan and UBSan in BUILD/fuzz when clang-22 and libfuzzer-22-dev are
# installed) from a seed corpus of real files: configs, prompts files of every
# kind, safetensors files and a checkpoint index written by
# meshfold-gen-weights, tokenizer.json files (one trained with Hugging Face
# tokenizers), a SentencePiece model trained with spm_train, plan texts and a
# manifest taken from a compiled program. Prints one line per target: inputs
# run, seconds, crashes (each crash's input is kept under WORK/crashes); exits
# 1 if any target crashed.
#
#   bench/fuzz.sh [--build DIR] [--runs N | --time S] [--target NAME]...
#                 [--work DIR]
#
# Default: every target, 1,000,000 inputs each (--time S: S seconds each
# instead), in build/, work in a temporary folder.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/.."
build="$src/build"
limit=(-runs=1000000)
targets=()
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    --time) limit=(-max_total_time="$2"); shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    --work) work="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
build="$(cd "$build" && pwd)"
bin="$build/bin"
fuzz="$build/fuzz/bin"
if [ ! -d "$fuzz" ]; then
  echo "fuzz.sh: no fuzz targets in $fuzz (install clang-22 and" \
       "libfuzzer-22-dev, then configure and build again)" >&2
  exit 2
fi
all=(safetensors checkpoint-index hf-config prompts tokenizer-json
     tokenizer-encode sentencepiece plan-text manifest)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [ -x "$fuzz/$t-fuzzer" ] || { echo "fuzz.sh: no target '$t' (targets:" \
    "${all[*]})" >&2; exit 2; }
done
if [ -z "$work" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/seeds" "$work/crashes"
inputs="$src/test/e2e/Inputs"

# Seeds: real files of each kind.
seeds() {
  local t="$1" d="$work/seeds/$1"
  [ -d "$d" ] && return
  mkdir -p "$d"
  case "$t" in
    safetensors|checkpoint-index|manifest|plan-text)
      if [ ! -f "$work/tiny.mlir" ]; then
        "$bin/meshfold-import-hf" "$inputs/tiny.json" -o "$work/tiny.mlir"
        "$bin/meshfold-gen-weights" "$work/tiny.mlir" --seed 1 -o "$work/tiny.safetensors"
        "$bin/meshfold-gen-weights" "$work/tiny.mlir" --seed 1 --dtype bf16 -o "$work/tiny-bf16.safetensors"
        "$bin/meshfold-gen-weights" "$work/tiny.mlir" --seed 1 --shards 2 -o "$work/ckpt"
      fi ;;
  esac
  case "$t" in
    safetensors)
      cp "$work/tiny.safetensors" "$work/tiny-bf16.safetensors" "$work"/ckpt/*.safetensors "$d/" ;;
    checkpoint-index)
      cp "$work/ckpt/model.safetensors.index.json" "$d/"
      printf '{"metadata": {"total_size": 8}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}' > "$d/one.json" ;;
    hf-config)
      cp "$src/python-free-examples/seed/config.json" "$d/seed.json"
      cp "$inputs"/*.json "$d/"
      rm -f "$d/tokenizer-512.json" ;;
    prompts)
      cp "$inputs"/*.txt "$inputs"/*.jsonl "$d/" ;;
    tokenizer-json)
      cp "$inputs/tokenizer-512.json" "$d/"
      printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}}' > "$d/ab.json" ;;
    tokenizer-encode)
      cp "$inputs/text-prompts.txt" "$d/"
      printf 'caf\xc3\xa9 na\xc3\xafve \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 <|endoftext|> <s>\n\t  x' > "$d/mixed.txt" ;;
    sentencepiece)
      if command -v spm_train > /dev/null; then
        cat "$inputs/text-prompts.txt" "$src/README.md" > "$work/spm.txt"
        for kind in bpe unigram; do
          spm_train --input="$work/spm.txt" --model_prefix="$d/$kind" \
            --vocab_size=400 --character_coverage=0.99 --hard_vocab_limit=false \
            --model_type="$kind" \
            --byte_fallback=true --minloglevel=2 > "$work/spm-$kind.log" 2>&1 ||
            { echo "fuzz.sh: spm_train failed:" >&2; tail -3 "$work/spm-$kind.log" >&2; exit 2; }
        done
        rm -f "$d"/*.vocab
      fi ;;
    plan-text|manifest)
      if [ ! -f "$work/manifest.txt" ]; then
        "$bin/meshfold-compile" "$work/tiny.mlir" --tp 2 --pp 2 -o "$work/prog"
        python3 - "$work/prog" "$work/manifest.txt" "$work/plan.txt" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
start = data.index(b"meshfold-manifest 1\n")
manifest = data[start:data.index(b"\0", start)]
open(sys.argv[2], "wb").write(manifest)
plan = [l for l in manifest.split(b"\n") if l.startswith(b"plan ")][0][5:]
open(sys.argv[3], "wb").write(plan)
PY
      fi
      if [ "$t" = manifest ]; then cp "$work/manifest.txt" "$d/"; else
        cp "$work/plan.txt" "$d/"
        echo "devices=32 gpus_per_node=8 attention=tp:2,cp:2,dp:4,pp:2 experts=ep:16:tp+cp+dp,pp:2:pp" > "$d/seed.txt"
        echo "devices=4 gpus_per_node=8 attention=tp:2,cp:1,dp:2,pp:1 experts=etp:2:tp+cp+dp,ep:2:tp+cp+dp,pp:1:pp" > "$d/etp.txt"
      fi ;;
  esac
}

failed=0
for t in "${targets[@]}"; do
  seeds "$t"
  corpus="$work/corpus/$t"
  mkdir -p "$corpus"
  log="$work/$t.log"
  start=$(date +%s.%N)
  set +e
  ASAN_OPTIONS=detect_leaks=1 "$fuzz/$t-fuzzer" "${limit[@]}" -max_len=65536 \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/crashes/$t-" "$corpus" "$work/seeds/$t" > "$log" 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  crashes=$(find "$work/crashes" -name "$t-*" | wc -l)
  files=$(find "$corpus" -type f | wc -l)
  printf '%s: %s inputs in %.0f s, %d crashes, corpus %d files\n' "$t" \
    "${runs:-?}" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" \
    "$crashes" "$files"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    failed=1
    grep -m3 -E "ERROR|SUMMARY|runtime error|deadly signal" "$log" | sed "s/^/  $t: /" || true
  fi
done
exit "$failed"
