//===- Tokenizer.h - A checkpoint's own tokenizer ---------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Text to token ids and back, with the tokenizer a checkpoint ships:
///
/// - `tokenizer.json` (Hugging Face `tokenizers`): a BPE model (byte-level,
///   as GPT-2, Qwen, Llama 3 and DeepSeek ship it, or with byte fallback, as
///   Mixtral and Llama 2 do), its normalizer, pre-tokenizer, added and
///   special tokens, post-processor (BOS) and decoder. Implemented here to
///   the format's definition (no Debian C++ library reads it); a component
///   the file names and this reader does not implement is refused, never
///   skipped.
/// - `tokenizer.model` (SentencePiece), through libsentencepiece; BOS and EOS
///   per `tokenizer_config.json` beside it (`add_bos_token`, default true;
///   `add_eos_token`, default false), as Hugging Face's Llama tokenizer does.
///
/// A folder is searched for `tokenizer.json` first, then `tokenizer.model`.
/// Errors are one line naming the file and the field. No LLVM dependency:
/// linked into emitted executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_TOKENIZER_TOKENIZER_H
#define MFRT_TOKENIZER_TOKENIZER_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mfrt {

class Tokenizer {
public:
  virtual ~Tokenizer();

  /// Loads the tokenizer at \p path: a `tokenizer.json`, a SentencePiece
  /// model or a folder holding either. On failure returns null and sets
  /// \p error to one line.
  static std::unique_ptr<Tokenizer> load(const std::string &path,
                                         std::string *error);
  /// The tokenizer file in \p folder (`tokenizer.json`, else
  /// `tokenizer.model`), or "" when it has neither.
  static std::string findIn(const std::string &folder);

  /// Encodes \p text (UTF-8) as the checkpoint's users get it, with the
  /// special tokens its configuration adds (BOS) unless \p addSpecial is
  /// false (text a chat template rendered, which holds them already). Fails,
  /// with one line in \p error, on text that is not UTF-8.
  bool encode(std::string_view text, std::vector<int64_t> &ids,
              std::string *error, bool addSpecial = true) const;
  /// The text of \p ids, special tokens (BOS, EOS) left out.
  virtual std::string decode(const std::vector<int64_t> &ids) const = 0;
  /// One more than the largest id it produces.
  virtual int64_t vocabSize() const = 0;
  /// The file it was loaded from.
  const std::string &path() const { return file; }
  /// "tokenizer.json" or "sentencepiece".
  virtual const char *kind() const = 0;

protected:
  /// encode() on text known to be UTF-8.
  virtual bool encodeText(std::string_view text, std::vector<int64_t> &ids,
                          std::string *error, bool addSpecial) const = 0;

  std::string file;
};

} // namespace mfrt

#endif // MFRT_TOKENIZER_TOKENIZER_H
