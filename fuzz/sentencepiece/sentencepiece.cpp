//===- sentencepiece.cpp - Fuzz the SentencePiece loader ------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The input is a tokenizer.model (a SentencePiece model, or anything else
// that is not a JSON object); a model it loads encodes and decodes a fixed
// text.
//
//===----------------------------------------------------------------------===//

#include "../FuzzFile.h"

#include "mfrt/tokenizer/Tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = meshfold::fuzz::writeFile("tokenizer.model", data, size);
  std::string error;
  std::unique_ptr<mfrt::Tokenizer> tokenizer =
      mfrt::Tokenizer::load(path, &error);
  if (!tokenizer)
    return 0;
  std::vector<int64_t> ids;
  if (tokenizer->encode("Hello,  world! caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd "
                        "\xf0\x9f\x9a\x80 don't 12345",
                        ids, &error))
    (void)tokenizer->decode(ids);
  return 0;
}
