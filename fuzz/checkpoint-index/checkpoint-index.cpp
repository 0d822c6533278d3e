//===- checkpoint-index.cpp - Fuzz the checkpoint index reader ------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The input is a model.safetensors.index.json beside one small valid shard
// (model-00001-of-00001.safetensors holding tensor "a"): the checkpoint
// reader checks the index and every shard it names.
//
//===----------------------------------------------------------------------===//

#include "../FuzzFile.h"

#include "mfrt/io/Checkpoint.h"

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string shard = [] {
    // One F32 tensor "a" of shape [2].
    std::string header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                         "\"data_offsets\":[0,8]}}";
    std::string file(8, '\0');
    uint64_t n = header.size();
    std::memcpy(file.data(), &n, 8);
    file += header + std::string(8, '\0');
    return meshfold::fuzz::writeFile(
        "model-00001-of-00001.safetensors",
        reinterpret_cast<const uint8_t *>(file.data()), file.size());
  }();
  (void)shard;
  std::string path =
      meshfold::fuzz::writeFile("model.safetensors.index.json", data, size);
  std::string error;
  std::unique_ptr<mfrt::Checkpoint> checkpoint =
      mfrt::Checkpoint::open(path, &error);
  if (checkpoint)
    for (const mfrt::TensorInfo *t : checkpoint->tensors())
      (void)checkpoint->fileOf(t->name);
  return 0;
}
