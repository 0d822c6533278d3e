//===- SentencePieceTokenizer.h - tokenizer.model ---------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Private to mfrt_tokenizer (Tokenizer::load makes one).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_TOKENIZER_SENTENCEPIECETOKENIZER_H
#define MFRT_TOKENIZER_SENTENCEPIECETOKENIZER_H

#include "mfrt/tokenizer/Tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace mfrt {

class SentencePieceTokenizer : public Tokenizer {
public:
  ~SentencePieceTokenizer() override;
  /// Loads the SentencePiece model \p path; BOS and EOS per \p addBos and
  /// \p addEos.
  static std::unique_ptr<SentencePieceTokenizer>
  load(const std::string &path, bool addBos, bool addEos, std::string *error);

  std::string decode(const std::vector<int64_t> &ids) const override;
  int64_t vocabSize() const override;
  const char *kind() const override { return "sentencepiece"; }

private:
  bool encodeText(std::string_view text, std::vector<int64_t> &ids,
                  std::string *error, bool addSpecial) const override;

  SentencePieceTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor;
  bool addBos = true, addEos = false;
};

} // namespace mfrt

#endif // MFRT_TOKENIZER_SENTENCEPIECETOKENIZER_H
