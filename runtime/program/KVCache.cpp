//===- KVCache.cpp - A rank's paged K/V cache -----------------------------===//

#include "mfrt/program/KVCache.h"

#include "mfrt/program/Program.h"

using namespace mfrt;
using meshfold::Manifest;
using meshfold::MeshLayout;

int64_t mfrt::kvBlockBytes(const Manifest &m, int64_t blockTokens) {
  MeshLayout layout = layoutOf(m);
  int64_t pp = layout.axisSize("pp");
  int64_t stageLayers = (m.layers + pp - 1) / pp;
  int64_t heads = meshfold::kvHeadsPerRank(m.kvHeads, layout.axisSize("tp"));
  return blockTokens * stageLayers * heads * m.headDim * m.kvCopies() *
         int64_t(sizeof(float));
}

int64_t mfrt::kvBlockCapacity(const Manifest &m, const KVSettings &settings) {
  if (settings.memoryBytes <= 0)
    return -1;
  return settings.memoryBytes / kvBlockBytes(m, settings.blockTokens);
}

void KVPool::configure(int64_t blockTokens, int64_t layers, int64_t headDim,
                       int64_t kvCopies) {
  *this = KVPool();
  blockTokens_ = blockTokens;
  headDim_ = headDim;
  kvCopies_ = kvCopies;
  layers_.resize(size_t(layers));
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

float *KVPool::storage(int64_t layer, int32_t block) {
  Layer &l = layers_[size_t(layer)];
  if (l.headOffset < 0)
    fatal("internal: the K/V cache of layer " + std::to_string(layer) +
          " was used before its heads were known");
  if (l.blocks.size() <= size_t(block))
    l.blocks.resize(size_t(block) + 1);
  std::unique_ptr<float[]> &b = l.blocks[size_t(block)];
  if (!b) {
    size_t floats = size_t(kvCopies_ * blockTokens_ * l.heads * headDim_);
    b = std::make_unique<float[]>(floats);
    allocatedBytes_ += int64_t(floats * sizeof(float));
  }
  return b.get();
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
  const Layer &l = layers_[size_t(layer)];
  int64_t width = l.heads * headDim_;
  return storage(layer, table[index]) +
         (tensor * blockTokens_ + slot % blockTokens_) * width;
}

const float *KVPool::row(const std::vector<int32_t> &table, int64_t layer,
                         int64_t slot, int64_t tensor) const {
  size_t index = size_t(slot / blockTokens_);
  const Layer &l = layers_[size_t(layer)];
  int32_t block = index < table.size() ? table[index] : -1;
  if (block < 0 || l.blocks.size() <= size_t(block) || !l.blocks[size_t(block)])
    fatal("internal: no cached K/V for layer " + std::to_string(layer) +
          " slot " + std::to_string(slot));
  return l.blocks[size_t(block)].get() +
         (tensor * blockTokens_ + slot % blockTokens_) * l.heads * headDim_;
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
