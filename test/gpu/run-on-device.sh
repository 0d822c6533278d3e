#!/usr/bin/env bash
# The CUDA target end to end on a machine with one NVIDIA GPU. Two ways:
#
#   test/gpu/run-on-device.sh --prebuilt DIR [WORK_DIR]
#       DIR comes from test/gpu/prepare-device-dir.sh, run on a machine with
#       LLVM/MLIR and the CUDA toolkit; the GPU machine needs only the CUDA
#       driver and toolkit (cuBLAS) and runs the steps alone
#   test/gpu/run-on-device.sh [BUILD_DIR] [WORK_DIR]
#       on a GPU machine that can also build: installs what is missing,
#       builds a release build, prepares WORK_DIR/prebuilt, then the same steps
#
# The steps, within a total time limit, the numerics first (unit, a, b, c,
# f, g), the timings last (d, e):
#
#   unit  the runtime's GPU unit tests (CudaRuntimeTest, CudaErrorTest)
#   (a)   the seed example compiled for one rank with --target cuda, run on
#         the GPU, compared with the CPU reference
#   (b)   the seed plan (--tp 2 --cp 2 --dp 4 --pp 2, 32 ranks) compiled with
#         --target cuda, its 32 ranks run as threads on the one GPU (local
#         backend, one stream per rank), compared with the reference
#   (c)   the one-rank program on the nccl backend, started without mpirun
#         (--rendezvous, --rank 0), where the nccl plugin and libnccl load
#         (SKIP otherwise)
#   (d)   bench/gpu-kernels (cuBLAS timings, the compiled kernels listed,
#         attention roofline)
#   (e)   bench/gpu-layer.sh: one Mixtral layer (32 experts, generated
#         weights) at T = 512 and T = 4096, compiled three ways (generated
#         CUDA-core kernels, --wgmma, --gemm-backend cublaslt): per-kernel
#         times (MFRT_PROFILE_KERNELS=1), achieved TFLOP/s against cuBLAS's
#         (bench/gpu-kernels, once per T), and the GPU's peak memory in use
#         (nvidia-smi)
#   (f)   prefill and decode on separate pools (--decode-plan): the seed plan
#         prefills on ranks 0..31 and hands each request's K/V to a TP2 x DP8
#         decode pool on ranks 32..47, all 48 as threads on the one GPU;
#         tokens and step logits compared with the reference's decode
#   (g)   --wgmma (the linear layers and experts on Hopper tensor cores, bf16
#         activations into the MMAs): one rank and the seed plan against
#         the reference; --gemm-backend cublaslt: one rank; rtol 2e-2
#         (MESHFOLD_GPU_RTOL_BF16)
#
# Tolerance: the CUDA program stores the weights in bf16 (--weight-dtype
# bf16, the CUDA default) and computes and accumulates in fp32; the reference
# (meshfold-reference, CPU) computes in fp32 on the same bf16 weights (a bf16
# checkpoint), so the two differ only by summation order and the GPU's exp /
# rsqrt: outputs are compared with meshfold-compare --rtol 1e-3 (per tensor,
# max|a-b| / max|ref|); the CPU target gets about 7e-7 on the same one.
#
# Prints PASS / FAIL / SKIP per step, then one table; exits non-zero if any
# step failed (numerics included).
#
# Environment: MESHFOLD_CUDA_ROOT (default /usr/local/cuda),
# MESHFOLD_GPU_STEPS_TIMEOUT (seconds for all steps, default 330),
# MESHFOLD_GPU_BUILD_TIMEOUT (seconds for configure + build, default 1200),
# MESHFOLD_GPU_RTOL (default 1e-3), MESHFOLD_GPU_RTOL_BF16 (default 2e-2).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
prebuilt=""
if [ "${1:-}" = "--prebuilt" ]; then
  [ -n "${2:-}" ] || { echo "run-on-device: --prebuilt needs a folder" >&2; exit 2; }
  prebuilt="$(cd "$2" 2>/dev/null && pwd)" ||
    { echo "run-on-device: --prebuilt $2: no such folder" >&2; exit 2; }
  [ -f "$prebuilt/BUILT" ] ||
    { echo "run-on-device: --prebuilt $2: not made by test/gpu/prepare-device-dir.sh (no BUILT)" >&2; exit 2; }
  shift 2
  work="${1:-/tmp/meshfold-gpu-check}"
elif [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,46s/^# \{0,1\}//p' "$0"
  exit 0
else
  build="${1:-$root/build-gpu}"
  work="${2:-$build/gpu-check}"
fi
cuda_root="${MESHFOLD_CUDA_ROOT:-/usr/local/cuda}"
steps_timeout="${MESHFOLD_GPU_STEPS_TIMEOUT:-330}"
build_timeout="${MESHFOLD_GPU_BUILD_TIMEOUT:-1200}"
rtol="${MESHFOLD_GPU_RTOL:-1e-3}"
rtol_bf16="${MESHFOLD_GPU_RTOL_BF16:-2e-2}"

mkdir -p "$work"
work="$(cd "$work" && pwd)"
export PATH="$cuda_root/bin:$PATH"
summary=()
failed=0

say() { printf '\n== %s\n' "$*"; }
record() { # STEP STATUS DETAIL
  summary+=("$(printf '%-6s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && failed=1
  printf -- '-- %s: %s %s\n' "$1" "$2" "$3"
}
finish() {
  printf '\nsummary (steps took %d s of %d):\n' $(($(date +%s) - ${start:-$(date +%s)})) \
    "$steps_timeout"
  printf '  %s\n' "${summary[@]}"
  exit $failed
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

# --- without --prebuilt: dependencies, build, the folder --------------------
if [ -z "$prebuilt" ]; then
  say "dependencies (scripts/install-deps.sh)"
  log="$work/deps.log"
  : >"$log"
  run 600 "$root/scripts/install-deps.sh" ||
    echo "warning: install-deps failed; trying to build with what is installed"
  say "configure and build (release, -j$(nproc)) in $build"
  log="$work/build.log"
  : >"$log"
  build_start=$(date +%s)
  if run "$build_timeout" cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DMESHFOLD_CUDA_ROOT="$cuda_root" &&
    run $((build_timeout - ($(date +%s) - build_start))) \
      cmake --build "$build" -j"$(nproc)" &&
    run 600 "$here/prepare-device-dir.sh" --build "$build" "$work/prebuilt"; then
    record build PASS "$(($(date +%s) - build_start)) s"
  else
    record build FAIL "see $log"
    finish
  fi
  prebuilt="$work/prebuilt"
fi
echo "prebuilt folder: $prebuilt"
sed 's/^/  /' "$prebuilt/BUILT"
bin="$prebuilt/bin"
seed="$prebuilt/seed"
prompts="$seed/prompts.txt"
export LD_LIBRARY_PATH="$prebuilt/lib:$cuda_root/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- the steps, within $steps_timeout seconds in all -----------------------
start=$(date +%s)
left() { # seconds left for the steps, at most $1
  local rest=$((steps_timeout - ($(date +%s) - start)))
  [ "$rest" -lt "$1" ] && echo "$rest" || echo "$1"
}
have_time() { [ "$(left 1000000)" -gt 5 ]; }
# Compares output $1 with reference $2 (default the prefill reference) to
# relative tolerance $3 (default $rtol).
compare() {
  run "$(left 60)" "$bin/meshfold-compare" "$1" \
    "${2:-$seed/reference.safetensors}" --rtol "${3:-$rtol}"
}
# Runs seed program $2 (at most $1 s) on the seed weights and prompts into
# $work/$3.safetensors and compares that with the prefill reference to
# relative tolerance $4 (default $rtol).
seed_check() {
  local out="$work/$3.safetensors"
  run "$(left "$1")" "$seed/$2" --random-weights 1 \
    --prompts "$prompts" --out "$out" --timeout 120 &&
    compare "$out" "" "${4:-$rtol}"
}
# What the last comparison in $log found, for the summary.
compared() { echo "$(grep -o 'max rel err [^,]*' "$log" | tail -1) (rtol ${1:-$rtol})"; }

say "unit: runtime GPU tests"
log="$work/unit.log"
: >"$log"
unit_ok=1
for t in CudaRuntimeTest CudaErrorTest; do
  if [ ! -x "$bin/$t" ]; then
    unit_ok=0
    echo "   $t was not built" >>"$log"
  elif ! run "$(left 120)" "$bin/$t"; then
    unit_ok=0
  fi
done
if [ $unit_ok -ne 1 ]; then
  record unit FAIL "see $log"
elif grep -q "SKIPPED" "$log"; then
  record unit FAIL "GPU tests were skipped: the device is not usable (see $log)"
else
  record unit PASS "CudaRuntimeTest, CudaErrorTest"
fi

say "(a) seed example, one rank, --target cuda"
log="$work/a.log"
: >"$log"
if have_time && seed_check 120 prefill-1 out-1; then
  record a PASS "$(compared)"
else
  record a FAIL "see $log"
fi

say "(b) seed plan, 32 ranks on one GPU (local backend), --target cuda"
log="$work/b.log"
: >"$log"
if have_time && seed_check 180 prefill-32 out-32; then
  record b PASS "$(compared)"
else
  record b FAIL "see $log"
fi

say "(c) nccl backend, world size 1, started without mpirun (--rendezvous)"
log="$work/c.log"
: >"$log"
nccl_plugin="$prebuilt/lib/libmfrt_nccl.so"
if [ ! -f "$nccl_plugin" ]; then
  record c SKIP "the nccl plugin (libmfrt_nccl.so) was not built where $prebuilt was prepared"
elif ldd "$nccl_plugin" | grep -q 'not found'; then
  record c SKIP "the nccl plugin cannot load here: $(ldd "$nccl_plugin" | grep 'not found' | head -1 | awk '{ print $1 }') not found"
elif have_time &&
  run "$(left 120)" env MFRT_PLUGIN_DIR="$prebuilt/lib" "$seed/prefill-1" \
    --backend nccl --rendezvous 127.0.0.1:$((20000 + $$ % 20000)) --rank 0 \
    --random-weights 1 --prompts "$prompts" \
    --out "$work/out-nccl.safetensors" --timeout 60 &&
  compare "$work/out-nccl.safetensors"; then
  record c PASS "$(compared)"
else
  record c FAIL "see $log"
fi

say "(f) two pools (seed plan -> tp=2 dp=8), 48 ranks on one GPU, decode"
log="$work/f.log"
: >"$log"
if have_time &&
  run "$(left 180)" "$seed/pools" --random-weights 1 \
    --prompts "$prompts" --out "$work/out-pools.safetensors" \
    --max-new-tokens 8 --step-logits --timeout 120 &&
  compare "$work/out-pools.safetensors" "$seed/reference-decode.safetensors"; then
  record f PASS "$(compared)"
else
  record f FAIL "see $log"
fi

say "(g) --wgmma (one rank, the seed plan) and --gemm-backend cublaslt (one rank)"
log="$work/g.log"
: >"$log"
if have_time && seed_check 120 prefill-1-wgmma out-1-wgmma "$rtol_bf16" &&
  seed_check 180 prefill-32-wgmma out-32-wgmma "$rtol_bf16" &&
  seed_check 120 prefill-1-cublaslt out-1-cublaslt "$rtol_bf16"; then
  record g PASS "$(compared "$rtol_bf16")"
else
  record g FAIL "see $log"
fi

say "(d) kernel benchmark (bench/gpu-kernels)"
log="$work/d.log"
: >"$log"
if have_time && run "$(left 120)" "$bin/gpu-kernels" --iters 10 \
  --ptx "$prebuilt/kernels.ptx"; then
  sed -n '/^cuBLAS/,$p' "$log" | sed 's/^/   /'
  record d PASS "report in $log"
else
  record d FAIL "see $log"
fi

say "(e) one Mixtral layer (bench/gpu-layer.sh), T = 512 and 4096"
log="$work/e.log"
: >"$log"
peak="$work/memory.txt"
: >"$peak"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 \
    >"$peak" 2>/dev/null &
  smi=$!
fi
e_ok=1
for t in 512 4096; do
  for program in prefill prefill-wgmma prefill-cublaslt; do
    if ! have_time || ! run "$(left 150)" "$root/bench/gpu-layer.sh" \
      --tokens "$t" --program "$prebuilt/layer/$program" --label "$program" \
      --cublas-report "$work/layer/cublas-$t.txt" "$prebuilt" "$work/layer"; then
      e_ok=0
      break 2
    fi
  done
done
[ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
mem=$(sort -n "$peak" | tail -1)
if [ $e_ok -eq 1 ]; then
  grep '^  ' "$log" | grep -E 'linear|expert FFN|attention:' | sed 's/^/   /'
  record e PASS "peak GPU memory in use ${mem:-?} MiB"
else
  record e FAIL "see $log"
fi

# The layer's lines (bench/gpu-layer.sh's last line per run) in the table.
while read -r line; do
  summary+=("$(printf '%-6s %-5s %s' e "" "$line")")
done < <(grep '^layer T=' "$work/e.log" 2>/dev/null)
finish
