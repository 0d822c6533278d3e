# shellcheck shell=bash
# Sourced by the bench scripts, which take [BUILD_DIR] [N] and set `here`
# (their folder) and `default_reps` first (and `build_hint`, how to name
# another build folder, where that is not the first argument). Exits on a
# missing build folder; sets build, bin, reps and work (a scratch folder
# removed on exit), and the helpers below.

# The script's name, for its messages.
bench_name="$(basename "$0")"
if [[ ! -d "${1:-$here/../build}" ]]; then
  echo "$bench_name: no build folder '${1:-$here/../build}': build meshfold first (cmake -S . -B build -G Ninja && cmake --build build) or ${build_hint:-pass the build folder as the first argument}" >&2
  exit 1
fi
build="$(cd "${1:-$here/../build}" && pwd)"
# shellcheck disable=SC2034 # used by the scripts that source this
reps="${2:-$default_reps}"
bin="$build/bin"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
seed="$here/../python-free-examples/seed"

# Exits naming the first of the meshfold tools $@ missing from $bin.
bench_need_tools() {
  local tool
  for tool; do
    [[ -x "$bin/$tool" ]] ||
      { echo "$bench_name: '$bin/$tool' is missing: build meshfold first" >&2; exit 1; }
  done
}

# The median of the numbers on stdin, one a line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s.%N; }
# Seconds from $1 to $2 (two `now` values).
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {print b - a}'; }

# The seed model ($work/model.mlir) and its weights ($work/w.safetensors).
seed_model_and_weights() {
  "$bin/meshfold-import-hf" "$seed/config.json" -o "$work/model.mlir"
  "$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 -o "$work/w.safetensors"
}

# awk programs over a --report decode: the mean over the requests of the
# time to the first token and of the time per output token (ms), and the
# run's tokens/s.
# shellcheck disable=SC2034 # used by the scripts that source this
decode_ttft='/^req/ { for (i = 1; i <= NF; ++i) if ($i == "first" && $(i + 1) == "token") s += $(i + 3); n++ } END { print s / n }'
# shellcheck disable=SC2034
decode_tpot='/^req/ { for (i = 1; i <= NF; ++i) if ($i == "steps" && $(i + 2) == "ms") s += $(i + 1); n++ } END { print s / n }'
# shellcheck disable=SC2034
decode_rate='/^decode:/ { for (i = 1; i <= NF; ++i) if ($i == "tokens/s") print $(i - 1) }'

# The Mixtral-shaped model of the CPU benchmarks (cpu-prefill.sh,
# cpu-vs-llamacpp.sh) as a Hugging Face config.json on stdout: hidden 1024,
# ffn 2816, 16 heads / 8 KV heads of 64, 8 experts top-2, vocab 32000;
# $1 decoder layers, torch_dtype $2.
bench_mixtral_config() {
  cat <<EOF
{
  "architectures": ["MixtralForCausalLM"],
  "model_type": "mixtral",
  "hidden_size": 1024,
  "intermediate_size": 2816,
  "num_hidden_layers": $1,
  "num_attention_heads": 16,
  "num_key_value_heads": 8,
  "head_dim": 64,
  "num_local_experts": 8,
  "num_experts_per_tok": 2,
  "vocab_size": 32000,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "max_position_embeddings": 32768,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "torch_dtype": "$2"
}
EOF
}
