//===- DeviceBuffers.cpp - Program buffers in CUDA mode -------------------===//

#include "mfrt/program/DeviceBuffers.h"
#include "mfrt/comm/Device.h"

#include <cstring>

using namespace mfrt;
using mfrt::comm::Device;
using mfrt::comm::Status;

namespace {
Device *device() {
  Device *d = comm::activeDevice();
  return d && d->attached() ? d : nullptr;
}

void check(const Status &s, const std::string &what) {
  if (!s.ok())
    fatal(what + ": " + s.detail);
}
} // namespace

bool mfrt::programUsesDevice() { return comm::activeDevice() != nullptr; }

bool mfrt::deviceMode() { return device() != nullptr; }

void mfrt::syncForHost() { comm::hostAccess(); }

void mfrt::copyAny(void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src)
    return;
  Device *d = device();
  if (!d) {
    std::memcpy(dst, src, bytes);
    return;
  }
  check(d->copyAsync(dst, src, bytes), "copy");
  check(d->synchronize(), "copy");
}

void mfrt::uploadWeights(ProgramRank &rs) {
  Device *d = device();
  if (!d)
    return;
  rs.deviceParams.assign(rs.params.size(), nullptr);
  for (size_t id = 0; id < rs.params.size(); ++id) {
    WeightSlice &host = rs.params[id];
    if (host.empty())
      continue; // another stage's weight
    size_t bytes = host.bytes();
    void *ptr = nullptr;
    // Only kernels read weights: device memory, never host-visible.
    check(d->allocDevice(bytes, &ptr),
          "weights: " + std::to_string(bytes) + " bytes of device memory");
    rs.deviceParams[id] = ptr;
    check(d->copyAsync(ptr, host.data(), bytes), "weights: upload");
    check(d->synchronize(), "weights: upload");
    // The device copy is the only one from now on.
    host.release();
  }
}

void mfrt::releaseWeights(ProgramRank &rs) {
  Device *d = device();
  if (!d)
    return;
  (void)d->synchronize();
  for (void *ptr : rs.deviceParams)
    d->release(ptr);
  rs.deviceParams.clear();
}

void *mfrt::weightData(ProgramRank &rs, int64_t id) {
  if (id < 0 || size_t(id) >= rs.params.size())
    fatal("internal: weight id " + std::to_string(id) + " out of range");
  if (!rs.deviceParams.empty())
    return rs.deviceParams[size_t(id)];
  return rs.params[size_t(id)].data();
}

SharedBuffer::~SharedBuffer() {
  if (onDevice)
    if (Device *d = comm::activeDevice()) {
      (void)d->synchronize();
      d->release(ptr);
    }
}

void SharedBuffer::resize(size_t n) {
  if (onDevice && n <= bytes) {
    bytes = n;
    return;
  }
  if (onDevice) {
    Device *d = comm::activeDevice();
    (void)d->synchronize();
    d->release(ptr);
    onDevice = false;
    ptr = nullptr;
  }
  bytes = n;
  if (n == 0) { // nothing to stage: no device allocation
    host.clear();
    ptr = nullptr;
    return;
  }
  if (Device *d = device()) {
    void *p = nullptr;
    check(d->allocShared(n, &p),
          "staging buffer of " + std::to_string(n) + " bytes");
    ptr = static_cast<char *>(p);
    onDevice = true;
    return;
  }
  host.resize(n);
  ptr = host.data();
}

template <typename T>
mfrt::MemRefBuffer<T>::MemRefBuffer(UnrankedMemRefType<T> *m) {
  syncForHost();
  DynamicMemRefType<T> view(*m);
  const int64_t *sizes = view.sizes, *strides = view.strides;
  bool contiguous = true;
  int64_t expect = 1;
  for (int64_t d = view.rank - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != expect)
      contiguous = false;
    expect *= sizes[d];
  }
  count = expect;
  rows = view.rank > 0 ? sizes[0] : 1;
  rowElems = 1;
  for (int64_t d = 1; d < view.rank; ++d)
    rowElems *= sizes[d];
  data = view.data + view.offset;
  if (contiguous || count == 0)
    return;
  // Gather the strided view into a contiguous copy.
  copy.resize(size_t(count) * sizeof(T));
  T *out = reinterpret_cast<T *>(copy.data());
  std::vector<int64_t> idx(size_t(view.rank), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t at = 0;
    for (int64_t d = 0; d < view.rank; ++d)
      at += idx[d] * strides[d];
    out[i] = data[at];
    for (int64_t d = view.rank - 1; d >= 0; --d) {
      if (++idx[d] < sizes[d])
        break;
      idx[d] = 0;
    }
  }
  data = out;
}

template struct mfrt::MemRefBuffer<float>;
template struct mfrt::MemRefBuffer<int64_t>;

namespace {
/// Whether global rank `peer` is in the other pool of a two-pool launch
/// (then messages to it are transfers).
bool inOtherPool(int peer) {
  return mfrt_pool_size(1) > 0 &&
         (peer >= mfrt_pool_size(0)) != (mfrt_pool() == 1);
}
} // namespace

mfrt_status mfrt::sendHost(int peer, const void *buf, int64_t count,
                           mfrt_dtype dtype) {
  auto send = inOtherPool(peer) ? mfrt_transfer_send : mfrt_send;
  if (!deviceMode())
    return send(peer, buf, count, dtype);
  size_t bytes = size_t(count) * (dtype == MFRT_F32 ? 4 : 2);
  SharedBuffer staged(bytes);
  std::memcpy(staged.data(), buf, bytes);
  return send(peer, staged.data(), count, dtype);
}

mfrt_status mfrt::recvHost(int peer, void *buf, int64_t count,
                           mfrt_dtype dtype) {
  auto recv = inOtherPool(peer) ? mfrt_transfer_recv : mfrt_recv;
  if (!deviceMode())
    return recv(peer, buf, count, dtype);
  size_t bytes = size_t(count) * (dtype == MFRT_F32 ? 4 : 2);
  SharedBuffer staged(bytes);
  mfrt_status s = recv(peer, staged.data(), count, dtype);
  if (s == MFRT_OK) {
    syncForHost();
    std::memcpy(buf, staged.data(), bytes);
  }
  return s;
}
