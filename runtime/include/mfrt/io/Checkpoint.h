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
/// Opening reads every shard's header; a shard is mapped only when one of
/// its tensors is found (find()), so that a process maps the shards that hold
/// its slices and no others.
/// No LLVM dependency: linked into emitted executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_IO_CHECKPOINT_H
#define MFRT_IO_CHECKPOINT_H

#include "mfrt/io/Safetensors.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mfrt {

class Checkpoint {
public:
  /// Opens and checks \p path (a file, an index or a folder). On failure
  /// returns null and sets \p error to one line. \p label, when given, is
  /// the name path() returns (a generated checkpoint's).
  static std::unique_ptr<Checkpoint> open(const std::string &path,
                                          std::string *error,
                                          const std::string &label = "");

  /// The path as given (or the label).
  const std::string &path() const { return givenPath; }
  /// The tensor called \p name, its shard mapped (its `data` set), or null
  /// when there is none or (with \p error set) its shard cannot be mapped.
  const TensorInfo *find(const std::string &name,
                         std::string *error = nullptr) const;
  /// The tensor called \p name as its header describes it (name, dtype,
  /// shape), without mapping its shard (`data` may be null), or null.
  const TensorInfo *header(const std::string &name) const;
  /// Maps every shard (before reading tensors() data).
  bool mapAll(std::string *error) const;
  /// The shards mapped so far, and their bytes.
  std::pair<size_t, uint64_t> mapped() const;
  /// The file that holds \p name (the checkpoint's path when it has none).
  const std::string &fileOf(const std::string &name) const;
  /// Every tensor, shard by shard, in each shard's header order (`data` set
  /// only for mapped shards: see mapAll()).
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
