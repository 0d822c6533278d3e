//===- PromptSource.h - Prompts as ids, text or JSONL -----------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The prompts of a run, from one of three files: token ids (--prompts),
/// text (--prompts-text) or JSONL (--prompts-jsonl), text tokenized with the
/// checkpoint's own tokenizer: --tokenizer's, else the one beside the
/// weights (in the checkpoint folder, or in the folder of the index or the
/// file). Shared by the emitted program and meshfold-reference. No LLVM
/// dependency: linked into emitted executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_TOKENIZER_PROMPTSOURCE_H
#define MFRT_TOKENIZER_PROMPTSOURCE_H

#include "mfrt/io/Prompts.h"
#include "mfrt/tokenizer/Tokenizer.h"

namespace mfrt {

/// The files a run names (empty: not given); exactly one of the prompts
/// files.
struct PromptFiles {
  std::string ids, text, jsonl, tokenizer, weights;
  /// Whether the tokenizer is wanted even for prompts given as ids (to
  /// detokenize the outputs): then it is loaded where one is found.
  bool wantTokenizer = false;
};

struct Prompts {
  /// The prompts file, and each request's line in it.
  std::string file;
  std::vector<size_t> lines;
  /// Each request's token ids.
  std::vector<std::vector<int64_t>> tokens;
  /// The prompts given as text (empty for ids).
  std::vector<std::string> texts;
  /// The tokenizer, when one was needed or wanted and found.
  std::unique_ptr<Tokenizer> tokenizer;
};

/// Reads the prompts of \p files for a model of \p vocab ids (at most
/// \p maxPositions tokens, when positive, is checked by the caller). On
/// failure returns false and sets \p error to one line naming the file (and
/// the line).
bool readPrompts(const PromptFiles &files, int64_t vocab, Prompts &out,
                 std::string *error);

/// The tokenizer for \p files: --tokenizer's, else the one beside the
/// weights; "" when there is none.
std::string tokenizerPathFor(const PromptFiles &files);

} // namespace mfrt

#endif // MFRT_TOKENIZER_PROMPTSOURCE_H
