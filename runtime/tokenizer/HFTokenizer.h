//===- HFTokenizer.h - Hugging Face tokenizer.json --------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Private to mfrt_tokenizer (Tokenizer::load makes one).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_TOKENIZER_HFTOKENIZER_H
#define MFRT_TOKENIZER_HFTOKENIZER_H

#include "mfrt/tokenizer/Tokenizer.h"

#include <nlohmann/json_fwd.hpp>

namespace mfrt {

class HFTokenizer : public Tokenizer {
public:
  ~HFTokenizer() override;
  /// Parses the contents of a tokenizer.json; \p name is the file named in
  /// errors.
  static std::unique_ptr<HFTokenizer>
  parse(const std::string &text, const std::string &name, std::string *error);

  std::string decode(const std::vector<int64_t> &ids) const override;
  int64_t vocabSize() const override;
  const char *kind() const override { return "tokenizer.json"; }

private:
  bool encodeText(std::string_view text, std::vector<int64_t> &ids,
                  std::string *error, bool addSpecial) const override;

  HFTokenizer();
  void build(const std::string &text);
  void buildPostProcessor(const nlohmann::json &spec, const std::string &where);

  struct AddedToken;
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace mfrt

#endif // MFRT_TOKENIZER_HFTOKENIZER_H
