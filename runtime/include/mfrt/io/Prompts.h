//===- Prompts.h - Prompt file parsing --------------------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Parses a prompts file: one request per line, each line a list of token ids
/// separated by spaces or tabs. A single newline at the end of the file is
/// allowed; any empty or whitespace-only line is an error.
///
/// This file has no LLVM dependency: it is linked into emitted executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_IO_PROMPTS_H
#define MFRT_IO_PROMPTS_H

#include <cstdint>
#include <string>
#include <vector>

namespace mfrt {

/// Reads the prompts file \p path into \p out (one vector of token ids per
/// request, in file order). Every id must lie in [0, vocab). On failure
/// returns false, leaves \p out empty and sets \p error (if non-null) to one
/// line naming the file and, where it applies, the line number and the token,
/// e.g. `prompts.txt: line 3: token '-4' is negative`.
bool parsePrompts(const std::string &path, int64_t vocab,
                  std::vector<std::vector<int64_t>> &out, std::string *error);

/// As parsePrompts, but parses \p text directly; \p name is used in messages
/// in place of the file name.
bool parsePromptsText(const std::string &text, const std::string &name,
                      int64_t vocab, std::vector<std::vector<int64_t>> &out,
                      std::string *error);

/// A prompt as a file gives it: text to tokenize, or token ids; with the
/// line it is on (from 1).
struct PromptEntry {
  bool isText = false;
  std::string text;
  std::vector<int64_t> ids;
  size_t line = 0;
};

/// Parses a text prompts file (--prompts-text): one prompt per line, UTF-8,
/// with the escapes `\n`, `\t`, `\r` and `\\` (any other backslash
/// sequence is an error). A '\r' before a line's newline is dropped; an
/// empty line is an error. Errors name \p name and the line.
bool parsePromptLines(const std::string &text, const std::string &name,
                      std::vector<PromptEntry> &out, std::string *error);

/// Parses a JSONL prompts file (--prompts-jsonl): one JSON object per line
/// with `"prompt": "text"` or `"prompt_token_ids": [ids]` (at the top level
/// or in a `"body"` object, as in OpenAI batch files); blank lines are
/// skipped. Ids must lie in [0, vocab). Other fields are refused (sampling
/// and length settings are the run's flags, for every request; chat
/// `messages` need a chat template), except metadata that changes nothing:
/// `model`, `user`, and a batch line's `custom_id`, `method` and `url`.
bool parsePromptsJsonl(const std::string &text, const std::string &name,
                       int64_t vocab, std::vector<PromptEntry> &out,
                       std::string *error);

/// \p text with the escapes parsePromptLines reads (backslash, newline,
/// carriage return and tab escaped), on one line.
std::string escapePromptText(const std::string &text);

} // namespace mfrt

#endif // MFRT_IO_PROMPTS_H
