//===- safetensors.cpp - Fuzz the safetensors reader ----------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The input is a safetensors file: the reader validates its header (and
// every tensor's range); a file it accepts is read back as f32.
//
//===----------------------------------------------------------------------===//

#include "../FuzzFile.h"

#include "mfrt/io/Safetensors.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = meshfold::fuzz::writeFile("model.safetensors", data, size);
  std::string error;
  std::unique_ptr<mfrt::SafetensorsFile> file =
      mfrt::SafetensorsFile::open(path, &error);
  if (!file)
    return 0;
  for (const mfrt::TensorInfo &t : file->tensors()) {
    if (t.numElements() > (1 << 20))
      continue;
    std::vector<float> values(size_t(t.numElements()));
    mfrt::readAsF32(t, values.data(), values.size(), &error);
  }
  return 0;
}
