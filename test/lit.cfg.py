# -*- Python -*-
import glob
import os
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "meshfold"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.meshfold_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%examples", os.path.join(config.meshfold_src_root, "python-free-examples")))
config.substitutions.append(("%src_root", config.meshfold_src_root))
config.substitutions.append(("%obj_root", config.meshfold_obj_root))
config.substitutions.append(("%tcp-launch", os.path.join(config.meshfold_src_root, "scripts", "tcp-launch.sh")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
# The one declaration of the runtime entry points generated code calls.
config.substitutions.append(("%codegen_abi", os.path.join(config.meshfold_src_root, "runtime", "include", "mfrt", "CodegenABI.def")))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP", "CXX"])
llvm_config.use_default_substitutions()

tool_dirs = [config.meshfold_tools_dir, config.llvm_tools_dir]
tools = ["meshfold-opt", "meshfold-compile", "meshfold-import-hf",
         "meshfold-gen-weights", "meshfold-reference", "meshfold-compare",
         "meshfold-tokenize"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
llvm_config.with_environment("PATH", config.meshfold_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# AVX-512 with AVX512_BF16 on this machine: bf16 weights multiply
# bf16-rounded activations by default (REQUIRES: avx512bf16).
try:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = set(cpuinfo.read().split())
    if {"avx512f", "avx512_bf16"} <= flags:
        config.available_features.add("avx512bf16")
except OSError:
    pass

# script(1) (util-linux), to run a tool on a terminal: REQUIRES: pty.
import shutil
if shutil.which("script"):
    config.available_features.add("pty")

# mlir-runner and its runtime libraries, for tests that run lowered IR
# (REQUIRES: mlir-runner; -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils).
llvm_lib_dir = os.path.join(os.path.dirname(config.llvm_tools_dir), "lib")
runner_libs = [os.path.join(llvm_lib_dir, lib) for lib in
               ("libmlir_runner_utils.so", "libmlir_c_runner_utils.so")]
if os.path.exists(os.path.join(config.llvm_tools_dir, "mlir-runner")) and \
        all(os.path.exists(lib) for lib in runner_libs):
    config.available_features.add("mlir-runner")
    llvm_config.add_tool_substitutions(["mlir-runner"], [config.llvm_tools_dir])
    config.substitutions.append(("%mlir_runner_utils", runner_libs[0]))
    config.substitutions.append(("%mlir_c_runner_utils", runner_libs[1]))

if config.meshfold_have_cuda:
    config.available_features.add("cuda")

# The CUDA target of the compiler: the toolkit found at configure time
# (ptxas, libdevice) lets meshfold-compile --target cuda emit PTX and objects;
# `ptxas` also lets tests assemble the emitted PTX (%ptxas).
if config.meshfold_have_cuda_toolkit:
    config.available_features.add("cuda-toolkit")
    ptxas = os.path.join(config.meshfold_cuda_root, "bin", "ptxas")
    if os.access(ptxas, os.X_OK):
        config.available_features.add("ptxas")
        config.substitutions.append(("%ptxas", ptxas))
    # The driver stub (libcuda.so with every entry point failing), for
    # running CUDA executables on a machine without a GPU.
    stub = os.path.join(config.meshfold_cuda_root, "lib64", "stubs", "libcuda.so")
    if os.path.exists(stub):
        config.available_features.add("cuda-stub")
        config.substitutions.append(("%cuda_stub", stub))

# OpenMPI's mpirun, for runs of emitted programs with --backend mpi.
import shutil
if shutil.which("mpirun"):
    config.available_features.add("mpi")

# Headless Chromium (Debian's chromium), for tests that render SVG output.
chromium = shutil.which("chromium")
if chromium:
    config.available_features.add("chromium")
    config.substitutions.append(("%chromium", chromium))
config.substitutions.append(("%python", sys.executable))

import subprocess


def find_python(feature, substitution, candidates, modules, timeout):
    """Adds `feature` and `substitution` for the first of `candidates` (a
    Python) that imports every one of `modules`."""
    for python in candidates:
        if not python or not os.access(python, os.X_OK):
            continue
        try:
            subprocess.run([python, "-c", "import " + ", ".join(modules)],
                           check=True, capture_output=True, timeout=timeout)
        except (subprocess.SubprocessError, OSError):
            continue
        config.available_features.add(feature)
        config.substitutions.append((substitution, python))
        return


def build_python(venv):
    return os.path.join(config.meshfold_obj_root, venv, "bin", "python")


# Hugging Face transformers and torch (PyPI), the peers users trust, for
# tests that check against them (REQUIRES: hf-transformers; %hf_python): the
# Python of MESHFOLD_HF_PYTHON, else of the venv scripts/install-deps.sh
# makes in the build folder (hf-venv: transformers on Debian's CPU torch),
# else of the benchmarks' venv (bench/cpu-prefill.sh makes it).
find_python("hf-transformers", "%hf_python",
            [os.environ.get("MESHFOLD_HF_PYTHON", ""), build_python("hf-venv"),
             build_python("bench-venv")],
            ["torch", "transformers", "safetensors"], 120)

# transformers with the newer MoE architectures (Qwen3MoeForCausalLM, from
# transformers 4.51, which needs torch 2): REQUIRES: hf-transformers-qwen3;
# %hf_qwen3_python. The tests' hf-venv (transformers 4.45 on Debian's torch)
# has none; the benchmarks' venv (PyPI's torch and transformers) has them.
find_python("hf-transformers-qwen3", "%hf_qwen3_python",
            [os.environ.get("MESHFOLD_HF_PYTHON", ""), build_python("hf-venv"),
             build_python("bench-venv")],
            ["torch", "transformers.models.qwen3_moe", "safetensors"], 120)

# transformers with DeepSeek-V3 (DeepseekV3ForCausalLM, from transformers
# 4.51): REQUIRES: hf-transformers-deepseek-v3; %hf_deepseek_python. As for
# Qwen3-MoE, the benchmarks' venv has it and the tests' hf-venv does not.
find_python("hf-transformers-deepseek-v3", "%hf_deepseek_python",
            [os.environ.get("MESHFOLD_HF_PYTHON", ""), build_python("hf-venv"),
             build_python("bench-venv")],
            ["torch", "transformers.models.deepseek_v3", "safetensors"], 120)

# transformers' fine-grained fp8 support (its dequantizing load, which needs
# accelerate): REQUIRES: hf-transformers-fp8; %hf_fp8_python. The
# benchmarks' venv has it.
find_python("hf-transformers-fp8", "%hf_fp8_python",
            [os.environ.get("MESHFOLD_HF_PYTHON", ""), build_python("hf-venv"),
             build_python("bench-venv")],
            ["torch", "transformers.models.deepseek_v3", "accelerate",
             "transformers.integrations.finegrained_fp8", "safetensors"], 120)

# Hugging Face `tokenizers` and SentencePiece's Python package (PyPI), the
# independent implementations the tokenizers are checked against
# (REQUIRES: hf-tokenizers; %tok_python): the Python of MESHFOLD_TOK_PYTHON,
# else of the small test venv scripts/install-deps.sh makes in the build
# folder, else of the benchmarks' venv.
find_python("hf-tokenizers", "%tok_python",
            [os.environ.get("MESHFOLD_TOK_PYTHON", ""), build_python("test-venv"),
             build_python("bench-venv")],
            ["tokenizers", "sentencepiece"], 60)

# Python's jinja2 (Debian's python3-jinja2), the reference the chat-template
# interpreter is checked against byte for byte (REQUIRES: jinja2;
# %jinja_python).
find_python("jinja2", "%jinja_python", ["/usr/bin/python3", sys.executable],
            ["jinja2"], 60)

# The official `openai` Python client (PyPI), which the server tests drive
# --serve with (REQUIRES: openai-client; %openai_python): the Python of the
# small test venv scripts/install-deps.sh makes, else the benchmarks' venv.
find_python("openai-client", "%openai_python",
            [os.environ.get("MESHFOLD_TOK_PYTHON", ""), build_python("test-venv"),
             build_python("bench-venv")],
            ["openai"], 60)

# ml_dtypes (PyPI, the JAX project's NumPy float8 types), which writes the
# fp8 (e4m3) checkpoints the loaders are checked on (REQUIRES: ml-dtypes;
# %ml_python): the Python of MESHFOLD_TOK_PYTHON, else of the small test
# venv, else of the benchmarks' venv.
find_python("ml-dtypes", "%ml_python",
            [os.environ.get("MESHFOLD_TOK_PYTHON", ""), build_python("test-venv"),
             build_python("bench-venv")],
            ["ml_dtypes", "numpy"], 60)

# cuBLASLt in the toolkit: --gemm-backend cublaslt links (REQUIRES: cublaslt).
if config.meshfold_have_cuda_toolkit and config.meshfold_cublaslt_dir:
    config.available_features.add("cublaslt")

# NVIDIA's disassembler (PyPI nvidia-cuda-nvdisasm, in the test venv; the
# toolkit here has none), for the SASS of the kernels (REQUIRES: nvdisasm;
# %nvdisasm): MESHFOLD_NVDISASM, else the test venv's, else one on PATH.
nvdisasm_candidates = [os.environ.get("MESHFOLD_NVDISASM", "")]
nvdisasm_candidates += sorted(glob.glob(os.path.join(
    config.meshfold_obj_root, "test-venv", "lib", "python*", "site-packages",
    "nvidia", "cu*", "bin", "nvdisasm")))
nvdisasm_candidates.append(shutil.which("nvdisasm") or "")
for nvdisasm in nvdisasm_candidates:
    if nvdisasm and os.access(nvdisasm, os.X_OK):
        config.available_features.add("nvdisasm")
        config.substitutions.append(("%nvdisasm", nvdisasm))
        break

# SentencePiece's trainer (Debian's sentencepiece), to make test models.
spm_train = shutil.which("spm_train")
if spm_train:
    config.available_features.add("spm-train")
    config.substitutions.append(("%spm_train", spm_train))

# The libFuzzer targets (fuzz/, built by clang in build/fuzz), run briefly on
# their seed corpora (REQUIRES: libfuzzer; %fuzz/<target>).
if config.meshfold_fuzz_dir and os.path.isdir(config.meshfold_fuzz_dir):
    config.available_features.add("libfuzzer")
    config.substitutions.append(("%fuzz_bench", os.path.join(
        config.meshfold_src_root, "bench", "fuzz.sh") + " --build " +
        config.meshfold_obj_root))
    config.substitutions.append(("%fuzz", config.meshfold_fuzz_dir))
