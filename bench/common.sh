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
# The time per step while every request of the run decodes (--report
# decode's "decode steady" line: from the last request's first token to the
# first request's last, no prompt among those steps), in ms.
# shellcheck disable=SC2034
decode_steady='/^decode steady:/ { for (i = 1; i <= NF; ++i) if ($i == "ms" && $(i + 2) == "step,") print $(i - 1) }'
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

# llama.cpp, the peer of the CPU benchmarks: PyPI's llama-cpp-python sdist
# (its vendor/llama.cpp), downloaded and built once under <build>/llamacpp
# (CPU backend, GGML_NATIVE, static; with $1 = ON its server too, in a build
# folder of its own), the tools $2... checked; and its converter
# (convert_hf_to_gguf.py, as `convert`) with the sdist's gguf-py and
# sentencepiece. Wants `py` (the bench venv's Python), `threads`, `name` and
# `say`; sets llama_src, llama_bin.
bench_llamacpp() {
  local server="$1"
  shift
  # llama.cpp: PyPI's llama-cpp-python sdist (its vendor/llama.cpp), built
  # once; the stamp names the version and the options.
  llama_version=0.3.36
  llama_dir="$build/llamacpp"
  llama_src="$llama_dir/llama_cpp_python-$llama_version/vendor/llama.cpp"
  llama_build="$llama_dir/build-$llama_version"
  [[ "$server" == ON ]] && llama_build="$llama_dir/build-server-$llama_version"
  llama_bin="$llama_build/bin"
  llama_targets=("$@")
  llama_cmake=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF
    -DGGML_HIP=OFF -DGGML_SYCL=OFF -DGGML_OPENCL=OFF -DGGML_CCACHE=OFF -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER="$server" -DLLAMA_BUILD_TOOLS=ON)
  llama_stamp="$llama_build/.bench-ready"
  llama_stamp_text="llama-cpp-python $llama_version; ${llama_cmake[*]}; ${llama_targets[*]}"
  mkdir -p "$llama_dir"
  if [[ ! -f "$llama_stamp" || "$(cat "$llama_stamp")" != "$llama_stamp_text" ]]; then
    sdist="$llama_dir/llama_cpp_python-$llama_version.tar.gz"
    if [[ ! -f "$sdist" ]]; then
      say "llama.cpp: downloading the llama-cpp-python $llama_version sdist from PyPI"
      "$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        "llama-cpp-python==$llama_version" -d "$llama_dir" ||
        { echo "$name: could not download llama-cpp-python $llama_version from PyPI" >&2; exit 1; }
    fi
    if [[ ! -f "$llama_src/CMakeLists.txt" ]]; then
      say "llama.cpp: extracting $sdist"
      tar -xzf "$sdist" -C "$llama_dir"
    fi
    say "llama.cpp: building ${llama_targets[*]} (CPU, native, static; -j$threads; minutes)"
    rm -f "$llama_stamp"
    cmake -S "$llama_src" -B "$llama_build" "${llama_cmake[@]}" > "$llama_dir/configure.log" 2>&1 ||
      { echo "$name: llama.cpp's cmake configure failed, see $llama_dir/configure.log" >&2; exit 1; }
    cmake --build "$llama_build" -j "$threads" --target "${llama_targets[@]}" > "$llama_dir/build.log" 2>&1 ||
      { echo "$name: llama.cpp's build failed, see $llama_dir/build.log" >&2; exit 1; }
    echo "$llama_stamp_text" > "$llama_stamp"
  fi
  for tool in "${llama_targets[@]}"; do
    [[ -x "$llama_bin/$tool" ]] || { echo "$name: '$llama_bin/$tool' is missing" >&2; exit 1; }
  done
  say "llama.cpp: ${llama_targets[*]} ready ($llama_bin)"

  # llama.cpp's converter imports sentencepiece even for a tokenizer.json: it is
  # installed beside llama.cpp (not into the venv), on PYTHONPATH for it only.
  sp_version=0.2.3
  pylib="$llama_dir/pylib"
  if [[ ! -f "$pylib/.sentencepiece-$sp_version" ]]; then
    say "llama.cpp's converter: sentencepiece $sp_version from PyPI into $pylib"
    rm -rf "$pylib"
    "$py" -m pip install --quiet --disable-pip-version-check --target "$pylib" \
      "sentencepiece==$sp_version" ||
      { echo "$name: could not install sentencepiece $sp_version from PyPI" >&2; exit 1; }
    touch "$pylib/.sentencepiece-$sp_version"
  fi
  convert() {
    PYTHONPATH="$llama_src/gguf-py:$pylib" "$py" "$llama_src/convert_hf_to_gguf.py" "$@"
  }
}
