#!/usr/bin/env bash
# Makes (once) a Python venv with current PyTorch, Hugging Face transformers,
# safetensors and accelerate from PyPI, pinned:
#
#   scripts/torch-venv.sh DIR
#
# The tests that check against transformers' newer architectures
# (Qwen3MoeForCausalLM, DeepseekV3ForCausalLM, its fp8 loading: features
# hf-transformers-qwen3, -deepseek-v3, -fp8) and bench/cpu-prefill.sh use
# it (build/bench-venv). PyPI's torch for Linux x86-64 is the CUDA build: it
# does not import without the CUDA libraries it links (cudart, cuBLAS,
# cuDNN, NCCL, ...; about 3 GB), so those are installed as torch pins them,
# but not triton (torch.compile's) nor cuda-bindings (Python bindings),
# which a CPU forward does not use. Exits 0 with the venv ready, else 1 with
# one line saying why.
set -euo pipefail
venv="${1:?usage: torch-venv.sh DIR}"
py="$venv/bin/python"
if [[ -f "$venv/.cpu-prefill-ready" ]] && "$py" -c 'import torch, transformers, safetensors, accelerate' 2>/dev/null; then
  exit 0
fi
echo "torch-venv.sh: making $venv (torch, transformers, safetensors, accelerate from PyPI; about 5 GB)"
rm -f "$venv/.cpu-prefill-ready"
[[ -x "$py" ]] || python3 -m venv "$venv"
pip=("$py" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --no-deps torch==2.15.0
"${pip[@]}" packaging
"$py" - > "$venv/torch-deps.txt" <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
for line in md.requires("torch") or []:
    req = Requirement(line)
    if req.marker and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name not in ("triton", "cuda-bindings"):
        print(line.split(";")[0].strip())
PY
"${pip[@]}" -r "$venv/torch-deps.txt"
"${pip[@]}" transformers==5.25.0 safetensors==0.8.0 accelerate==1.16.0 numpy
if ! "$py" -c 'import torch, transformers, safetensors, accelerate' 2>/dev/null; then
  echo "torch-venv.sh: the venv $venv cannot import torch/transformers" >&2
  exit 1
fi
touch "$venv/.cpu-prefill-ready"
