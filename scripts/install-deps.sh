#!/usr/bin/env bash
# Installs what meshfold needs to build and test, and nothing that is already
# there (safe to run again). Debian packages only; CUDA/NCCL are used from
# /usr/local/cuda when present and are not installed here.
set -euo pipefail

packages=(
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  cmake ninja-build g++ libgtest-dev nlohmann-json3-dev
  openmpi-bin libopenmpi-dev
  libomp-22-dev
  libsentencepiece-dev sentencepiece libonig-dev libutf8proc-dev pkg-config
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

# The tests' independent tokenizers, Hugging Face `tokenizers` and
# SentencePiece's Python package (PyPI, a few MB), in a venv in the build
# folder (build/test-venv). Without them (no PyPI) the tokenizer tests say
# UNSUPPORTED.
venv="$(dirname "$0")/../build/test-venv"
if ! "$venv/bin/python" -c "import tokenizers, sentencepiece" 2>/dev/null; then
  echo "install-deps: making $venv (tokenizers, sentencepiece)"
  if python3 -m venv "$venv" &&
     "$venv/bin/pip" install -q --disable-pip-version-check \
       tokenizers==0.23.3 sentencepiece==0.2.3; then
    echo "install-deps: test venv ready"
  else
    echo "install-deps: warning: no test venv (PyPI not reachable?); the" \
         "tokenizer tests will be UNSUPPORTED" >&2
  fi
fi

# The tests' Hugging Face transformers (PyPI) on Debian's CPU PyTorch
# (python3-torch, above), in a second venv that sees Debian's Python
# packages (build/hf-venv): the forward and generate() that checkpoint
# folders and decoding are checked against. transformers is pinned to 4.45,
# whose generate() runs on Debian's torch 1.13 (4.46 imports torch's FSDP,
# which torch 1.13 cannot import on Python 3.11). Without the venv the
# transformers tests say UNSUPPORTED.
hf_venv="$(dirname "$0")/../build/hf-venv"
if ! "$hf_venv/bin/python" -c "import torch, transformers, safetensors" 2>/dev/null; then
  echo "install-deps: making $hf_venv (transformers on Debian's torch)"
  if /usr/bin/python3 -m venv --system-site-packages "$hf_venv" &&
     "$hf_venv/bin/pip" install -q --disable-pip-version-check \
       transformers==4.45.2 safetensors==0.8.0 &&
     "$hf_venv/bin/python" -c "import torch, transformers, safetensors"; then
    echo "install-deps: transformers venv ready"
  else
    echo "install-deps: warning: no transformers venv (PyPI not reachable?);" \
         "the transformers tests will be UNSUPPORTED" >&2
  fi
fi
