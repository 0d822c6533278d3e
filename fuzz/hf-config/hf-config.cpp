//===- hf-config.cpp - Fuzz the config.json importer ----------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The input is a config.json, then (where the config is accepted) the same
// text as a generation_config.json.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Importer/HFConfig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  meshfold::HFConfig config;
  std::string error;
  if (meshfold::parseHFConfig(text, "config.json", config, error))
    meshfold::applyGenerationConfig(text, "generation_config.json", config,
                                    error);
  return 0;
}
