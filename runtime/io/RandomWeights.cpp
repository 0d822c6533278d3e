//===- RandomWeights.cpp - Deterministic generated weights ----------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// A generated checkpoint is a safetensors file in an anonymous memory file
// (memfd), opened through /proc/self/fd like any other: the loader maps it,
// uses slices in place and drops the pages of copied ones as it does with a
// file on disk (the pages stay in the memory file, so another rank still
// reads them).
//
// No LLVM dependency: linked into emitted executables.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/RandomWeights.h"

#include "meshfold/Support/DType.h"

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

using namespace mfrt;

namespace {
/// splitmix64: small, fast, and the same on every platform.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [-1, 1).
  double uniform() { return double(next() >> 11) * 0x1.0p-52 - 1.0; }
};

uint64_t fnv1a(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s)
    h = (h ^ uint8_t(c)) * 0x100000001b3ULL;
  return h;
}

int64_t product(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  return count;
}

bool fail(std::string *error, const std::string &what) {
  if (error)
    *error = what;
  return false;
}

/// Writes the tensors' bytes at their offsets in `data`, `threads` tensors
/// at a time.
void fillTensors(const std::vector<RandomTensor> &tensors,
                 const std::vector<uint64_t> &offsets, uint64_t seed,
                 unsigned threads, uint8_t *data) {
  std::atomic<size_t> nextTensor{0};
  auto work = [&] {
    std::vector<uint8_t> bytes;
    for (size_t t; (t = nextTensor++) < tensors.size();) {
      const RandomTensor &r = tensors[t];
      randomWeightBytes(r.name, r.shape, r.dtype, seed, bytes);
      std::memcpy(data + offsets[t], bytes.data(), bytes.size());
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < std::max(1u, threads); ++i)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();
}

/// Lays the safetensors file of `tensors` out in the memory file `fd`.
bool writeFile(int fd, const std::vector<RandomTensor> &tensors, uint64_t seed,
               unsigned threads, std::string *error) {
  SafetensorsWriter layout;
  layout.setMetadata("format", "pt");
  std::vector<uint64_t> offsets;
  uint64_t dataBytes = 0;
  for (const RandomTensor &t : tensors) {
    if (t.dtype != DType::F32 && t.dtype != DType::BF16)
      return fail(error, "random weights: tensor '" + t.name +
                             "': only F32 and BF16 are generated");
    layout.declare(t.name, t.dtype, t.shape);
    offsets.push_back(dataBytes);
    dataBytes += uint64_t(product(t.shape)) * dtypeSize(t.dtype);
  }
  std::string header;
  if (!layout.buildHeader(header, error))
    return false;
  const uint64_t start = 8 + header.size(), size = start + dataBytes;
  if (::ftruncate(fd, off_t(size)) != 0)
    return fail(error, "random weights: cannot size a memory file of " +
                           std::to_string(size) +
                           " bytes: " + std::strerror(errno));
  void *base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    return fail(error, std::string("random weights: cannot map the memory "
                                   "file: ") +
                           std::strerror(errno));
  uint8_t *bytes = static_cast<uint8_t *>(base);
  for (int i = 0; i < 8; ++i)
    bytes[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  std::memcpy(bytes + 8, header.data(), header.size());
  fillTensors(tensors, offsets, seed, threads, bytes + start);
  ::munmap(base, size);
  return true;
}
} // namespace

void mfrt::randomWeightValues(const std::string &name, int64_t lastDim,
                              int64_t count, uint64_t seed, float *out) {
  SplitMix64 rng{fnv1a(name) ^ (seed * 0xd1342543de82ef95ULL)};
  const bool norm = name.size() >= 11 &&
                    name.compare(name.size() - 11, 11, "norm.weight") == 0;
  const double scale = name == "model.embed_tokens.weight"
                           ? 1.0
                           : 1.0 / std::sqrt(double(lastDim));
  for (int64_t i = 0; i < count; ++i)
    out[i] =
        norm ? float(1.0 + 0.1 * rng.uniform()) : float(scale * rng.uniform());
}

void mfrt::randomWeightBytes(const std::string &name,
                             const std::vector<int64_t> &shape, DType dtype,
                             uint64_t seed, std::vector<uint8_t> &bytes) {
  const int64_t count = product(shape);
  std::vector<float> values(static_cast<size_t>(count));
  randomWeightValues(name, shape.empty() ? 1 : shape.back(), count, seed,
                     values.data());
  if (dtype == DType::F32) {
    bytes.resize(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return;
  }
  bytes.resize(values.size() * sizeof(uint16_t));
  for (size_t k = 0; k < values.size(); ++k) {
    uint16_t h = meshfold::f32ToBF16(values[k]);
    std::memcpy(bytes.data() + 2 * k, &h, 2);
  }
}

std::unique_ptr<Checkpoint>
mfrt::randomCheckpoint(const std::vector<RandomTensor> &tensors, uint64_t seed,
                       const std::string &label, unsigned threads,
                       std::string *error) {
  int fd = ::memfd_create("meshfold-random-weights", MFD_CLOEXEC);
  if (fd < 0) {
    fail(error, std::string("random weights: cannot create a memory file: ") +
                    std::strerror(errno));
    return nullptr;
  }
  std::unique_ptr<Checkpoint> checkpoint;
  if (writeFile(fd, tensors, seed, threads, error))
    checkpoint =
        Checkpoint::open("/proc/self/fd/" + std::to_string(fd), error, label);
  // The checkpoint holds its own descriptor or mapping of the memory file.
  ::close(fd);
  return checkpoint;
}
