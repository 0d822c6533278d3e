#!/usr/bin/env bash
# Benchmark (not a test): meshfold's --serve beside llama.cpp's llama-server,
# both on CPU on the same Mixtral-architecture checkpoint in bf16, under N
# concurrent streaming clients (1, 8, 32): requests/s, output tokens/s, time
# to first token and inter-token latency (p50, p99), then a soak of
# meshfold's server. Prints one table at the end.
#
#   bench/serve.sh [--build DIR] [--clients 1,8,32] [--requests R]
#                  [--reps R] [--threads N] [--layers L] [--prompt-len P]
#                  [--max-tokens M] [--soak N] [--mf-flags "FLAGS"]
#
# The model, its checkpoint folder (tokenizer included) and its GGUF are
# bench/cpu-vs-llamacpp.sh's (bf16); llama-server is built from the same
# llama-cpp-python sdist (bench/common.sh, a build folder of its own).
# Each measurement starts its server afresh: meshfold's program with
# --serve 127.0.0.1:0 --max-batch N, llama-server with --parallel N and a
# context of N * (P + M + 16) (continuous batching, its default). The load
# (bench/serve-load.py, the standard library's HTTP client) sends each
# client's R requests one after the other: /v1/completions, P token ids
# (different per request), max_tokens M, temperature 0, ignore_eos, stream;
# a short request first warms the server up. Runs alternate (meshfold,
# llama.cpp, meshfold, ...); medians of R reps. Inter-token latency is the
# gap between streamed chunks as the client sees them; TPOT the mean time per
# token after the first. The soak (bench/serve-soak.py, --soak N requests,
# 16 clients, 0 skips it) mixes random lengths, 10% cancelled and 5%
# malformed requests, and reports whether any was lost and meshfold's RSS
# after the first 100 and at the end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
  cat <<'EOF2'
Options:
  --build DIR       build folder (default: the repository's build/)
  --clients LIST    concurrent clients, comma-separated (default 1,8,32)
  --requests R      requests per client (default 2)
  --reps R          timed runs per measurement and side, median (default 2)
  --threads N       threads of both servers (default 2)
  --layers L        decoder layers of the model (default 4)
  --prompt-len P    prompt tokens (default 128)
  --max-tokens M    tokens to generate per request (default 64)
  --soak N          requests of the soak (default 2000; 0: none)
  --mf-flags FLAGS  more flags for meshfold's server (e.g. "--prefill-chunk 32")
  -h, --help        this text
EOF2
}

name="serve.sh"
build_dir="$here/../build"
client_list=1,8,32
requests=2
default_reps=2
threads=2
layers=4
prompt_len=128
max_tokens=64
soak=2000
mf_flags=""
mf_settings=""
reps_arg=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build|--clients|--requests|--reps|--threads|--layers|--prompt-len|--max-tokens|--soak|--mf-flags)
      [[ $# -ge 2 ]] || { echo "$name: $1 wants a value (see --help)" >&2; exit 2; } ;;&
    --build) build_dir="$2"; shift 2 ;;
    --clients) client_list="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --reps) reps_arg="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --prompt-len) prompt_len="$2"; shift 2 ;;
    --max-tokens) max_tokens="$2"; shift 2 ;;
    --soak) soak="$2"; shift 2 ;;
    --mf-flags) mf_flags="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$name: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$requests" "$threads" "$layers" "$prompt_len" "$max_tokens" ${reps_arg:+"$reps_arg"}; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "$name: '$v' is not a positive number" >&2; exit 2; }
done
[[ "$soak" =~ ^[0-9]+$ ]] || { echo "$name: --soak wants a number, got '$soak'" >&2; exit 2; }
IFS=, read -r -a clients <<< "$client_list"
for c in "${clients[@]}"; do
  [[ "$c" =~ ^[1-9][0-9]*$ ]] || { echo "$name: --clients wants positive numbers, got '$c'" >&2; exit 2; }
done
set -- "$build_dir" "$reps_arg"
build_hint="pass --build DIR"
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_need_tools meshfold-import-hf meshfold-gen-weights meshfold-compile
for tool in cmake ninja curl; do
  command -v "$tool" > /dev/null ||
    { echo "$name: '$tool' is missing (Debian packages cmake, ninja-build, curl)" >&2; exit 1; }
done
say() { printf '[serve %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

venv="$build/bench-venv"
py="$venv/bin/python"
if [[ ! -x "$py" ]]; then
  say "making the Python venv $venv (scripts/torch-venv.sh; some GB)"
  "$here/../scripts/torch-venv.sh" "$venv" || exit 1
fi
bench_llamacpp ON llama-server

# The checkpoint (bf16), its GGUF and meshfold's program.
bench_mixtral_config "$layers" float32 > "$work/config.json"
"$bin/meshfold-import-hf" "$work/config.json" -o "$work/model.mlir"
ckpt="$work/hf-bf16"
mkdir -p "$ckpt"
bench_mixtral_config "$layers" bfloat16 > "$ckpt/config.json"
say "weights (bf16), tokenizer, GGUF"
"$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 --dtype bf16 --quiet -o "$ckpt/model.safetensors"
"$py" "$here/cpu-vs-llamacpp.py" tokenizer "$ckpt" 32000
convert "$ckpt" --outtype bf16 --outfile "$work/bf16.gguf" > "$work/convert.log" 2>&1 ||
  { tail -n 5 "$work/convert.log" >&2; echo "$name: convert_hf_to_gguf.py failed" >&2; exit 1; }
say "meshfold-compile --decode --weight-dtype bf16"
"$bin/meshfold-compile" "$work/model.mlir" --decode --weight-dtype bf16 --quiet -o "$work/gen"

server_pid=""
stop_server() {
  [[ -n "$server_pid" ]] || return 0
  kill -TERM "$server_pid" 2> /dev/null || true
  wait "$server_pid" 2> /dev/null || true
  server_pid=""
}
trap 'stop_server; rm -rf "$work"' EXIT
wait_healthy() {
  local i
  for i in $(seq 1 600); do
    curl -sf "$1/health" > /dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2> /dev/null || { echo "$name: the $2 server exited: $(tail -n 3 "$work/server.log")" >&2; exit 1; }
    sleep 0.2
  done
  echo "$name: the $2 server did not become healthy in 120 s" >&2
  exit 1
}
# Starts side $1 (mf or lc) for $2 clients; sets url.
start_server() {
  if [[ "$1" == mf ]]; then
    # shellcheck disable=SC2086 # --mf-flags is a list of flags
    "$work/gen" --weights "$ckpt" --serve 127.0.0.1:0 --threads "$threads" \
      --max-batch "$2" --served-model-name bench $mf_flags > "$work/server.log" 2>&1 &
    server_pid=$!
    local i
    for i in $(seq 1 300); do
      url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/server.log" | head -n 1 || true)
      [[ -n "$url" ]] && break
      sleep 0.1
    done
    [[ -n "$url" ]] || { echo "$name: meshfold's server printed no address: $(cat "$work/server.log")" >&2; exit 1; }
    # Its settings, as its first line names them (steps, prefix cache).
    mf_settings=$(sed -n 's/.*ranks; \(.*\)); SIGTERM.*/\1/p' "$work/server.log" | head -n 1)
  else
    local port=$((20000 + RANDOM % 20000))
    "$llama_bin/llama-server" -m "$work/bf16.gguf" --host 127.0.0.1 --port "$port" \
      -t "$threads" -tb "$threads" --parallel "$2" -c $(($2 * (prompt_len + max_tokens + 16))) \
      --alias bench > "$work/server.log" 2>&1 &
    server_pid=$!
    url="http://127.0.0.1:$port"
  fi
  wait_healthy "$url" "$1"
}

declare -A results
for c in "${clients[@]}"; do
  for rep in $(seq 1 "$reps"); do
    for side in mf lc; do
      say "$side: $c clients x $requests requests (rep $rep of $reps)"
      start_server "$side" "$c"
      line=$("$py" "$here/serve-load.py" --url "$url" --model bench --clients "$c" \
        --requests "$requests" --prompt-len "$prompt_len" --max-tokens "$max_tokens" --vocab 32000)
      stop_server
      errors=$(echo "$line" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["errors"])')
      [[ "$errors" == 0 ]] || { echo "$name: $side: failed requests: $line" >&2; exit 1; }
      results[$side,$c]+="$line"$'\n'
    done
  done
done

soak_line=""
if [[ "$soak" -gt 0 ]]; then
  say "soak: $soak requests, 16 clients, on meshfold's server"
  start_server mf 16
  soak_line=$("$py" "$here/serve-soak.py" --url "$url" --model bench --pid "$server_pid" \
    --requests "$soak" --clients 16) || { echo "$name: soak: $soak_line" >&2; exit 1; }
  stop_server
fi

field() { "$py" -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }
med() { # side, clients, field
  printf '%s' "${results[$1,$2]}" | while IFS= read -r l; do [[ -n "$l" ]] && echo "$l" | field "$3"; done | median
}
printf '\nserve: %d layers bf16, %d threads, prompts of %d tokens, %d generated, %d requests per client, median of %d; meshfold: %s%s\n' \
  "$layers" "$threads" "$prompt_len" "$max_tokens" "$requests" "$reps" "${mf_settings:-?}" "${mf_flags:+ (with $mf_flags)}"
printf '%-8s %-10s %9s %10s %10s %10s %10s %10s %9s\n' clients server 'req/s' 'out tok/s' 'TTFT p50' 'TTFT p99' 'ITL p50' 'ITL p99' 'TPOT'
for c in "${clients[@]}"; do
  for side in mf lc; do
    label=$([[ $side == mf ]] && echo meshfold || echo llama.cpp)
    printf '%-8s %-10s %9s %10s %10s %10s %10s %10s %9s\n' "$c" "$label" \
      "$(med $side "$c" req_per_s)" "$(med $side "$c" out_tok_per_s)" \
      "$(med $side "$c" ttft_p50_ms)" "$(med $side "$c" ttft_p99_ms)" \
      "$(med $side "$c" itl_p50_ms)" "$(med $side "$c" itl_p99_ms)" "$(med $side "$c" tpot_mean_ms)"
  done
  awk -v a="$(med mf "$c" out_tok_per_s)" -v b="$(med lc "$c" out_tok_per_s)" \
      -v p="$(med mf "$c" itl_p99_ms)" -v q="$(med lc "$c" itl_p99_ms)" \
      'BEGIN { printf "%-8s meshfold / llama.cpp: output tokens/s %.2fx, ITL p99 %.2fx\n", "", a / b, p / q }'
done
[[ -n "$soak_line" ]] && printf 'soak: %s\n' "$soak_line"
