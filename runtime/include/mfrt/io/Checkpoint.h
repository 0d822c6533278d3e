//===- Checkpoint.h - A checkpoint of one or many safetensors ---*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The weights as Hugging Face ships them: one `.safetensors` file, or
/// shards named by a `model.safetensors.index.json` (`{"weight_map": {name:
/// shard file}}`, shard files beside the index), or a folder holding either
/// (the index when there is one, else `model.safetensors`).
///
/// Opening checks the whole checkpoint: every shard named by the index is
/// present and a valid safetensors file, every tensor the index names is in
/// its shard, no tensor is in two shards and no shard holds a tensor the
/// index does not name. Errors are one line naming the shard and the tensor.
/// No LLVM dependency: linked into emitted executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_IO_CHECKPOINT_H
#define MFRT_IO_CHECKPOINT_H

#include "mfrt/io/Safetensors.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace mfrt {

class Checkpoint {
public:
  /// Opens and checks \p path (a file, an index or a folder). On failure
  /// returns null and sets \p error to one line.
  static std::unique_ptr<Checkpoint> open(const std::string &path,
                                          std::string *error);

  /// The path as given.
  const std::string &path() const { return givenPath; }
  /// The tensor called \p name, or null.
  const TensorInfo *find(const std::string &name) const;
  /// The file that holds \p name (the checkpoint's path when it has none).
  const std::string &fileOf(const std::string &name) const;
  /// Every tensor, shard by shard, in each shard's header order.
  std::vector<const TensorInfo *> tensors() const;
  /// The safetensors files of the checkpoint.
  size_t shardCount() const { return shards.size(); }

private:
  Checkpoint() = default;

  std::string givenPath;
  std::vector<std::unique_ptr<SafetensorsFile>> shards;
  /// Tensor name -> its shard.
  std::unordered_map<std::string, size_t> shardOf;
};

} // namespace mfrt

#endif // MFRT_IO_CHECKPOINT_H
