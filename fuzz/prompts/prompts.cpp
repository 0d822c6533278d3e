//===- prompts.cpp - Fuzz the prompts readers -----------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The input is read as each kind of prompts file: token ids, text lines
// (escapes, UTF-8) and JSONL; accepted text is escaped back.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Prompts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string error;
  std::vector<std::vector<int64_t>> ids;
  mfrt::parsePromptsText(text, "prompts.txt", 32000, ids, &error);
  std::vector<mfrt::PromptEntry> entries;
  if (mfrt::parsePromptLines(text, "prompts.txt", entries, &error))
    for (const mfrt::PromptEntry &e : entries)
      (void)mfrt::escapePromptText(e.text);
  mfrt::parsePromptsJsonl(text, "prompts.jsonl", 32000, entries, &error);
  return 0;
}
