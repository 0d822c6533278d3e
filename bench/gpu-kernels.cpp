//===- gpu-kernels.cpp - Matrix products and attention on one GPU ---------===//
//
// A benchmark (it reports, it never asserts) for the CUDA target, at the
// dimensions of a real Mixtral-style model: d = 4096, 32 query heads, 8 KV
// heads, head dim 128, expert FFN 14336, 32 experts top-2, T = 4096 prompt
// tokens per DP replica.
//
//  1. cuBLAS (bf16 inputs, fp32 accumulation, bf16 output) on the shapes of
//     the QKV and output projections (whole and TP2 shards) and of one
//     expert's FFN (T * top-k / experts tokens per expert; w1 and w3 fused),
//     also batched over all 32 experts: time, TFLOP/s and the fraction of the
//     H200's dense bf16 peak.
//  2. Optionally, kernels of a module that `meshfold-compile --target cuda
//     --emit ptx` produced (PTX or cubin, --ptx FILE): it lists them, and
//     times those named with --kernel on one of the shapes above, assuming
//     the signature of a lowered matrix product: three rank-2 memrefs
//     (A [M, K], W [N, K], C [M, N], bf16) as upstream's calling convention
//     passes them (allocated and aligned pointer, offset, 2 sizes, 2
//     strides each), with the launch configuration given on the command
//     line (the grid is in the host code, not in the PTX). It prints the
//     ratio of its time to cuBLAS's.
//  3. The attention roofline: FLOPs and bytes of causal GQA attention for
//     the whole replica and per GPU of the seed plan (TP2 x CP2), and the
//     time each would take at H200 peak (989 TFLOP/s bf16 dense, 4.8 TB/s).
//
// Kernels are loaded with the runtime API's library calls (cudaLibrary*,
// backed by the driver's cuLibrary*), so the program starts, and says that
// there is no GPU, also where no driver is installed.
//
//===----------------------------------------------------------------------===//

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr double kPeakFlops = 989e12; // H200 SXM, dense bf16
constexpr double kPeakBytes = 4.8e12; // HBM3e

struct Dims {
  long hidden = 4096, heads = 32, kvHeads = 8, headDim = 128, ffn = 14336,
       experts = 32, topK = 2, tokens = 4096;
};

/// A row-major product C[M, N] = A[M, K] * W[N, K]^T (a linear layer with
/// HF's [out, in] weight), `batch` times.
struct Shape {
  std::string name, what;
  long m, n, k, batch = 1;
};

std::vector<Shape> shapes(const Dims &d) {
  long qkv = (d.heads + 2 * d.kvHeads) * d.headDim;
  long perExpert = d.tokens * d.topK / d.experts;
  return {
      {"qkv", "QKV projection, whole", d.tokens, qkv, d.hidden},
      {"qkv-tp2", "QKV projection, TP2 column shard (T/CP2 tokens)",
       d.tokens / 2, qkv / 2, d.hidden},
      {"o", "output projection, whole", d.tokens, d.hidden,
       d.heads * d.headDim},
      {"o-tp2", "output projection, TP2 row shard (T/CP2 tokens)", d.tokens / 2,
       d.hidden, d.heads * d.headDim / 2},
      {"ffn13", "one expert, w1|w3 fused", perExpert, 2 * d.ffn, d.hidden},
      {"ffn2", "one expert, w2", perExpert, d.hidden, d.ffn},
      {"ffn13-all", "all experts, w1|w3 fused (batched)", perExpert, 2 * d.ffn,
       d.hidden, d.experts},
      {"ffn2-all", "all experts, w2 (batched)", perExpert, d.hidden, d.ffn,
       d.experts},
  };
}

bool cudaOk(cudaError_t e, const char *call) {
  if (e == cudaSuccess)
    return true;
  std::fprintf(stderr, "gpu-kernels: %s failed: %s: %s\n", call,
               cudaGetErrorName(e), cudaGetErrorString(e));
  return false;
}

#define CUDA_OR_DIE(call)                                                      \
  do {                                                                         \
    if (!cudaOk((call), #call))                                                \
      std::exit(1);                                                            \
  } while (0)

void usage() {
  std::printf(
      "usage: gpu-kernels [--tokens T] [--iters N] [--ptx FILE]\n"
      "                   [--kernel NAME:SHAPE:GX,GY,GZ:BX,BY,BZ[:SMEM]]...\n\n"
      "Times cuBLAS bf16 matrix products (fp32 accumulation) on the shapes "
      "of a\nMixtral-style layer (d 4096, 32/8 heads of 128, expert FFN "
      "14336, 32 experts\ntop-2, T tokens per replica), prints an attention "
      "roofline at H200 peak\n(989 TFLOP/s bf16, 4.8 TB/s), and optionally "
      "times kernels of a PTX or cubin\nfrom `meshfold-compile --target cuda "
      "--emit ptx` against cuBLAS.\n\n"
      "  --tokens T     prompt tokens per DP replica (default 4096)\n"
      "  --iters N      timed repetitions per measurement (default 20)\n"
      "  --ptx FILE     PTX or cubin: list its kernels\n"
      "  --kernel SPEC  time kernel NAME of --ptx on SHAPE with grid GX,GY,GZ "
      "and\n                 block BX,BY,BZ (SMEM bytes of dynamic shared "
      "memory); the\n                 kernel must take three rank-2 bf16 "
      "memrefs A [M,K], W [N,K],\n                 C [M,N] (upstream's "
      "expanded memref arguments)\n"
      "  --help         this text\n\n"
      "Shapes:");
  for (const Shape &s : shapes(Dims()))
    std::printf(" %s", s.name.c_str());
  std::printf("\n");
}

/// Random bf16 data on the device.
__nv_bfloat16 *deviceRandom(size_t n, unsigned seed) {
  std::vector<__nv_bfloat16> host(n);
  unsigned x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    host[i] = __float2bfloat16(float(int(x >> 9) % 2001 - 1000) / 1000.0f);
  }
  __nv_bfloat16 *d = nullptr;
  CUDA_OR_DIE(
      cudaMalloc(reinterpret_cast<void **>(&d), n * sizeof(__nv_bfloat16)));
  CUDA_OR_DIE(cudaMemcpy(d, host.data(), n * sizeof(__nv_bfloat16),
                         cudaMemcpyHostToDevice));
  return d;
}

struct Operands {
  __nv_bfloat16 *a, *w, *c;
  explicit Operands(const Shape &s)
      : a(deviceRandom(size_t(s.batch * s.m * s.k), 1)),
        w(deviceRandom(size_t(s.batch * s.n * s.k), 2)),
        c(deviceRandom(size_t(s.batch * s.m * s.n), 3)) {}
  ~Operands() {
    cudaFree(a);
    cudaFree(w);
    cudaFree(c);
  }
};

/// Mean seconds of `iters` runs of `run` after 3 warm-up runs.
template <typename F> double timeIt(int iters, F run) {
  cudaEvent_t start, stop;
  CUDA_OR_DIE(cudaEventCreate(&start));
  CUDA_OR_DIE(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i)
    if (!run())
      return -1;
  CUDA_OR_DIE(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i)
    if (!run())
      return -1;
  CUDA_OR_DIE(cudaEventRecord(stop));
  CUDA_OR_DIE(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) / 1e3 / iters;
}

double cublasSeconds(cublasHandle_t h, const Shape &s, int iters) {
  Operands op(s);
  float alpha = 1, beta = 0;
  // Row-major C = A W^T is column-major C^T [N, M] = W [N, K] . A^T [K, M].
  return timeIt(iters, [&] {
    cublasStatus_t st;
    if (s.batch == 1)
      st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(s.n), int(s.m),
                        int(s.k), &alpha, op.w, CUDA_R_16BF, int(s.k), op.a,
                        CUDA_R_16BF, int(s.k), &beta, op.c, CUDA_R_16BF,
                        int(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
      st = cublasGemmStridedBatchedEx(
          h, CUBLAS_OP_T, CUBLAS_OP_N, int(s.n), int(s.m), int(s.k), &alpha,
          op.w, CUDA_R_16BF, int(s.k), s.n * s.k, op.a, CUDA_R_16BF, int(s.k),
          s.m * s.k, &beta, op.c, CUDA_R_16BF, int(s.n), s.m * s.n,
          int(s.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "gpu-kernels: cublasGemm%sEx failed: %s\n",
                   s.batch == 1 ? "" : "StridedBatched",
                   cublasGetStatusString(st));
      return false;
    }
    return true;
  });
}

double flops(const Shape &s) { return 2.0 * s.batch * s.m * s.n * s.k; }
double bytes(const Shape &s) {
  return 2.0 * s.batch * (s.m * s.k + s.n * s.k + s.m * s.n);
}

struct KernelSpec {
  std::string name, shape;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned smem = 0;
};

bool parseTriple(const std::string &t, unsigned out[3]) {
  return std::sscanf(t.c_str(), "%u,%u,%u", &out[0], &out[1], &out[2]) == 3;
}

bool parseKernel(const std::string &text, KernelSpec &k) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (true) {
    size_t colon = text.find(':', at);
    parts.push_back(text.substr(at, colon - at));
    if (colon == std::string::npos)
      break;
    at = colon + 1;
  }
  if (parts.size() < 4 || parts.size() > 5)
    return false;
  k.name = parts[0];
  k.shape = parts[1];
  if (!parseTriple(parts[2], k.grid) || !parseTriple(parts[3], k.block))
    return false;
  if (parts.size() == 5)
    k.smem = unsigned(std::strtoul(parts[4].c_str(), nullptr, 10));
  return true;
}

/// Upstream's expanded rank-2 memref: allocated, aligned, offset, sizes,
/// strides.
struct MemRef2 {
  void *allocated, *aligned;
  int64_t offset, size0, size1, stride0, stride1;
};

double kernelSeconds(cudaKernel_t kernel, const KernelSpec &spec,
                     const Shape &s, int iters) {
  Operands op(s);
  MemRef2 a{op.a, op.a, 0, s.m, s.k, s.k, 1};
  MemRef2 w{op.w, op.w, 0, s.n, s.k, s.k, 1};
  MemRef2 c{op.c, op.c, 0, s.m, s.n, s.n, 1};
  std::vector<void *> args;
  for (MemRef2 *m : {&a, &w, &c})
    for (void *field :
         {(void *)&m->allocated, (void *)&m->aligned, (void *)&m->offset,
          (void *)&m->size0, (void *)&m->size1, (void *)&m->stride0,
          (void *)&m->stride1})
      args.push_back(field);
  if (spec.smem > 48 * 1024 &&
      !cudaOk(cudaFuncSetAttribute(reinterpret_cast<const void *>(kernel),
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(spec.smem)),
              "cudaFuncSetAttribute"))
    return -1;
  dim3 grid(spec.grid[0], spec.grid[1], spec.grid[2]);
  dim3 block(spec.block[0], spec.block[1], spec.block[2]);
  return timeIt(iters, [&] {
    return cudaOk(cudaLaunchKernel(reinterpret_cast<const void *>(kernel), grid,
                                   block, args.data(), spec.smem, nullptr),
                  ("cudaLaunchKernel(" + spec.name + ")").c_str());
  });
}

void attentionRoofline(const Dims &d) {
  std::printf("\nattention roofline (causal, GQA %ld/%ld heads of %ld, bf16, "
              "flash-style: Q, K, V read once, O written once):\n",
              d.heads, d.kvHeads, d.headDim);
  std::printf("  %-34s %12s %10s %10s %11s %11s\n", "scope", "GFLOP", "MB",
              "FLOP/B", "t_compute", "t_memory");
  struct Scope {
    const char *name;
    double queries, keysPerQuery, heads, kvHeads;
  };
  double t = double(d.tokens);
  // Causal: each query attends to half the keys on average. The seed plan's
  // GPU (TP2 x CP2, zigzag) holds T/2 queries and half the heads; with the
  // K/V exchange it sees all T keys, and zigzag balances the causal work.
  Scope scopes[] = {
      {"one replica, one layer", t, t / 2, double(d.heads), double(d.kvHeads)},
      {"one GPU of TP2 x CP2, one layer", t / 2, t / 2, d.heads / 2.0,
       d.kvHeads / 2.0},
  };
  for (const Scope &s : scopes) {
    double fl = 2.0 * 2.0 * s.queries * s.keysPerQuery * s.heads * d.headDim;
    // Every key and value of the scope's KV heads is read once (after the
    // CP exchange a GPU holds all T of them).
    double by = 2.0 * (2.0 * s.queries * s.heads * d.headDim +
                       2.0 * t * s.kvHeads * d.headDim);
    std::printf("  %-34s %12.2f %10.1f %10.0f %9.1f us %9.1f us\n", s.name,
                fl / 1e9, by / 1e6, fl / by, fl / kPeakFlops * 1e6,
                by / kPeakBytes * 1e6);
  }
  std::printf("  ridge point %.0f FLOP/B: prefill attention is compute "
              "bound.\n",
              kPeakFlops / kPeakBytes);
}

} // namespace

int main(int argc, char **argv) {
  Dims d;
  int iters = 20;
  std::string ptx;
  std::vector<KernelSpec> kernels;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu-kernels: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      usage();
      return 0;
    }
    if (arg == "--tokens")
      d.tokens = std::atol(value().c_str());
    else if (arg == "--iters")
      iters = std::atoi(value().c_str());
    else if (arg == "--ptx")
      ptx = value();
    else if (arg == "--kernel") {
      KernelSpec k;
      std::string text = value();
      if (!parseKernel(text, k)) {
        std::fprintf(stderr,
                     "gpu-kernels: --kernel '%s': expected "
                     "NAME:SHAPE:GX,GY,GZ:BX,BY,BZ[:SMEM]\n",
                     text.c_str());
        return 2;
      }
      kernels.push_back(k);
    } else {
      std::fprintf(stderr, "gpu-kernels: unknown option '%s' (see --help)\n",
                   arg.c_str());
      return 2;
    }
  }
  if (d.tokens < 32 || iters < 1) {
    std::fprintf(stderr, "gpu-kernels: --tokens must be >= 32, --iters >= 1\n");
    return 2;
  }
  if (!kernels.empty() && ptx.empty()) {
    std::fprintf(stderr, "gpu-kernels: --kernel needs --ptx\n");
    return 2;
  }

  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    std::fprintf(stderr,
                 "gpu-kernels: no CUDA GPU available (%s); this benchmark "
                 "needs one\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    attentionRoofline(d); // needs no GPU
    return 1;
  }
  cudaDeviceProp prop;
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s, %d SMs, %.1f GiB\n", prop.name,
              prop.multiProcessorCount,
              double(prop.totalGlobalMem) / (1 << 30));
  std::printf("dims: d %ld, heads %ld/%ld x %ld, expert FFN %ld, %ld experts "
              "top-%ld, T %ld per replica (%ld tokens per expert)\n",
              d.hidden, d.heads, d.kvHeads, d.headDim, d.ffn, d.experts, d.topK,
              d.tokens, d.tokens * d.topK / d.experts);
  std::printf("peak used for ratios: %.0f TFLOP/s bf16 dense, %.1f TB/s\n\n",
              kPeakFlops / 1e12, kPeakBytes / 1e12);

  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gpu-kernels: cublasCreate failed\n");
    return 1;
  }
  std::vector<Shape> all = shapes(d);
  std::vector<double> cublasTime(all.size(), -1);
  std::printf("cuBLAS bf16 x bf16 -> bf16, fp32 accumulation (C = A W^T):\n");
  std::printf("  %-10s %-48s %6s %6s %6s %5s %10s %9s %7s %9s\n", "shape",
              "what", "M", "N", "K", "batch", "time", "TFLOP/s", "%peak",
              "roofline");
  for (size_t i = 0; i < all.size(); ++i) {
    const Shape &s = all[i];
    double t = cublasSeconds(handle, s, iters);
    cublasTime[i] = t;
    double roof = std::max(flops(s) / kPeakFlops, bytes(s) / kPeakBytes);
    if (t <= 0) {
      std::printf("  %-10s %-48s failed\n", s.name.c_str(), s.what.c_str());
      continue;
    }
    std::printf("  %-10s %-48s %6ld %6ld %6ld %5ld %7.1f us %9.1f %6.1f%% "
                "%6.1f us\n",
                s.name.c_str(), s.what.c_str(), s.m, s.n, s.k, s.batch, t * 1e6,
                flops(s) / t / 1e12, 100 * flops(s) / t / kPeakFlops,
                roof * 1e6);
  }
  cublasDestroy(handle);

  if (!ptx.empty()) {
    std::printf("\nkernels of %s:\n", ptx.c_str());
    cudaLibrary_t lib;
    if (!cudaOk(cudaLibraryLoadFromFile(&lib, ptx.c_str(), nullptr, nullptr, 0,
                                        nullptr, nullptr, 0),
                "cudaLibraryLoadFromFile"))
      return 1;
    unsigned n = 0;
    CUDA_OR_DIE(cudaLibraryGetKernelCount(&n, lib));
    std::vector<cudaKernel_t> list(n);
    CUDA_OR_DIE(cudaLibraryEnumerateKernels(list.data(), n, lib));
    for (cudaKernel_t k : list) {
      const char *name = nullptr;
      if (cudaFuncGetName(&name, reinterpret_cast<const void *>(k)) !=
          cudaSuccess)
        name = "<unnamed>";
      std::printf("  %s\n", name);
    }
    if (kernels.empty())
      std::printf("  (time one with --kernel NAME:SHAPE:GRID:BLOCK; see "
                  "--help)\n");
    for (const KernelSpec &spec : kernels) {
      size_t which = all.size();
      for (size_t i = 0; i < all.size(); ++i)
        if (all[i].name == spec.shape)
          which = i;
      if (which == all.size() || all[which].batch != 1) {
        std::printf("  %s: shape '%s' is not one of the unbatched shapes\n",
                    spec.name.c_str(), spec.shape.c_str());
        continue;
      }
      cudaKernel_t kernel;
      if (!cudaOk(cudaLibraryGetKernel(&kernel, lib, spec.name.c_str()),
                  ("cudaLibraryGetKernel(" + spec.name + ")").c_str()))
        continue;
      const Shape &s = all[which];
      double t = kernelSeconds(kernel, spec, s, iters);
      if (t <= 0) {
        std::printf("  %s on %s: launch failed (signature or launch "
                    "configuration?)\n",
                    spec.name.c_str(), s.name.c_str());
        continue;
      }
      std::printf("  %s on %s: %.1f us, %.1f TFLOP/s, %.2fx cuBLAS's time\n",
                  spec.name.c_str(), s.name.c_str(), t * 1e6,
                  flops(s) / t / 1e12,
                  cublasTime[which] > 0 ? t / cublasTime[which] : 0.0);
    }
    cudaLibraryUnload(lib);
  }

  attentionRoofline(d);
  return 0;
}
