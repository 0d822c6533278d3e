#!/usr/bin/env bash
# Installs what meshfold needs to build and test, and nothing that is already
# there (safe to run again). Debian packages only; CUDA/NCCL are used from
# /usr/local/cuda when present and are not installed here.
#
#   scripts/install-deps.sh [--tests]
#
# --tests also makes build/bench-venv: current PyTorch and transformers from
# PyPI (about 5 GB), for the tests against Qwen3-MoE and DeepSeek-V3.
set -euo pipefail
with_torch=0
for arg in "$@"; do
  case "$arg" in
    --tests) with_torch=1 ;;
    -h|--help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install-deps: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

packages=(
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  cmake ninja-build g++ libgtest-dev nlohmann-json3-dev
  openmpi-bin libopenmpi-dev
  libomp-22-dev
  libsentencepiece-dev sentencepiece libonig-dev libutf8proc-dev pkg-config
  libcpp-httplib-dev python3-jinja2
  python3-venv
  python3-torch
  clang-22 libfuzzer-22-dev libclang-rt-22-dev
  time
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "install-deps: done"
fi

# Makes the venv DIR (unless its Python already imports IMPORTS) with the
# interpreter and venv flags given, installs the pinned PACKAGES from PyPI
# and checks the imports; without PyPI it warns that the tests needing it
# (WHAT) will be UNSUPPORTED.
#   make_venv DIR "IMPORTS" WHAT PYTHON [VENV FLAGS] -- PACKAGES...
make_venv() {
  local dir="$1" imports="$2" what="$3"
  shift 3
  local make=()
  while [ "$1" != "--" ]; do make+=("$1"); shift; done
  shift
  if "$dir/bin/python" -c "import $imports" 2>/dev/null; then
    return 0
  fi
  echo "install-deps: making $dir ($imports)"
  if "${make[0]}" -m venv "${make[@]:1}" "$dir" &&
     "$dir/bin/pip" install -q --disable-pip-version-check "$@" &&
     "$dir/bin/python" -c "import $imports"; then
    echo "install-deps: $dir ready"
  else
    echo "install-deps: warning: no $dir (PyPI not reachable?); the $what" \
         "tests will be UNSUPPORTED" >&2
  fi
}

# The tests' independent tokenizers, Hugging Face `tokenizers` and
# SentencePiece's Python package, ml_dtypes (NumPy's fp8 types, which write
# the fp8 checkpoints), the official `openai` client (the server tests) and
# NVIDIA's nvdisasm (the SASS of the CUDA target's
# kernels; the toolkit has none), from PyPI (a few tens of MB), in a venv in
# the build folder (build/test-venv).
build="$(dirname "$0")/../build"
make_venv "$build/test-venv" \
  "tokenizers, sentencepiece, ml_dtypes, nvidia.cu13, openai" \
  "tokenizer, fp8, SASS and server" python3 -- tokenizers==0.23.3 \
  sentencepiece==0.2.3 ml_dtypes==0.6.0 nvidia-cuda-nvdisasm==13.2.86 \
  openai==3.63.0

# The tests' Hugging Face transformers (PyPI) on Debian's CPU PyTorch
# (python3-torch, above), in a second venv that sees Debian's Python
# packages (build/hf-venv): the forward and generate() that checkpoint
# folders and decoding are checked against. transformers is pinned to 4.45,
# whose generate() runs on Debian's torch 1.13 (4.46 imports torch's FSDP,
# which torch 1.13 cannot import on Python 3.11).
make_venv "$build/hf-venv" "torch, transformers, safetensors" transformers \
  /usr/bin/python3 --system-site-packages -- \
  transformers==4.45.2 safetensors==0.8.0

# With --tests, the tests' newer transformers (Qwen3-MoE, DeepSeek-V3 and its
# fp8 loading need transformers >= 4.51, on torch 2: PyPI's torch with the
# CUDA libraries it links, about 5 GB) in build/bench-venv, which the
# benchmarks share (scripts/torch-venv.sh). Without it those tests are
# UNSUPPORTED.
if [ "$with_torch" = 0 ]; then
  :
elif ! "$(dirname "$0")/torch-venv.sh" "$build/bench-venv"; then
  echo "install-deps: warning: no $build/bench-venv (PyPI not reachable?);" \
       "the Qwen3-MoE and DeepSeek-V3 transformers tests will be" \
       "UNSUPPORTED" >&2
fi
