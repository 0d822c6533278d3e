//===- CublasLtGemm.cpp - --gemm-backend cublaslt's matrix products -------===//
//
// out[m, n] += a[m, k] * w[n, k] with bf16 a and w and f32 out, as one
// cublasLtMatmul on the rank's stream. cuBLAS is column-major: the
// row-major out (M x N, leading dimension its row stride) is the
// column-major N x M matrix D = W^T^T A^T, where the row-major w (N x K) is
// the column-major K x N matrix "A" taken transposed and the row-major a
// (M x K) the column-major K x M matrix "B"; C = D with beta = 1 adds to
// out. Compute and scale types are f32.
//
// One handle per process; per rank (thread) a 32 MiB workspace; per shape
// the operation's descriptors and the heuristic's algorithm, made once.
//
//===----------------------------------------------------------------------===//

#include "mfrt/CodegenABI.h"
#include "mfrt/comm/Device.h"
#include "mfrt/cuda/CudaDevice.h"

#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

using namespace mfrt;

namespace {
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

[[noreturn]] void fail(const std::string &what) {
  comm::failRank(MFRT_ERR_BACKEND, "cuBLASLt: " + what);
}

void check(cublasStatus_t status, const char *call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(std::string(call) + " failed: " + cublasLtGetStatusName(status) +
         " (" + cublasLtGetStatusString(status) + ")");
}

/// A 2-D memref's view: its first element, rows, columns and row stride
/// (elements); the inner stride must be 1.
template <typename T> struct View {
  T *data;
  int64_t rows, cols, stride;
};

template <typename T> View<T> view(UnrankedMemRefType<T> *m, const char *what) {
  if (m->rank != 2)
    fail(std::string(what) + " has rank " + std::to_string(m->rank) +
         ", expected 2");
  auto *d = static_cast<StridedMemRefType<T, 2> *>(m->descriptor);
  if (d->strides[1] != 1)
    fail(std::string(what) + " has inner stride " +
         std::to_string(d->strides[1]) + ", expected 1");
  return {d->data + d->offset, d->sizes[0], d->sizes[1], d->strides[0]};
}

/// The descriptors and algorithm of one shape.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

cublasLtMatrixLayout_t layout(cudaDataType type, int64_t rows, int64_t cols,
                              int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  check(
      cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld),
      "cublasLtMatrixLayoutCreate");
  return l;
}

class Lt {
public:
  static Lt &get() {
    static Lt lt;
    return lt;
  }

  /// The plan of an M x N x K product with these leading dimensions.
  const Plan &plan(const Shape &shape) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = plans.find(shape);
    if (it != plans.end())
      return it->second;
    auto [m, n, k, ldw, lda, ldo] = shape;
    Plan p;
    check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          "cublasLtMatmulDescCreate");
    cublasOperation_t t = CUBLAS_OP_T, nop = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &t,
                                         sizeof(t)),
          "cublasLtMatmulDescSetAttribute(TRANSA)");
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                         &nop, sizeof(nop)),
          "cublasLtMatmulDescSetAttribute(TRANSB)");
    p.w = layout(CUDA_R_16BF, k, n, ldw);
    p.a = layout(CUDA_R_16BF, k, m, lda);
    p.out = layout(CUDA_R_32F, n, m, ldo);
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref),
          "cublasLtMatmulPreferenceCreate");
    size_t bytes = kWorkspaceBytes;
    check(cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
              sizeof(bytes)),
          "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.w, p.a, p.out, p.out,
                                         pref, 1, &result, &found),
          "cublasLtMatmulAlgoGetHeuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0)
      fail("no algorithm for " + std::to_string(m) + " x " + std::to_string(n) +
           " x " + std::to_string(k) + " (bf16 x bf16 -> f32)");
    p.algo = result.algo;
    return plans.emplace(shape, p).first->second;
  }

  cublasLtHandle_t handle = nullptr;

private:
  Lt() { check(cublasLtCreate(&handle), "cublasLtCreate"); }
  std::mutex mutex;
  std::map<Shape, Plan> plans;
};

/// The calling rank's workspace (device memory, kept for the process).
void *workspace() {
  thread_local void *ws = nullptr;
  if (ws)
    return ws;
  comm::Status s = cuda::CudaDevice::get().allocDevice(kWorkspaceBytes, &ws);
  if (!s.ok())
    fail("cannot allocate the " + std::to_string(kWorkspaceBytes >> 20) +
         " MiB workspace: " + s.detail);
  return ws;
}
} // namespace

extern "C" void _mlir_ciface_mfrt_cg_gemm_bf16(UnrankedMemRefType<uint16_t> *w,
                                               UnrankedMemRefType<uint16_t> *a,
                                               UnrankedMemRefType<float> *out) {
  View<uint16_t> vw = view(w, "the weight");
  View<uint16_t> va = view(a, "the activations");
  View<float> vo = view(out, "the output");
  if (va.cols != vw.cols || vo.rows != va.rows || vo.cols != vw.rows)
    fail("shapes do not multiply: out " + std::to_string(vo.rows) + " x " +
         std::to_string(vo.cols) + " += a " + std::to_string(va.rows) + " x " +
         std::to_string(va.cols) + " * w^T " + std::to_string(vw.rows) + " x " +
         std::to_string(vw.cols));
  if (va.rows == 0)
    return;
  Lt &lt = Lt::get();
  const Plan &p =
      lt.plan({va.rows, vw.rows, vw.cols, vw.stride, va.stride, vo.stride});
  float one = 1.0f;
  auto stream =
      static_cast<cudaStream_t>(cuda::CudaDevice::get().currentStream());
  check(cublasLtMatmul(lt.handle, p.op, &one, vw.data, p.w, va.data, p.a, &one,
                       vo.data, p.out, vo.data, p.out, &p.algo, workspace(),
                       kWorkspaceBytes, stream),
        "cublasLtMatmul");
}
