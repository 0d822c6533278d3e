//===- FuzzTokenizer.h - Fuzz a tokenizer file ------------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Loads a fuzz input as a tokenizer file of a given name and, when it loads,
// encodes a sample text and decodes the ids back: the loader and the tables
// it builds are exercised together.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_FUZZ_FUZZTOKENIZER_H
#define MESHFOLD_FUZZ_FUZZTOKENIZER_H

#include "FuzzFile.h"

#include "mfrt/tokenizer/Tokenizer.h"

#include <memory>
#include <vector>

namespace meshfold::fuzz {

/// Writes \p data to `folder()/name`, loads it as a tokenizer and, if that
/// succeeds, encodes \p sample and decodes the ids.
inline void loadAndRoundTrip(const std::string &name, const uint8_t *data,
                             size_t size, const std::string &sample) {
  std::string path = writeFile(name, data, size);
  std::string error;
  std::unique_ptr<mfrt::Tokenizer> tokenizer =
      mfrt::Tokenizer::load(path, &error);
  if (!tokenizer)
    return;
  std::vector<int64_t> ids;
  if (tokenizer->encode(sample, ids, &error))
    (void)tokenizer->decode(ids);
}

} // namespace meshfold::fuzz

#endif // MESHFOLD_FUZZ_FUZZTOKENIZER_H
