#!/usr/bin/env bash
# The CUDA target end to end on a machine with one NVIDIA GPU and the CUDA
# toolkit (nvcc, ptxas, NCCL). Installs what is missing, configures and builds
# a release build with every core, then, within a total time limit:
#
#   unit  the runtime's GPU unit tests (CudaRuntimeTest, mgpu symbol check)
#   (a)   the seed example compiled for one rank with --target cuda, run on
#         the GPU, compared with the CPU reference
#   (b)   the seed plan (--tp 2 --cp 2 --dp 4 --pp 2, 32 ranks) compiled with
#         --target cuda, its 32 ranks run as threads on the one GPU (local
#         backend, one stream per rank), compared with the reference
#   (c)   the one-rank program on the nccl backend (mpirun -np 1)
#   (d)   bench/gpu-kernels (cuBLAS timings, compiled kernels if the compiler
#         can emit PTX, attention roofline)
#   (e)   bench/gpu-layer.sh: the generated kernels at realistic dims (one
#         Mixtral layer, 32 experts, T = 4096): per-kernel times
#         (MFRT_PROFILE_KERNELS=1), achieved TFLOP/s, the matrix products'
#         time against cuBLAS's
#   (f)   prefill and decode on separate pools (--decode-plan): the seed plan
#         prefills on ranks 0..31 and hands each request's K/V to a TP2 x DP8
#         decode pool on ranks 32..47, all 48 as threads on the one GPU;
#         tokens and step logits compared with the reference's decode
#
# Tolerance: the CUDA program stores the weights in bf16 (--weight-dtype
# bf16, the CUDA default) and computes and accumulates in fp32; the reference
# (meshfold-reference, CPU) computes in fp32 on the same bf16 weights (a bf16
# checkpoint), so the two differ only by summation order and the GPU's exp /
# rsqrt: outputs are compared with meshfold-compare --rtol 1e-3 (per tensor,
# max|a-b| / max|ref|); the CPU target gets about 7e-7 on the same one.
#
# Prints PASS / FAIL / SKIP per step and exits non-zero if any step failed.
#
#   test/gpu/run-on-device.sh [BUILD_DIR] [WORK_DIR]
#
# Environment: MESHFOLD_CUDA_ROOT (default /usr/local/cuda),
# MESHFOLD_GPU_STEPS_TIMEOUT (seconds for all steps, default 600),
# MESHFOLD_GPU_BUILD_TIMEOUT (seconds for configure + build, default 1200),
# MESHFOLD_GPU_RTOL (default 1e-3).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build-gpu}"
work="${2:-$build/gpu-check}"
cuda_root="${MESHFOLD_CUDA_ROOT:-/usr/local/cuda}"
steps_timeout="${MESHFOLD_GPU_STEPS_TIMEOUT:-600}"
build_timeout="${MESHFOLD_GPU_BUILD_TIMEOUT:-1200}"
rtol="${MESHFOLD_GPU_RTOL:-1e-3}"
examples="$root/python-free-examples"
config="$examples/seed/config.json"
prompts="$examples/seed/prompts.txt"
# shellcheck disable=SC2054 # commas are part of the --order value
plan=(--tp 2 --cp 2 --dp 4 --pp 2 --order tp,cp,dp,pp --gpus-per-node 8)

mkdir -p "$work"
export PATH="$cuda_root/bin:$PATH"
summary=()
failed=0

say() { printf '\n== %s\n' "$*"; }
record() { # STEP STATUS DETAIL
  summary+=("$(printf '%-6s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && failed=1
  printf -- '-- %s: %s %s\n' "$1" "$2" "$3"
}

# Runs "$@" with a timeout (seconds, first argument), logging to $log.
run() {
  local t="$1"
  shift
  echo "+ $*" >>"$log"
  timeout --kill-after=10 "$t" "$@" >>"$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    [ $rc -eq 124 ] && echo "(timed out after $t s)" >>"$log"
    echo "   failed (exit $rc): $*"
    tail -n 25 "$log" | sed 's/^/   | /'
  fi
  return $rc
}

# --- preflight -------------------------------------------------------------
say "device"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L || true
else
  echo "nvidia-smi not found (the driver may still work)"
fi
[ -x "$cuda_root/bin/nvcc" ] || echo "warning: no nvcc under $cuda_root"

# --- dependencies, configure, build ----------------------------------------
say "dependencies (scripts/install-deps.sh)"
log="$work/deps.log"
: >"$log"
if ! run 600 "$root/scripts/install-deps.sh"; then
  echo "warning: install-deps failed; trying to build with what is installed"
fi

say "configure and build (release, -j$(nproc)) in $build"
log="$work/build.log"
: >"$log"
build_start=$(date +%s)
if run "$build_timeout" cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DMESHFOLD_CUDA_ROOT="$cuda_root" &&
  run $((build_timeout - ($(date +%s) - build_start))) \
    cmake --build "$build" -j"$(nproc)"; then
  record build PASS "$(($(date +%s) - build_start)) s"
else
  record build FAIL "see $log"
  printf '\nsummary:\n'
  printf '  %s\n' "${summary[@]}"
  exit 1
fi
bin="$build/bin"
export MFRT_PLUGIN_DIR="$build/lib"

# --- the steps, within $steps_timeout seconds in all -----------------------
start=$(date +%s)
left() { # seconds left for the steps, at most $1
  local rest=$((steps_timeout - ($(date +%s) - start)))
  [ "$rest" -lt "$1" ] && echo "$rest" || echo "$1"
}
have_time() { [ "$(left 1000000)" -gt 5 ]; }
# Compares the program's output $1 with the CPU reference (logged to $log).
compare() {
  run "$(left 60)" "$bin/meshfold-compare" "$1" "$work/reference.safetensors" \
    --rtol "$rtol"
}
# What the last comparison in $log found, for the summary.
compared() { echo "$(grep -o 'max rel err [^,]*' "$log" | tail -1) (rtol $rtol)"; }

say "unit: runtime GPU tests"
log="$work/unit.log"
: >"$log"
if run "$(left 120)" ctest --test-dir "$build" -R "CudaRuntime|CudaError|MfrtCuda" \
  --output-on-failure; then
  if grep -q "Skipped" "$log"; then
    record unit FAIL "GPU tests were skipped: the device is not usable (see $log)"
  else
    record unit PASS "CudaRuntimeTest, CudaErrorTest, MfrtCuda.mgpu-symbols"
  fi
else
  record unit FAIL "see $log"
fi

say "(a) seed example, one rank, --target cuda"
log="$work/a.log"
: >"$log"
a_ok=0
if have_time &&
  run "$(left 60)" "$bin/meshfold-import-hf" "$config" -o "$work/model.mlir" &&
  run "$(left 60)" "$bin/meshfold-gen-weights" "$work/model.mlir" --seed 1 \
    --dtype bf16 -o "$work/weights.safetensors" &&
  run "$(left 120)" "$bin/meshfold-reference" --config "$config" \
    --weights "$work/weights.safetensors" --prompts "$prompts" \
    --out "$work/reference.safetensors" &&
  run "$(left 180)" "$bin/meshfold-compile" "$work/model.mlir" --target cuda \
    -o "$work/prefill-1" &&
  run "$(left 120)" "$work/prefill-1" --weights "$work/weights.safetensors" \
    --prompts "$prompts" --out "$work/out-1.safetensors" --timeout 60 &&
  compare "$work/out-1.safetensors"; then
  a_ok=1
  record a PASS "$(compared)"
else
  record a FAIL "see $log"
fi

say "(b) seed plan, 32 ranks on one GPU (local backend), --target cuda"
log="$work/b.log"
: >"$log"
if ! have_time || [ ! -s "$work/reference.safetensors" ]; then
  record b FAIL "no time left or no reference (step a)"
elif run "$(left 180)" "$bin/meshfold-compile" "$work/model.mlir" "${plan[@]}" \
  --target cuda -o "$work/prefill-32" &&
  run "$(left 180)" "$work/prefill-32" --weights "$work/weights.safetensors" \
    --prompts "$prompts" --out "$work/out-32.safetensors" --timeout 120 &&
  compare "$work/out-32.safetensors"; then
  record b PASS "$(compared)"
else
  record b FAIL "see $log"
fi

say "(c) nccl backend, world size 1"
log="$work/c.log"
: >"$log"
mpirun_cmd=$(command -v mpirun || true)
if [ ! -f "$build/lib/libmfrt_nccl.so" ]; then
  record c FAIL "libmfrt_nccl.so was not built (MPI, NCCL or nvcc missing)"
elif [ -z "$mpirun_cmd" ]; then
  record c FAIL "mpirun not found"
elif [ $a_ok -ne 1 ] || ! have_time; then
  record c FAIL "needs step (a)'s program and time left"
elif run "$(left 120)" "$mpirun_cmd" --allow-run-as-root --oversubscribe -np 1 \
  -x MFRT_PLUGIN_DIR "$work/prefill-1" --backend nccl \
  --weights "$work/weights.safetensors" --prompts "$prompts" \
  --out "$work/out-nccl.safetensors" --timeout 60 &&
  compare "$work/out-nccl.safetensors"; then
  record c PASS "$(compared)"
else
  record c FAIL "see $log"
fi

say "(d) kernel benchmark (bench/gpu-kernels)"
log="$work/d.log"
: >"$log"
bench_args=(--iters 10)
if [ -s "$work/model.mlir" ] && have_time &&
  run "$(left 120)" "$bin/meshfold-compile" "$work/model.mlir" --target cuda \
    --emit ptx -o "$work/kernels.ptx" && [ -s "$work/kernels.ptx" ]; then
  bench_args+=(--ptx "$work/kernels.ptx")
else
  echo "   (no PTX from meshfold-compile --emit ptx: cuBLAS and roofline only)"
fi
if [ ! -x "$bin/gpu-kernels" ]; then
  record d FAIL "gpu-kernels was not built (cuBLAS missing?)"
elif have_time && run "$(left 240)" "$bin/gpu-kernels" "${bench_args[@]}"; then
  sed -n '/^cuBLAS/,$p' "$log" | sed 's/^/   /'
  record d PASS "report in $log"
else
  record d FAIL "see $log"
fi

say "(e) generated kernels at realistic dims (bench/gpu-layer.sh, T = 4096)"
log="$work/e.log"
: >"$log"
if have_time && run "$(left 300)" "$root/bench/gpu-layer.sh" "$build" \
  "$work/layer"; then
  sed -n '/^== generated vs cuBLAS/,$p' "$log" | sed 's/^/   /'
  record e PASS "kernel profile in $log"
else
  record e FAIL "see $log"
fi

say "(f) two pools (seed plan -> tp=2 dp=8), 48 ranks on one GPU, decode"
log="$work/f.log"
: >"$log"
if ! have_time || [ ! -s "$work/model.mlir" ]; then
  record f FAIL "no time left or no model (step a)"
elif run "$(left 120)" "$bin/meshfold-reference" --config "$config" \
  --weights "$work/weights.safetensors" --prompts "$prompts" \
  --out "$work/reference-decode.safetensors" --max-new-tokens 8 \
  --step-logits &&
  run "$(left 240)" "$bin/meshfold-compile" "$work/model.mlir" "${plan[@]}" \
    --decode-plan "tp=2 dp=8" --target cuda -o "$work/pools" &&
  run "$(left 180)" "$work/pools" --weights "$work/weights.safetensors" \
    --prompts "$prompts" --out "$work/out-pools.safetensors" \
    --max-new-tokens 8 --step-logits --timeout 120 &&
  run "$(left 60)" "$bin/meshfold-compare" "$work/out-pools.safetensors" \
    "$work/reference-decode.safetensors" --rtol "$rtol"; then
  record f PASS "$(compared)"
else
  record f FAIL "see $log"
fi

printf '\nsummary (steps took %d s of %d):\n' $(($(date +%s) - start)) \
  "$steps_timeout"
printf '  %s\n' "${summary[@]}"
exit $failed
