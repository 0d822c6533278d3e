//===- manifest.cpp - Fuzz the manifest reader ----------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The input is a manifest (what meshfold-compile embeds in an executable
// and the executable reads at start).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Support/Manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  meshfold::Manifest manifest;
  std::string error;
  meshfold::parseManifest(text.c_str(), manifest, error);
  return 0;
}
