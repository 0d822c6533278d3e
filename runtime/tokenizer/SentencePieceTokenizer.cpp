//===- SentencePieceTokenizer.cpp - tokenizer.model -----------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// A SentencePiece model through libsentencepiece, with BOS and EOS added as
// Hugging Face's Llama tokenizer adds them.
//
//===----------------------------------------------------------------------===//

#include "SentencePieceTokenizer.h"

#include <sentencepiece_processor.h>

#include <exception>

using namespace mfrt;

SentencePieceTokenizer::SentencePieceTokenizer()
    : processor(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer>
SentencePieceTokenizer::load(const std::string &path, bool addBos, bool addEos,
                             std::string *error) {
  auto t =
      std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
  t->file = path;
  t->addBos = addBos;
  t->addEos = addEos;
  sentencepiece::util::Status status;
  try {
    status = t->processor->Load(path);
  } catch (const std::exception &) {
    // The library's trie builder throws on a piece it cannot index (one
    // holding a NUL byte, or an empty one).
    if (error)
      *error = path + ": the SentencePiece model has a piece that cannot be "
                      "indexed (empty, or holding a NUL byte)";
    return nullptr;
  }
  if (!status.ok()) {
    // SentencePiece's own message names its source lines: not for users.
    if (error)
      *error = path + ": not a SentencePiece model (nor a tokenizer.json)";
    return nullptr;
  }
  if (t->processor->GetPieceSize() <= 0) {
    if (error)
      *error = path + ": the SentencePiece model has no pieces";
    return nullptr;
  }
  return t;
}

bool SentencePieceTokenizer::encodeText(std::string_view text,
                                        std::vector<int64_t> &ids,
                                        std::string *error,
                                        bool addSpecial) const {
  std::vector<int> pieces;
  sentencepiece::util::Status status =
      processor->Encode(absl::string_view(text.data(), text.size()), &pieces);
  if (!status.ok()) {
    if (error)
      *error = "SentencePiece cannot encode the text: " +
               std::string(status.message());
    return false;
  }
  if (addSpecial && addBos && processor->bos_id() >= 0)
    ids.push_back(processor->bos_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  if (addSpecial && addEos && processor->eos_id() >= 0)
    ids.push_back(processor->eos_id());
  return true;
}

std::string
SentencePieceTokenizer::decode(const std::vector<int64_t> &ids) const {
  std::vector<int> pieces;
  for (int64_t id : ids)
    if (id >= 0 && id < processor->GetPieceSize() &&
        !processor->IsControl(int(id)))
      pieces.push_back(int(id));
  std::string text;
  if (!processor->Decode(pieces, &text).ok())
    return "";
  return text;
}

int64_t SentencePieceTokenizer::vocabSize() const {
  return processor->GetPieceSize();
}
