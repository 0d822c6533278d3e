//===- KVCache.cpp - A rank's paged K/V cache -----------------------------===//

#include "mfrt/program/KVCache.h"

#include "mfrt/comm/Device.h"
#include "mfrt/program/DeviceBuffers.h"
#include "mfrt/program/Program.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

using namespace mfrt;
using meshfold::Manifest;
using meshfold::MeshLayout;

int64_t mfrt::kvArraysPerRank(const Manifest &m) {
  int64_t pp = layoutOf(m).axisSize("pp");
  return (m.layers + pp - 1) / pp * m.kvCopies();
}

int64_t mfrt::kvBlockBytes(const Manifest &m, int64_t blockTokens) {
  MeshLayout layout = layoutOf(m);
  int64_t heads = meshfold::kvHeadsPerRank(m.kvHeads, layout.axisSize("tp"));
  return blockTokens * kvArraysPerRank(m) * heads * m.headDim *
         int64_t(sizeof(float));
}

int64_t mfrt::kvBlockCapacity(const Manifest &m, const KVSettings &settings) {
  if (settings.memoryBytes <= 0)
    return -1;
  return settings.memoryBytes / kvBlockBytes(m, settings.blockTokens);
}

void KVPool::configure(int64_t blockTokens, int64_t layers, int64_t headDim,
                       int64_t kvCopies, int64_t arrays) {
  *this = KVPool();
  blockTokens_ = blockTokens;
  headDim_ = headDim;
  kvCopies_ = kvCopies;
  layers_.resize(size_t(layers));
  // Every array holds its rows of every block: together they hold at most
  // the machine's memory.
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t memory = size_t(sysconf(_SC_PHYS_PAGES)) * page;
  arrayReserve_ =
      (memory / size_t(std::max<int64_t>(arrays, 1)) + page - 1) / page * page;
}

KVPool::Rows::~Rows() {
  if (!base)
    return;
  if (device) {
    if (comm::Device *d = comm::activeDevice()) {
      (void)d->synchronize();
      d->release(base);
    }
    return;
  }
  munmap(base, reserved);
}

float *KVPool::Rows::ensure(size_t bytes, size_t reserve) {
  if (bytes <= committed)
    return base;
  if (!base && deviceMode()) {
    device = true;
  } else if (!base) {
    // Address space for every block the pool may make, committed as they
    // are made: the array never moves.
    reserved = reserve;
    void *p = mmap(nullptr, reserved, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      fatal("K/V cache: cannot reserve " + std::to_string(reserved) +
            " bytes of address space");
    base = static_cast<float *>(p);
  }
  if (device) {
    // Managed memory grows by half again, copying what it held.
    size_t grown = std::max(bytes, committed + committed / 2);
    comm::Device *d = comm::activeDevice();
    void *p = nullptr;
    comm::Status st = d->allocShared(grown, &p);
    if (!st.ok())
      fatal("K/V cache: " + std::to_string(grown) +
            " bytes of managed memory: " + st.detail);
    if (base) {
      copyAny(p, base, committed);
      d->release(base);
    }
    base = static_cast<float *>(p);
    committed = grown;
    return base;
  }
  if (bytes > reserved)
    fatal("K/V cache: " + std::to_string(bytes) +
          " bytes of one layer's rows: with the rank's other layers, more "
          "than the machine's memory");
  // Whole chunks of 64 KiB at a time (a multiple of the page size).
  size_t chunk = size_t(1) << 16;
  size_t grown = std::min(reserved, (bytes + chunk - 1) / chunk * chunk);
  if (mprotect(reinterpret_cast<char *>(base) + committed, grown - committed,
               PROT_READ | PROT_WRITE) != 0)
    fatal("K/V cache: cannot commit " + std::to_string(grown) +
          " bytes of memory");
  committed = grown;
  return base;
}

void KVPool::useHeads(int64_t layer, int64_t headOffset, int64_t heads) {
  if (layer < 0 || layer >= int64_t(layers_.size()))
    fatal("internal: K/V cache of layer " + std::to_string(layer) +
          " outside the model's " + std::to_string(layers_.size()) + " layers");
  Layer &l = layers_[size_t(layer)];
  if (l.headOffset < 0) {
    l.headOffset = headOffset;
    l.heads = heads;
    return;
  }
  if (l.headOffset != headOffset || l.heads != heads)
    fatal("internal: the K/V cache of layer " + std::to_string(layer) +
          " holds heads " + std::to_string(l.headOffset) + ".." +
          std::to_string(l.headOffset + l.heads - 1) + ", not " +
          std::to_string(headOffset) + ".." +
          std::to_string(headOffset + heads - 1));
}

int64_t KVPool::headOffset(int64_t layer) const {
  return layers_[size_t(layer)].headOffset;
}

int64_t KVPool::heads(int64_t layer) const {
  return layers_[size_t(layer)].heads;
}

float *KVPool::storage(int64_t layer, int64_t tensor) {
  Layer &l = layers_[size_t(layer)];
  if (l.headOffset < 0)
    fatal("internal: the K/V cache of layer " + std::to_string(layer) +
          " was used before its heads were known");
  if (tensor >= kvCopies_)
    tensor = 0; // one tensor is both key and value
  std::unique_ptr<Rows> &rows = l.tensors[size_t(tensor)];
  if (!rows)
    rows = std::make_unique<Rows>();
  size_t blockBytes = size_t(blockTokens_ * l.heads * headDim_) * sizeof(float);
  l.blocks = std::max<int64_t>(l.blocks, created_);
  return rows->ensure(size_t(created_) * blockBytes, arrayReserve_);
}

void KVPool::reserve(std::vector<int32_t> &table, int64_t slots) {
  while (int64_t(table.size()) * blockTokens_ < slots) {
    int32_t block = created_;
    if (!free_.empty()) {
      block = free_.back();
      free_.pop_back();
    } else {
      ++created_;
      refs_.push_back(0);
    }
    refs_[size_t(block)] = 1;
    table.push_back(block);
    peak_ = std::max(peak_, ++inUse_);
  }
}

float *KVPool::row(std::vector<int32_t> &table, int64_t layer, int64_t slot,
                   int64_t tensor) {
  size_t index = size_t(slot / blockTokens_);
  if (index == table.size()) {
    reserve(table, slot + 1);
  } else if (index > table.size()) {
    fatal("internal: K/V cache slot " + std::to_string(slot) +
          " recorded before the slots of block " +
          std::to_string(table.size()));
  }
  return storage(layer, tensor) +
         poolRow(table, slot) * layers_[size_t(layer)].heads * headDim_;
}

const float *KVPool::row(const std::vector<int32_t> &table, int64_t layer,
                         int64_t slot, int64_t tensor) const {
  size_t index = size_t(slot / blockTokens_);
  const Layer &l = layers_[size_t(layer)];
  const Rows *rows = l.tensors[size_t(tensor < kvCopies_ ? tensor : 0)].get();
  if (index >= table.size() || !rows || !rows->data())
    fatal("internal: no cached K/V for layer " + std::to_string(layer) +
          " slot " + std::to_string(slot));
  return rows->data() + poolRow(table, slot) * l.heads * headDim_;
}

int64_t KVPool::allocatedBytes() const {
  int64_t bytes = 0;
  for (const Layer &l : layers_)
    bytes += l.blocks * kvCopies_ * blockTokens_ * l.heads * headDim_ *
             int64_t(sizeof(float));
  return bytes;
}

float *KVPool::rows(int64_t layer, int64_t tensor) {
  if (layer < 0 || layer >= int64_t(layers_.size()))
    fatal("internal: K/V cache of layer " + std::to_string(layer) +
          " outside the model's " + std::to_string(layers_.size()) + " layers");
  return storage(layer, tensor);
}

int64_t KVPool::poolRow(const std::vector<int32_t> &table, int64_t slot) const {
  return int64_t(table[size_t(slot / blockTokens_)]) * blockTokens_ +
         slot % blockTokens_;
}

void KVPool::share(const std::vector<int32_t> &from, int64_t blocks,
                   std::vector<int32_t> &table) {
  if (!table.empty() || blocks > int64_t(from.size()))
    fatal("internal: sharing " + std::to_string(blocks) + " of " +
          std::to_string(from.size()) + " K/V blocks into a table of " +
          std::to_string(table.size()));
  for (int64_t i = 0; i < blocks; ++i) {
    ++refs_[size_t(from[size_t(i)])];
    table.push_back(from[size_t(i)]);
  }
}

void KVPool::release(std::vector<int32_t> &table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it)
    if (--refs_[size_t(*it)] == 0) {
      free_.push_back(*it);
      --inUse_;
    }
  table.clear();
}
