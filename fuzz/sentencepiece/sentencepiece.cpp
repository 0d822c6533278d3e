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

#include "../FuzzTokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  meshfold::fuzz::loadAndRoundTrip(
      "tokenizer.model", data, size,
      "Hello,  world! caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd "
      "\xf0\x9f\x9a\x80 don't 12345");
  return 0;
}
