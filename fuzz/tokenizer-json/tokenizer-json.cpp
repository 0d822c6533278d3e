//===- tokenizer-json.cpp - Fuzz the tokenizer.json loader ----------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The input is a tokenizer.json; a tokenizer it loads encodes and decodes a
// fixed text (ASCII, accents, CJK, emoji, whitespace runs, special tokens).
//
//===----------------------------------------------------------------------===//

#include "../FuzzTokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  meshfold::fuzz::loadAndRoundTrip(
      "tokenizer.json", data, size,
      "Hello,  world! caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd "
      "\xf0\x9f\x9a\x80 <s>don't 12345\n\t</s>");
  return 0;
}
