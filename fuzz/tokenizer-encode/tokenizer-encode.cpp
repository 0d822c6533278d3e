//===- tokenizer-encode.cpp - Fuzz a tokenizer's encoder and decoder ------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// A fixed byte-level BPE tokenizer.json (MESHFOLD_FUZZ_TOKENIZER) encodes
// the input as text (refused unless UTF-8); its ids decode back, and the
// input's bytes, read as ids, decode too.
//
//===----------------------------------------------------------------------===//

#include "mfrt/tokenizer/Tokenizer.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::unique_ptr<mfrt::Tokenizer> tokenizer = [] {
    std::string error;
    std::unique_ptr<mfrt::Tokenizer> t =
        mfrt::Tokenizer::load(MESHFOLD_FUZZ_TOKENIZER, &error);
    if (!t)
      std::abort();
    return t;
  }();
  std::string_view text(reinterpret_cast<const char *>(data), size);
  std::vector<int64_t> ids;
  std::string error;
  if (tokenizer->encode(text, ids, &error))
    (void)tokenizer->decode(ids);
  std::vector<int64_t> raw;
  for (size_t i = 0; i + 1 < size; i += 2)
    raw.push_back(int64_t(data[i]) << 8 | data[i + 1]);
  (void)tokenizer->decode(raw);
  return 0;
}
