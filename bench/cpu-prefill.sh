#!/usr/bin/env bash
# Benchmark (not a test): meshfold's one-rank CPU prefill against Hugging Face
# transformers' MixtralForCausalLM on current PyTorch, on the same weights,
# prompt and thread count, and GFLOP/s per op class (bench/cpu-ops against
# torch's sgemm on the same shapes). Prints one table at the end.
#
#   bench/cpu-prefill.sh [--build DIR] [--tokens 256,2048] [--reps R]
#                        [--threads N] [--layers L] [--no-meshfold-above T]
#                        [--no-ops] [--mcpu CPU]
#
# The model is Mixtral-shaped: hidden 1024, ffn 2816, 16 heads / 8 KV heads
# of 64, 8 experts top-2, vocab 32000, 4 layers (--layers), f32 (1.42 GB).
# The Python side runs in a venv under the build folder (bench-venv), made on
# first use with torch, transformers and safetensors from PyPI.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
  cat <<'EOF'
Options:
  --build DIR            build folder (default: the repository's build/)
  --tokens LIST          prompt lengths, comma-separated (default 256,2048)
  --reps R               timed runs per measurement, median (default 3)
  --threads N            threads of both sides (default: all CPUs)
  --layers L             decoder layers of the model (default 4)
  --no-meshfold-above T  run only the transformers side and the op benches
                         for prompts longer than T (meshfold's prefill is slow)
  --no-ops               skip the per-op-class GFLOP/s
  --mcpu CPU             target CPU of meshfold's code (default: the compiler's)
  -h, --help             this text
EOF
}

build_dir="$here/../build"
token_list=256,2048
default_reps=3
threads="$(nproc)"
layers=4
mf_max_tokens=0
ops=1
mcpu=""
reps_arg=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build_dir="$2"; shift 2 ;;
    --tokens) token_list="$2"; shift 2 ;;
    --reps) reps_arg="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --no-meshfold-above) mf_max_tokens="$2"; shift 2 ;;
    --no-ops) ops=0; shift ;;
    --mcpu) mcpu="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cpu-prefill.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$threads" "$layers" "$mf_max_tokens" ${reps_arg:+"$reps_arg"}; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "cpu-prefill.sh: '$v' is not a number" >&2; exit 2; }
done
IFS=, read -r -a token_counts <<< "$token_list"
for t in "${token_counts[@]}"; do
  [[ "$t" =~ ^[0-9]+$ && "$t" -ge 8 && $((t % 4)) -eq 0 ]] ||
    { echo "cpu-prefill.sh: --tokens wants multiples of 4 from 8, got '$t'" >&2; exit 2; }
done
set -- "$build_dir" "$reps_arg"
build_hint="pass --build DIR"
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_need_tools meshfold-import-hf meshfold-gen-weights meshfold-compile
[[ -x /usr/bin/time ]] ||
  { echo "cpu-prefill.sh: /usr/bin/time is missing (Debian package 'time')" >&2; exit 1; }
if [[ "$ops" == 1 && ! -x "$bin/cpu-ops" ]]; then
  echo "cpu-prefill.sh: '$bin/cpu-ops' is missing (cmake --build $build --target cpu-ops); the op classes are skipped" >&2
  ops=0
fi
export OMP_NUM_THREADS="$threads"
say() { printf '[cpu-prefill %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The venv with torch, transformers and safetensors (scripts/torch-venv.sh),
# made once.
venv="$build/bench-venv"
py="$venv/bin/python"
if [[ ! -f "$venv/.cpu-prefill-ready" ]]; then
  say "making the Python venv $venv (torch, transformers, safetensors from PyPI; some GB)"
  "$here/../scripts/torch-venv.sh" "$venv" || exit 1
fi
peer() { "$py" "$here/cpu-prefill.py" "$@"; }
declare -A info
while read -r key value; do info[$key]="$value"; done < <(peer info 2>/dev/null)

bench_mixtral_config "$layers" float32 > "$work/config.json"
say "model: meshfold-import-hf, meshfold-gen-weights (f32, seed 1), meshfold-compile"
"$bin/meshfold-import-hf" "$work/config.json" -o "$work/model.mlir"
"$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 -o "$work/w.safetensors"
compile_flags=()
[[ -n "$mcpu" ]] && compile_flags=(-mcpu "$mcpu")
t0=$(now)
"$bin/meshfold-compile" "$work/model.mlir" "${compile_flags[@]}" -o "$work/prefill"
compile_s=$(elapsed "$t0" "$(now)")
mf_flags=(--quiet)
if "$work/prefill" --help 2>&1 | grep -q -e '--threads'; then
  mf_flags+=(--threads "$threads")
  mf_threads="$threads"
else
  mf_threads="n/a (no --threads; OMP_NUM_THREADS=$threads)"
fi

# Deterministic token ids, T of them on one line.
prompt() { awk -v t="$1" 'BEGIN {for (i = 0; i < t; i++) printf "%s%d", (i ? " " : ""), (i * 7919 + 11) % 32000; print ""}'; }
# Runs the compiled program on prompt file $1: prints "SECONDS PEAK_RSS_KB".
mf_run() {
  local t0 t1
  t0=$(now)
  /usr/bin/time -f %M -o "$work/rss" "$work/prefill" --weights "$work/w.safetensors" \
    --prompts "$1" --out "$work/out.safetensors" "${mf_flags[@]}"
  t1=$(now)
  echo "$(elapsed "$t0" "$t1") $(cat "$work/rss")"
}
# The median of field $1 of lines on stdin.
median_of() { awk -v f="$1" '{print $f}' | median; }

prompt 1 > "$work/p1.txt"
results=()
op_rows=()
for t in "${token_counts[@]}"; do
  prompt "$t" > "$work/p.txt"
  say "T=$t: transformers, $reps timed forwards after a warm-up, $threads threads"
  /usr/bin/time -f %M -o "$work/peer-rss" "$py" "$here/cpu-prefill.py" peer "$work/config.json" \
    "$work/w.safetensors" "$work/p.txt" "$work/peer.safetensors" \
    --threads "$threads" --reps "$reps" > "$work/peer.txt"
  hf_s=$(awk '$1 == "peer_run_s" {print $2}' "$work/peer.txt")
  hf_load=$(awk '$1 == "peer_load_s" {print $2}' "$work/peer.txt")
  hf_attn=$(awk '$1 == "peer_attn" {print $2}' "$work/peer.txt")
  hf_rss=$(cat "$work/peer-rss")
  if [[ "$mf_max_tokens" -gt 0 && "$t" -gt "$mf_max_tokens" ]]; then
    say "T=$t: meshfold skipped (--no-meshfold-above $mf_max_tokens)"
    results+=("$t - - - $hf_s $hf_load - - $hf_rss - - -")
  else
    say "T=$t: meshfold, a 1-token warm-up, $reps timed runs, $reps 1-token runs (load time)"
    mf_run "$work/p1.txt" > /dev/null
    : > "$work/mf.txt"
    for i in $(seq "$reps"); do
      mf_run "$work/p.txt" >> "$work/mf.txt"
      say "T=$t: meshfold run $i: $(tail -n 1 "$work/mf.txt" | awk '{printf "%.2f s, %d MB", $1, $2 / 1024}')"
    done
    cp "$work/out.safetensors" "$work/mf-out.safetensors"
    : > "$work/mf1.txt"
    for _ in $(seq "$reps"); do mf_run "$work/p1.txt" >> "$work/mf1.txt"; done
    mf_s=$(median_of 1 < "$work/mf.txt")
    mf_rss=$(median_of 2 < "$work/mf.txt")
    mf_load=$(median_of 1 < "$work/mf1.txt")
    mf_load_rss=$(median_of 2 < "$work/mf1.txt")
    mf_excl=$(awk -v a="$mf_s" -v b="$mf_load" 'BEGIN {print a - b}')
    peer check "$work/mf-out.safetensors" "$work/peer.safetensors" > "$work/check.txt"
    argmax=$(awk '$1 == "check_argmax" {print $2 "/" $3}' "$work/check.txt")
    relerr=$(awk '$1 == "check_rel_err" {print $2}' "$work/check.txt")
    agree=$(awk '$1 == "check_agree" {print $2}' "$work/check.txt")
    say "T=$t: next token meshfold/transformers $argmax, logits max error / max |logit| $relerr"
    results+=("$t $mf_s $mf_load $mf_excl $hf_s $hf_load $mf_rss $mf_load_rss $hf_rss $argmax $relerr $agree")
  fi
  if [[ "$ops" == 1 ]]; then
    say "T=$t: op classes, meshfold's code (cpu-ops) and torch"
    ops_flags=(--tokens "$t" --reps "$reps")
    [[ -n "$mcpu" ]] && ops_flags+=(--mcpu "$mcpu")
    "$bin/cpu-ops" "${ops_flags[@]}" > "$work/mf-ops.txt"
    peer ops "$t" --threads "$threads" --reps "$reps" > "$work/hf-ops.txt"
    for cls in linear router experts attention lm_head; do
      mf=$(awk -v c="$cls" '$1 == "op" && $2 == c && NF == 4 {printf "%.0f %.9f", $3, $4}' "$work/mf-ops.txt")
      hf_cls="$cls"
      [[ "$cls" == attention ]] && hf_cls=attention-sdpa
      hf=$(awk -v c="$hf_cls" '$1 == "op" && $2 == c {printf "%.0f %.9f", $3, $4}' "$work/hf-ops.txt")
      mm=""
      [[ "$cls" == attention ]] &&
        mm=$(awk '$1 == "op" && $2 == "attention-matmul" {printf "%.2f", $3 / $4 * 1e-9}' "$work/hf-ops.txt")
      op_rows+=("$t $cls ${mf:-- -} ${hf:-- -} ${mm:--}")
    done
  fi
done

echo
echo "cpu-prefill: Mixtral-shaped, $layers layers, hidden 1024, ffn 2816, 16/8 heads x 64, 8 experts top-2, vocab 32000, f32"
echo "  threads: transformers $threads, meshfold $mf_threads; medians of $reps runs; compile $(printf '%.1f' "$compile_s") s"
echo "  torch ${info[info_torch]:-?}, transformers ${info[info_transformers]:-?}, attention '${hf_attn:-?}', mkldnn(oneDNN) ${info[info_mkldnn]:-?}, mkl ${info[info_mkl]:-?}; ${info[info_config]:-}"
echo "  meshfold load = a 1-token run (weights, setup, 1 token); excl. load = full run - that"
echo "  spd = transformers' forward time / meshfold's time (incl. / excl. load): above 1, meshfold is faster"
echo "  MB = peak RSS (meshfold: full run/1-token run; transformers: the whole process, torch included)"
printf '%6s %11s %9s %11s %10s %8s %10s %10s %11s %7s %11s %9s %5s\n' T "mf s(incl)" "mf load" "mf s(excl)" "hf s" "hf load" "spd(incl)" "spd(excl)" "mf MB" "hf MB" "argmax m/h" "rel err" agree
for row in "${results[@]}"; do
  read -r t mf_s mf_load mf_excl hf_s hf_load mf_rss mf_load_rss hf_rss argmax relerr agree <<< "$row"
  awk -v t="$t" -v a="$mf_s" -v l="$mf_load" -v e="$mf_excl" -v h="$hf_s" -v hl="$hf_load" \
      -v mr="$mf_rss" -v ml="$mf_load_rss" -v hr="$hf_rss" -v am="$argmax" -v re="$relerr" -v ag="$agree" 'BEGIN {
    printf "%6d %11s %9s %11s %10.4f %8.2f %10s %10s %11s %7d %11s %9s %5s\n", t,
      (a == "-" ? "-" : sprintf("%.3f", a)), (l == "-" ? "-" : sprintf("%.3f", l)),
      (e == "-" ? "-" : sprintf("%.3f", e)), h, hl,
      (a == "-" ? "-" : sprintf("%.4fx", h / a)),
      (e == "-" || e <= 0 ? "-" : sprintf("%.4fx", h / e)),
      (mr == "-" ? "-" : sprintf("%d/%d", mr / 1024, ml / 1024)),
      hr / 1024, am, re, ag }'
done
if [[ ${#op_rows[@]} -gt 0 ]]; then
  echo
  echo "GFLOP/s per op class (useful flops; attention causal; torch: F.linear / sdpa on the same shapes, $threads threads)"
  printf '%6s %-10s %10s %12s %12s %10s %16s\n' T class GFLOP "meshfold" "torch" "mf/torch" "torch matmul(sq)"
  for row in "${op_rows[@]}"; do
    read -r t cls mf_f mf_t hf_f hf_t mm <<< "$row"
    awk -v t="$t" -v c="$cls" -v mf="$mf_f" -v mt="$mf_t" -v hf="$hf_f" -v ht="$hf_t" -v mm="$mm" 'BEGIN {
      g = (mf != "-" ? mf : hf) * 1e-9
      a = (mf == "-" ? "-" : sprintf("%.2f", mf / mt * 1e-9))
      b = (hf == "-" ? "-" : sprintf("%.2f", hf / ht * 1e-9))
      r = (mf == "-" || hf == "-" ? "-" : sprintf("%.4f", (mf / mt) / (hf / ht)))
      printf "%6d %-10s %10.3f %12s %12s %10s %16s\n", t, c, g, a, b, r, mm }'
  done
fi
for row in "${results[@]}"; do
  [[ "${row##* }" == no ]] && { echo "cpu-prefill.sh: meshfold's next token differs from transformers'" >&2; exit 1; }
done
exit 0
