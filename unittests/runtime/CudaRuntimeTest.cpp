//===- CudaRuntimeTest.cpp - libmfrt_cuda.a and the runtime's CUDA mode ---===//
//
// Without a GPU (no driver, the stub driver, or no device) only the error
// paths run and the device tests are skipped.
//
//===----------------------------------------------------------------------===//

#include "mfrt/cuda/CudaDevice.h"
#include "mfrt/cuda/MgpuABI.h"
#include "mfrt/mfrt.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <vector>

using mfrt::cuda::CudaDevice;

namespace {

/// Empty when a device is usable, else why not.
std::string noDeviceReason() {
  int count = 0;
  mfrt::comm::Status s = CudaDevice::get().deviceCount(count);
  return s.ok() ? std::string() : s.detail;
}

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    std::string why = noDeviceReason();                                        \
    if (!why.empty())                                                          \
      GTEST_SKIP() << "no CUDA device: " << why;                               \
  } while (0)

/// y[i] = 2 * y[i] for i < n: `scale(float *y, unsigned n)`.
const char kScalePtx[] = R"(
.version 7.0
.target sm_52
.address_size 64

.visible .entry scale(.param .u64 data, .param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  add.f32 %f2, %f1, %f1;
  st.global.f32 [%rd4], %f2;
DONE:
  ret;
}
)";

const char *kPlan4 = "devices=4 gpus_per_node=2 attention=tp:2,cp:1,dp:2,pp:1 "
                     "experts=ep:4:tp+cp+dp,pp:1:pp";

} // namespace

// Linking the library registers the device with the runtime core.
TEST(CudaRuntime, RegistersTheDevice) {
  mfrt_cuda_register();
  EXPECT_EQ(mfrt::comm::activeDevice(), &CudaDevice::get());
  EXPECT_STREQ(CudaDevice::get().name(), "cuda");
}

// Without a device, the error names the driver call that failed.
TEST(CudaRuntime, NoDeviceErrorNamesTheCall) {
  std::string why = noDeviceReason();
  if (why.empty())
    GTEST_SKIP() << "a CUDA device is present";
  EXPECT_TRUE(why.find("cuInit failed: ") == 0 ||
              why.find("cuDeviceGetCount failed: ") == 0 ||
              why == "no CUDA device is visible")
      << why;
}

// Without a device, a launch fails on every rank with that error instead of
// hanging or crashing.
TEST(CudaRuntime, LaunchWithoutDeviceFailsClearly) {
  std::string why = noDeviceReason();
  if (why.empty())
    GTEST_SKIP() << "a CUDA device is present";
  mfrt_cuda_register();
  mfrt_options options{};
  options.backend = MFRT_BACKEND_LOCAL;
  options.plan = kPlan4;
  options.timeout_s = 5;
  std::atomic<int> ran{0};
  mfrt_status s = mfrt_launch(
      &options,
      [](void *user) {
        ++*static_cast<std::atomic<int> *>(user);
        return 0;
      },
      &ran);
  EXPECT_EQ(s, MFRT_ERR_BACKEND);
  EXPECT_EQ(ran.load(), 0);
  std::string msg = mfrt_last_error();
  EXPECT_NE(msg.find("mfrt: rank "), std::string::npos) << msg;
  EXPECT_NE(msg.find(why), std::string::npos) << msg;
}

// Module handles are cached per blob; lookups do not touch the driver until
// a function is requested.
TEST(CudaRuntime, ModuleLoadIsCachedPerBlob) {
  static const char blob[] = "not loaded until a function is requested";
  CUmodule a = mgpuModuleLoad(const_cast<char *>(blob), sizeof(blob));
  CUmodule b = mgpuModuleLoad(const_cast<char *>(blob), sizeof(blob));
  EXPECT_EQ(a, b);
  mgpuModuleUnload(a);
  mgpuModuleUnload(b);
}

// host_shared memory is managed: the host reads what a device memset wrote.
TEST(CudaRuntimeGPU, ManagedAllocMemsetAndCopy) {
  REQUIRE_GPU();
  CUstream s = mgpuStreamCreate();
  EXPECT_EQ(s, mgpuStreamCreate()) << "one stream per rank (thread)";
  auto *a = static_cast<uint32_t *>(mgpuMemAlloc(64 * 4, s, true));
  auto *b = static_cast<uint32_t *>(mgpuMemAlloc(64 * 4, s, true));
  mgpuMemset32(a, 0x3f800000u, 64, s);
  mgpuMemcpy(b, a, 64 * 4, s);
  mgpuStreamSynchronize(s);
  for (int i = 0; i < 64; ++i)
    ASSERT_EQ(b[i], 0x3f800000u);
  mgpuMemFree(a, s);
  mgpuMemFree(b, s);
  mgpuStreamDestroy(s); // the rank's stream: a no-op
  mgpuStreamSynchronize(mgpuStreamCreate());
}

// A PTX kernel loads through the JIT path, once, and launches on the stream.
TEST(CudaRuntimeGPU, DeviceAllocIsPooledAndStreamOrdered) {
  REQUIRE_GPU();
  CUstream s = mgpuStreamCreate();
  auto *host = static_cast<uint32_t *>(mgpuMemAlloc(64 * 4, s, true));
  // Device memory: not managed, freed in stream order and reused.
  void *d = mgpuMemAlloc(64 * 4, s, false);
  unsigned managed = 1;
  ASSERT_EQ(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                  reinterpret_cast<CUdeviceptr>(d)),
            CUDA_SUCCESS);
  EXPECT_EQ(managed, 0u);
  mgpuMemset32(d, 0x40000000u, 64, s);
  mgpuMemcpy(host, d, 64 * 4, s);
  mgpuMemFree(d, s); // queued behind the copy: no wait
  void *again = mgpuMemAlloc(64 * 4, s, false);
  mgpuMemset32(again, 0u, 64, s);
  mgpuStreamSynchronize(s);
  for (int i = 0; i < 64; ++i)
    ASSERT_EQ(host[i], 0x40000000u);
  mgpuMemFree(again, s);
  mgpuMemFree(host, s);
  mgpuStreamSynchronize(s);
}

TEST(CudaRuntimeGPU, PtxKernelLaunch) {
  REQUIRE_GPU();
  CUmodule m = mgpuModuleLoadJIT(const_cast<char *>(kScalePtx), 2);
  EXPECT_EQ(m, mgpuModuleLoadJIT(const_cast<char *>(kScalePtx), 2));
  CUfunction f = mgpuModuleGetFunction(m, "scale");
  EXPECT_EQ(f, mgpuModuleGetFunction(m, "scale"));
  CUstream s = mgpuStreamCreate();
  const unsigned n = 1000;
  auto *y = static_cast<float *>(mgpuMemAlloc(n * 4, s, true));
  for (unsigned i = 0; i < n; ++i)
    y[i] = float(i);
  void *ptr = y;
  unsigned count = n;
  void *params[] = {&ptr, &count};
  mgpuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, s, params, nullptr,
                   2);
  CUevent e = mgpuEventCreate();
  mgpuEventRecord(e, s);
  mgpuEventSynchronize(e);
  mgpuEventDestroy(e);
  mgpuStreamSynchronize(s);
  for (unsigned i = 0; i < n; ++i)
    ASSERT_EQ(y[i], 2.0f * float(i));
  mgpuMemFree(y, s);
  mgpuModuleUnload(m);
  mgpuModuleUnload(m);
}

// A TMA map (--wgmma's operands) is made once per distinct view: the same
// view gets the same device copy; one expert of a stacked bf16 weight (a
// view at an offset) gets its own.
TEST(CudaRuntimeGPU, TensorMapsPerViewMadeOnce) {
  REQUIRE_GPU();
  CUstream s = mgpuStreamCreate();
  const int64_t experts = 4, rows = 128, cols = 64;
  const size_t bytes = size_t(experts * rows * cols * 2);
  // Long-lived memory (a weight: cuMemAlloc) and a temporary of the
  // stream-ordered pool (an activation copy: gpu.alloc).
  CUdeviceptr weight = 0;
  ASSERT_EQ(cuMemAlloc(&weight, bytes), CUDA_SUCCESS);
  void *temporary = mgpuMemAlloc(bytes, s, false);
  auto view = [&](void *base, int64_t expert) {
    StridedMemRefType<uint16_t, 2> v;
    v.basePtr = v.data = static_cast<uint16_t *>(base);
    v.offset = expert * rows * cols;
    v.sizes[0] = rows;
    v.sizes[1] = cols;
    v.strides[0] = cols;
    v.strides[1] = 1;
    return v;
  };
  int64_t box[2] = {rows, cols};
  auto encode = [&](StridedMemRefType<uint16_t, 2> v) {
    return mgpuTensorMapEncodeTiledMemref(
        2, reinterpret_cast<StridedMemRefType<char, 1> *>(&v),
        CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE, box);
  };
  void *w = reinterpret_cast<void *>(weight);
  void *map = encode(view(w, 0));
  ASSERT_NE(map, nullptr);
  EXPECT_EQ(encode(view(w, 0)), map);
  void *other = encode(view(w, 2));
  EXPECT_NE(other, map);
  EXPECT_EQ(encode(view(w, 2)), other);
  // A temporary's maps serve one launch each: never cached, freed in stream
  // order after the next launch.
  void *first = encode(view(temporary, 0));
  void *second = encode(view(temporary, 0));
  ASSERT_NE(first, nullptr);
  EXPECT_NE(first, second);
  mgpuMemFree(temporary, s);
  mgpuStreamSynchronize(s);
  cuMemFree(weight);
}

// Local backend in CUDA mode: every rank a thread with its own stream on
// device 0; collectives move managed memory with device copies.
TEST(CudaRuntimeGPU, LocalBackendRanksShareTheDevice) {
  REQUIRE_GPU();
  mfrt_cuda_register();
  static std::mutex mutex;
  static std::set<CUstream> streams;
  static std::atomic<int> bad{0};
  streams.clear();
  mfrt_options options{};
  options.backend = MFRT_BACKEND_LOCAL;
  options.plan = kPlan4;
  options.timeout_s = 30;
  mfrt_status st = mfrt_launch(
      &options,
      [](void *) {
        CUstream s = mgpuStreamCreate();
        {
          std::lock_guard<std::mutex> lock(mutex);
          streams.insert(s);
        }
        int64_t world = mfrt_group("tp,cp,dp");
        int n = mfrt_group_size(world), me = mfrt_group_rank(world);
        const int64_t count = 1024;
        auto *send = static_cast<float *>(mgpuMemAlloc(count * 4, s, true));
        auto *recv = static_cast<float *>(mgpuMemAlloc(count * 4 * n, s, true));
        float v = float(me + 1);
        unsigned bits;
        std::memcpy(&bits, &v, 4);
        mgpuMemset32(send, bits, count, s); // left queued on purpose
        if (mfrt_all_gather(world, send, recv, count, MFRT_F32) != MFRT_OK)
          return 1;
        for (int r = 0; r < n; ++r)
          for (int64_t i = 0; i < count; ++i)
            if (recv[r * count + i] != float(r + 1)) {
              ++bad;
              break;
            }
        if (mfrt_all_reduce(world, send, send, count, MFRT_F32) != MFRT_OK)
          return 2;
        if (send[0] != float(n * (n + 1) / 2))
          ++bad;
        mgpuMemFree(send, s);
        mgpuMemFree(recv, s);
        return 0;
      },
      nullptr);
  EXPECT_EQ(st, MFRT_OK) << mfrt_last_error();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(streams.size(), 4u) << "one stream per rank";
}
