#!/usr/bin/env bash
# Benchmark (not a test): meshfold's CPU programs side by side with llama.cpp
# on the same Mixtral-architecture checkpoint, in f32 and in bf16 weights:
# prefill tokens/s, decode tokens/s for one stream and for 8 concurrent
# streams, the weight bytes a decode step reads over its time against the
# bandwidth of a STREAM-like copy, and peak RSS. Prints one table at the end.
#
#   bench/cpu-vs-llamacpp.sh [--build DIR] [--tokens 256,2048] [--reps R]
#                            [--threads N] [--layers L] [--dtypes f32,bf16]
#
# The model is the one of bench/cpu-prefill.sh: hidden 1024, ffn 2816,
# 16 heads / 8 KV heads of 64, 8 experts top-2, vocab 32000, 4 layers
# (--layers); weights from meshfold-gen-weights --seed 1 (f32, and --dtype
# bf16), written as Hugging Face folders (config.json with its torch_dtype,
# model.safetensors, a tokenizer) and converted to GGUF by llama.cpp's own
# convert_hf_to_gguf.py (--outtype f32 / bf16) in the bench venv
# (scripts/torch-venv.sh, build/bench-venv), with the sdist's gguf-py and
# sentencepiece (which the converter imports; installed beside llama.cpp,
# not into the venv). meshfold runs on that same folder. llama.cpp is the
# one vendored by PyPI's llama-cpp-python 0.3.36 sdist, downloaded and built
# once (CPU backend only, GGML_NATIVE, static; llama-bench and
# llama-batched-bench) under <build>/llamacpp.
#
# The converter wants a tokenizer: the script writes a Llama-style
# byte-fallback BPE in Hugging Face tokenizers' format (<unk> <s> </s>, the
# 256 byte tokens, no merges; the other ids unused [PAD<i>] pieces, as the
# converter pads a smaller SentencePiece vocabulary). Tokenization plays no
# part in the timings: meshfold gets a prompts file of token ids, and
# llama-bench / llama-batched-bench make up their own token ids.
#
# Timed, runs alternated (meshfold, llama.cpp, meshfold, ...), medians:
#   prefill of T tokens: llama-bench -p T -n 0 -r 1 (its time for the T
#     tokens) against the "prefill X ms" that meshfold's --report decode
#     prints per request (in-process: no process start nor weight load), of
#     the second of two same-size requests (the first warms up, as
#     llama-bench warms up before it times);
#   decode of S = 1 and 8 streams after 256-token prompts, 64 new tokens:
#     llama-batched-bench -npp 256 -ntg 64 -npl S (S_TG: its generation
#     phase, S tokens a step) against meshfold's --decode program on S
#     prompts with --max-new-tokens 64 --ignore-eos --report decode (its
#     "decode steady" time per step: the steps while all S requests decode,
#     from the last one's first token on, as S_TG times only the
#     generation phase; the S requests decode as one batch, which the
#     script checks: tokens/s = S * 1000 / step ms);
#   weight bytes a decode step reads over its time: per layer the attention
#     matrices, the router, the norms and the experts the step's tokens can
#     touch (top-2 for 1 stream; all 8 for 8 streams, an upper bound), plus
#     the final norm and the lm_head (the embedding rows and the K/V cache
#     are left out), against a STREAM-like copy of 1 GiB arrays (a C program
#     compiled here, OpenMP, --threads threads; read + write bytes);
#   peak RSS of the same runs (/usr/bin/time): meshfold's program, and
#     llama-bench (prefill) or llama-batched-bench (decode). meshfold runs
#     with --no-kv-out: llama.cpp writes no K/V either, and keeping every
#     request's K/V for the --out file would count memory the peer does not
#     hold (the paged cache is held alike).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
  cat <<'EOF'
Options:
  --build DIR      build folder (default: the repository's build/)
  --tokens LIST    prefill prompt lengths, comma-separated (default 256,2048)
  --reps R         timed runs per measurement and side, median (default 3)
  --threads N      threads of both sides (default 2)
  --layers L       decoder layers of the model (default 4)
  --dtypes LIST    weight types, comma-separated: f32, bf16 (default both)
  -h, --help       this text
EOF
}

name="cpu-vs-llamacpp.sh"
build_dir="$here/../build"
token_list=256,2048
default_reps=3
threads=2
layers=4
dtype_list=f32,bf16
reps_arg=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build|--tokens|--reps|--threads|--layers|--dtypes)
      [[ $# -ge 2 ]] || { echo "$name: $1 wants a value (see --help)" >&2; exit 2; } ;;&
    --build) build_dir="$2"; shift 2 ;;
    --tokens) token_list="$2"; shift 2 ;;
    --reps) reps_arg="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --dtypes) dtype_list="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$name: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$threads" "$layers" ${reps_arg:+"$reps_arg"}; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "$name: '$v' is not a positive number" >&2; exit 2; }
done
IFS=, read -r -a token_counts <<< "$token_list"
[[ ${#token_counts[@]} -gt 0 ]] || { echo "$name: --tokens is empty" >&2; exit 2; }
for t in "${token_counts[@]}"; do
  [[ "$t" =~ ^[0-9]+$ && "$t" -ge 8 && $((t % 4)) -eq 0 ]] ||
    { echo "$name: --tokens wants multiples of 4 from 8, got '$t'" >&2; exit 2; }
done
IFS=, read -r -a dtypes <<< "$dtype_list"
[[ ${#dtypes[@]} -gt 0 ]] || { echo "$name: --dtypes is empty" >&2; exit 2; }
for d in "${dtypes[@]}"; do
  [[ "$d" == f32 || "$d" == bf16 ]] || { echo "$name: --dtypes wants f32 and/or bf16, got '$d'" >&2; exit 2; }
done
set -- "$build_dir" "$reps_arg"
build_hint="pass --build DIR"
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_need_tools meshfold-import-hf meshfold-gen-weights meshfold-compile
for tool in /usr/bin/time cmake ninja cc; do
  command -v "$tool" > /dev/null ||
    { echo "$name: '$tool' is missing (Debian packages time, cmake, ninja-build, gcc)" >&2; exit 1; }
done
export OMP_NUM_THREADS="$threads"
say() { printf '[cpu-vs-llamacpp %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
t_start=$(now)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# The venv with torch, transformers and safetensors (scripts/torch-venv.sh),
# made once; llama.cpp's converter runs in it too.
venv="$build/bench-venv"
py="$venv/bin/python"
if [[ ! -f "$venv/.cpu-prefill-ready" ]]; then
  say "making the Python venv $venv (torch, transformers, safetensors from PyPI; some GB)"
  "$here/../scripts/torch-venv.sh" "$venv" || exit 1
fi

# llama.cpp's tools and its converter (bench/common.sh).
bench_llamacpp OFF llama-bench llama-batched-bench

# A STREAM-like copy over two arrays of 1 GiB.
cat > "$work/copy.c" <<'EOF'
/* b[i] = a[i] over two arrays of 1 GiB, OpenMP static schedule, first touch
   by the same threads; the best of 10 passes in GB/s (read + write bytes,
   as STREAM counts them). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  const size_t n = ((size_t)1 << 30) / sizeof(double);
  double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
  if (!a || !b) { fprintf(stderr, "copy: out of memory\n"); return 1; }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) { a[i] = (double)i; b[i] = 0.0; }
  double best = 1e30;
  for (int pass = 0; pass < 10; ++pass) {
    double t = omp_get_wtime();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) b[i] = a[i];
    t = omp_get_wtime() - t;
    if (t < best) best = t;
  }
  for (size_t i = 0; i < n; i += 4096)
    if (b[i] != a[i]) { fprintf(stderr, "copy: wrong copy\n"); return 1; }
  printf("%.3f\n", 2.0 * n * sizeof(double) / best * 1e-9);
  return 0;
}
EOF
cc -O3 -march=native -fopenmp "$work/copy.c" -o "$work/copy" ||
  { echo "$name: cc -O3 -march=native -fopenmp failed on the copy benchmark" >&2; exit 1; }

# The checkpoint: a Hugging Face folder per dtype (config.json, weights,
# tokenizer), its GGUF, and meshfold's program compiled with --decode.
bench_mixtral_config "$layers" float32 > "$work/config.json"
"$bin/meshfold-import-hf" "$work/config.json" -o "$work/model.mlir"
declare -A compile_s gguf_mb
for d in "${dtypes[@]}"; do
  ckpt="$work/hf-$d"
  mkdir -p "$ckpt"
  torch_dtype=float32
  [[ "$d" == bf16 ]] && torch_dtype=bfloat16
  bench_mixtral_config "$layers" "$torch_dtype" > "$ckpt/config.json"
  say "$d: weights (meshfold-gen-weights --seed 1 --dtype $d), tokenizer, GGUF (convert_hf_to_gguf.py --outtype $d)"
  "$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 --dtype "$d" --quiet -o "$ckpt/model.safetensors"
  "$py" "$here/cpu-vs-llamacpp.py" tokenizer "$ckpt" 32000
  convert "$ckpt" --outtype "$d" --outfile "$work/$d.gguf" > "$work/convert-$d.log" 2>&1 ||
    { tail -n 5 "$work/convert-$d.log" >&2; echo "$name: convert_hf_to_gguf.py failed on the $d checkpoint" >&2; exit 1; }
  gguf_mb[$d]=$(( $(stat -c %s "$work/$d.gguf") / 1000000 ))
  say "$d: meshfold-compile --decode --weight-dtype $d"
  t0=$(now)
  "$bin/meshfold-compile" "$work/model.mlir" --decode --weight-dtype "$d" --quiet -o "$work/gen-$d"
  compile_s[$d]=$(elapsed "$t0" "$(now)")
done

# Token ids: `count` lines of `t` ids (deterministic, in the vocabulary,
# above the special ids), each line its own.
prompts() {
  awk -v n="$1" -v t="$2" 'BEGIN { for (r = 0; r < n; ++r) {
    line = ""; for (i = 0; i < t; ++i) line = line (i ? " " : "") 3 + (r * 131 + i * 7919 + 11) % 31997
    print line } }'
}
# meshfold's program for dtype $1 on prompts file $2, flags $3...: its
# --report decode lines in $work/mf.txt, its peak RSS (KB) in $work/mf-rss.
mf_run() {
  local d="$1" p="$2"; shift 2
  /usr/bin/time -f %M -o "$work/mf-rss" "$work/gen-$d" --weights "$work/hf-$d" --prompts "$p" \
    --out "$work/out.safetensors" --no-kv-out --threads "$threads" --quiet --ignore-eos --report decode "$@" |
    grep -E 'decode:|^decode steady:' > "$work/mf.txt"
}
# llama.cpp's tool $1 with flags $2...: its JSON line in $work/lc.txt, its
# peak RSS (KB) in $work/lc-rss.
lc_run() {
  local tool="$1"; shift
  local format=(-o jsonl)
  [[ "$tool" == llama-batched-bench ]] && format=(--output-format jsonl)
  /usr/bin/time -f %M -o "$work/lc-rss" "$llama_bin/$tool" "$@" -t "$threads" "${format[@]}" \
    2> "$work/lc-err.txt" | grep '^{' > "$work/lc.txt" ||
    { tail -n 5 "$work/lc-err.txt" >&2; echo "$name: $tool failed" >&2; exit 1; }
}
# The number after "KEY": in $work/lc.txt (one line), or a one-line error.
lc_field() {
  local v
  v=$(sed -n "s/.*\"$1\": *\\([-0-9.e+]*\\).*/\\1/p" "$work/lc.txt" | head -n 1)
  [[ -n "$v" ]] || { echo "$name: no \"$1\" in llama.cpp's JSON output" >&2; exit 1; }
  echo "$v"
}
# The median of field $1 of lines on stdin.
median_of() { awk -v f="$1" '{print $f}' | median; }

# Weight elements a decode step reads with `k` experts per layer: attention
# (q, k, v, o), router, the two norms and k experts (w1, w3, w2) per layer;
# the final norm and lm_head. The embedding rows and the K/V cache are left
# out (at most 8 x 320 positions: under 3% of the weights).
step_elems() {
  awk -v k="$1" -v l="$layers" 'BEGIN { h = 1024; f = 2816; kv = 8 * 64
    per = h * h * 2 + h * kv * 2 + 8 * h + 2 * h + k * 3 * h * f
    printf "%.0f\n", l * per + h + 32000 * h }'
}

say "STREAM-like copy, 1 GiB arrays, $threads threads"
copy_gbs=$(for _ in $(seq "$reps"); do OMP_NUM_THREADS="$threads" "$work/copy"; done | median)
say "copy: $copy_gbs GB/s"

# Rows of the table: dtype, what, llama.cpp's tool, meshfold tokens/s and ms,
# llama.cpp tokens/s and ms, meshfold MB, llama.cpp MB, weight MB per step.
rows=()
for d in "${dtypes[@]}"; do
  bytes=4
  [[ "$d" == bf16 ]] && bytes=2
  say "$d: warm-up (meshfold one 256-token request; llama-bench)"
  prompts 1 256 > "$work/warm.txt"
  mf_run "$d" "$work/warm.txt" --max-new-tokens 1
  lc_run llama-bench -m "$work/$d.gguf" -p 32 -n 0 -r 1
  lc_commit=$(sed -n 's/.*"build_commit": *"\([^"]*\)".*/\1/p' "$work/lc.txt")
  lc_defaults=$(sed -n 's/.*"n_batch": *\([0-9]*\).*"n_ubatch": *\([0-9]*\).*"type_k": *"\([^"]*\)".*"flash_attn": *\([-0-9]*\).*/n_batch \1, n_ubatch \2, K\/V cache \3, flash_attn \4/p' "$work/lc.txt" | sed 's/flash_attn -1$/flash_attn auto/')
  for t in "${token_counts[@]}"; do
    # meshfold: the same prompt twice in one run; the second request's
    # prefill is timed (the first warms the process up, as llama-bench's
    # warm-up does).
    prompts 1 "$t" > "$work/p.txt"
    cat "$work/p.txt" "$work/p.txt" > "$work/pp.txt"
    : > "$work/a.txt"
    : > "$work/b.txt"
    for i in $(seq "$reps"); do
      mf_run "$d" "$work/pp.txt" --max-new-tokens 1
      ms=$(awk '/^req 1:/ { for (i = 1; i <= NF; ++i) if ($i == "prefill") print $(i + 1) }' "$work/mf.txt")
      [[ -n "$ms" ]] || { echo "$name: no prefill time in meshfold's --report decode" >&2; exit 1; }
      echo "$ms $(cat "$work/mf-rss")" >> "$work/a.txt"
      lc_run llama-bench -m "$work/$d.gguf" -p "$t" -n 0 -r 1
      v=$(lc_field avg_ns)
      echo "$v $(cat "$work/lc-rss")" >> "$work/b.txt"
      say "$d prefill T=$t run $i: meshfold $(tail -n 1 "$work/a.txt" | awk -v t="$t" '{printf "%.1f tok/s", t * 1e3 / $1}'), llama.cpp $(tail -n 1 "$work/b.txt" | awk -v t="$t" '{printf "%.1f tok/s", t * 1e9 / $1}')"
    done
    mf_ms=$(median_of 1 < "$work/a.txt")
    lc_ms=$(median_of 1 < "$work/b.txt" | awk '{print $1 / 1e6}')
    rows+=("$d|prefill T=$t|llama-bench -p $t -n 0|$(awk -v t="$t" -v m="$mf_ms" -v l="$lc_ms" 'BEGIN {print t * 1e3 / m, m, t * 1e3 / l, l}') $(median_of 2 < "$work/a.txt") $(median_of 2 < "$work/b.txt") -")
  done
  for streams in 1 8; do
    prompts "$streams" 256 > "$work/p.txt"
    : > "$work/a.txt"
    : > "$work/b.txt"
    for i in $(seq "$reps"); do
      mf_run "$d" "$work/p.txt" --max-new-tokens 64
      ms=$(awk "$decode_steady" "$work/mf.txt")
      [[ -n "$ms" ]] || { echo "$name: no 'decode steady' line in meshfold's --report decode" >&2; exit 1; }
      # One batch of all the streams: 63 steps, batches of up to `streams`.
      batch=$(awk '/^decode:/ { for (i = 1; i <= NF; ++i) if ($i == "steps" && $(i - 2) == "in") s = $(i - 1)
        else if ($i == "up" && $(i + 1) == "to") b = $(i + 2); print s "/" b + 0 }' "$work/mf.txt")
      [[ "$batch" == "63/$streams" ]] ||
        { echo "$name: meshfold's decode of $streams streams ran steps/largest batch $batch, not 63/$streams" >&2; exit 1; }
      echo "$ms $(cat "$work/mf-rss")" >> "$work/a.txt"
      lc_run llama-batched-bench -m "$work/$d.gguf" -c $((streams * 320)) -npp 256 -ntg 64 -npl "$streams"
      v=$(lc_field speed_tg)
      echo "$v $(cat "$work/lc-rss")" >> "$work/b.txt"
      say "$d decode $streams stream(s) run $i: meshfold $(tail -n 1 "$work/a.txt" | awk -v s="$streams" '{printf "%.1f tok/s", s * 1e3 / $1}'), llama.cpp $(tail -n 1 "$work/b.txt" | awk '{printf "%.1f tok/s", $1}')"
    done
    mf_ms=$(median_of 1 < "$work/a.txt")
    lc_tps=$(median_of 1 < "$work/b.txt")
    k=2
    [[ "$streams" == 8 ]] && k=8
    mb=$(awk -v e="$(step_elems "$k")" -v b="$bytes" 'BEGIN {print e * b / 1e6}')
    rows+=("$d|decode ${streams}x(256+64)|batched-bench -npl $streams|$(awk -v s="$streams" -v m="$mf_ms" -v l="$lc_tps" 'BEGIN {print s * 1e3 / m, m, l, s * 1e3 / l}') $(median_of 2 < "$work/a.txt") $(median_of 2 < "$work/b.txt") $mb")
  done
done

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
has_flag() { grep -qw "$1" /proc/cpuinfo && echo yes || echo no; }
gguf_sizes=$(for d in "${dtypes[@]}"; do echo "$d ${gguf_mb[$d]} MB"; done | paste -sd, - | sed 's/,/, /g')
compile_times=$(for d in "${dtypes[@]}"; do printf '%s %.1f s\n' "$d" "${compile_s[$d]}"; done | paste -sd, - | sed 's/,/, /g')
echo
echo "cpu-vs-llamacpp: Mixtral-shaped, $layers layers, hidden 1024, ffn 2816, 16/8 heads x 64, 8 experts top-2, vocab 32000; weights seed 1"
echo "  CPU: ${cpu:-?}, $(nproc) CPUs; avx512f $(has_flag avx512f), avx512_bf16 $(has_flag avx512_bf16); threads $threads both sides;"
echo "  load average at the start ${load_start}, at the end $(cut -d' ' -f1-3 /proc/loadavg); medians of $reps runs, meshfold and llama.cpp alternated"
echo "  llama.cpp: llama-cpp-python $llama_version's vendor/llama.cpp (commit ${lc_commit:-?}), CPU backend, native, static;"
echo "    its defaults: ${lc_defaults:-?}; GGUF $gguf_sizes"
echo "  meshfold: one rank, --threads $threads, --no-kv-out, compiled with --decode --weight-dtype DTYPE ($compile_times);"
echo "    bf16: activations rounded to bf16 into the bf16 dot product where the CPU has AVX512_BF16 (--bf16-activations, the default)"
echo "  STREAM-like copy (1 GiB arrays, $threads threads): $copy_gbs GB/s"
echo "  prefill: meshfold's in-process 'prefill X ms' of --report decode (a first, same-size request warms up; not timed);"
echo "    llama-bench -p T -n 0 -r 1 (after its own warm-up)"
echo "  decode: S streams of a 256-token prompt, 64 new tokens (63 steps of the S streams); ms = time per step;"
echo "    meshfold --max-new-tokens 64 --ignore-eos --report decode: 'decode steady', the time per step while all S decode;"
echo "    llama-batched-bench -npp 256 -ntg 64 -npl S -c S*320: S_TG (its generation phase, S tokens per step)"
echo "  W MB: weight MB a step reads: attention, router, norms, lm_head and per layer the top-2 experts (1 stream) or"
echo "    all 8 (8 streams: an upper bound); GB/s = W MB / step ms, (% of the copy's GB/s). MB: peak RSS of the process"
printf '%-5s %-19s %-24s %9s %10s %9s %10s %8s %7s %7s %6s %13s %13s\n' dtype what "llama.cpp tool" "mf tok/s" "mf ms" "lc tok/s" "lc ms" "mf/lc" "mf MB" "lc MB" "W MB" "mf GB/s (%)" "lc GB/s (%)"
for row in "${rows[@]}"; do
  IFS='|' read -r d what tool figures <<< "$row"
  read -r mtps mms ltps lms mrss lrss wmb <<< "$figures"
  awk -v d="$d" -v w="$what" -v tool="$tool" -v a="$mtps" -v am="$mms" -v b="$ltps" -v bm="$lms" \
      -v mr="$mrss" -v lr="$lrss" -v wmb="$wmb" -v c="$copy_gbs" 'BEGIN {
    ma = (wmb == "-" ? "-" : sprintf("%.1f (%.0f%%)", wmb / am, 100 * wmb / am / c))
    la = (wmb == "-" ? "-" : sprintf("%.1f (%.0f%%)", wmb / bm, 100 * wmb / bm / c))
    printf "%-5s %-19s %-24s %9.1f %10.2f %9.1f %10.2f %7.3fx %7d %7d %6s %13s %13s\n", d, w, tool,
      a, am, b, bm, a / b, mr / 1024, lr / 1024, (wmb == "-" ? "-" : sprintf("%.0f", wmb)), ma, la }'
done
echo "  mf/lc: meshfold's tokens/s over llama.cpp's (above 1, meshfold is faster). The copy counts the bytes it reads and"
echo "  writes, not the reads its writes cause (write-allocate), so a step that only reads can pass 100%"
say "done in $(awk -v s="$(elapsed "$t_start" "$(now)")" 'BEGIN {printf "%.0f s", s}')"
