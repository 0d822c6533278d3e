//===- HFTokenizer.cpp - Hugging Face tokenizer.json ----------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The `tokenizer.json` of Hugging Face's `tokenizers`, read to the format's
// definition (the library's serialized pipeline): added tokens are split out
// first (leftmost-longest; those with `normalized: false` on the raw text,
// the others after normalization), every other piece is normalized,
// pre-tokenized into words, and each word is encoded by the BPE model (merges
// applied lowest rank first, leftmost first among equals; byte fallback or
// unk for characters outside the vocabulary); the post-processor adds the
// special tokens (BOS). Decoding maps ids to tokens, drops special tokens
// and runs the decoder chain. Regular expressions go through Oniguruma, the
// engine `tokenizers` itself uses; Unicode normalization through utf8proc.
//
// Implemented components: normalizers NFC, NFD, NFKC, NFKD, Lowercase,
// Prepend, Replace, Strip, Sequence; pre-tokenizers ByteLevel, Split,
// Metaspace, Digits, Whitespace, WhitespaceSplit, Sequence; the BPE model;
// post-processors TemplateProcessing, ByteLevel, RobertaProcessing,
// BertProcessing, Sequence; decoders ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip, Sequence. Anything else is refused by name.
//
// This file is the pipeline; the parts are read and implemented in the files
// HFTokenizerParts.h lists.
//
//===----------------------------------------------------------------------===//

#include "HFTokenizer.h"
#include "HFTokenizerParts.h"

using namespace mfrt;
using namespace mfrt::hf;

HFTokenizer::HFTokenizer() : impl(std::make_unique<Impl>()) {}
HFTokenizer::~HFTokenizer() = default;

//===----------------------------------------------------------------------===//
// Added tokens
//===----------------------------------------------------------------------===//

const HFTokenizer::AddedToken *
HFTokenizer::Impl::findAdded(const std::string &s, size_t from,
                             bool normalizedPass, size_t &at) const {
  size_t bestAt = std::string::npos, bestLen = 0;
  const AddedToken *best = nullptr;
  for (const AddedToken &t : added) {
    if (t.normalized != normalizedPass || t.content.empty())
      continue;
    size_t found = s.find(t.content, from);
    if (found == std::string::npos)
      continue;
    if (found < bestAt || (found == bestAt && t.content.size() > bestLen)) {
      bestAt = found;
      bestLen = t.content.size();
      best = &t;
    }
  }
  at = bestAt;
  return best;
}

namespace {

bool isWordChar(int32_t cp) {
  return cp == '_' || unicode::isLetter(cp) || unicode::isNumeric(cp);
}

/// The offset of the UTF-8 character that ends just before \p i in \p s,
/// not going below \p floor.
size_t previousChar(const std::string &s, size_t i, size_t floor) {
  size_t k = i - 1;
  while (k > floor && ((unsigned char)s[k] & 0xC0) == 0x80)
    --k;
  return k;
}

/// Whether s[start, stop) is a word of its own: no word character just
/// before or after it (`single_word`).
bool isSingleWord(const std::string &s, size_t start, size_t stop) {
  bool before =
      start > 0 && isWordChar(unicode::codePoint(s, previousChar(s, start, 0)));
  bool after = stop < s.size() && isWordChar(unicode::codePoint(s, stop));
  return !before && !after;
}

/// \p start moved left over the whitespace before it, down to \p floor
/// (`lstrip`).
size_t stripLeft(const std::string &s, size_t start, size_t floor) {
  size_t k = start;
  while (k > floor) {
    size_t b = previousChar(s, k, floor);
    if (!unicode::isWhitespace(unicode::codePoint(s, b)))
      break;
    k = b;
  }
  return k;
}

/// \p stop moved right over the whitespace after it (`rstrip`).
size_t stripRight(const std::string &s, size_t stop) {
  size_t n = 0;
  while (stop < s.size() &&
         unicode::isWhitespace(unicode::codePoint(s, stop, &n)))
    stop += n;
  return stop;
}

} // namespace

void HFTokenizer::Impl::splitAdded(
    const Piece &piece, bool normalizedPass,
    std::vector<std::pair<Piece, int64_t>> &out) const {
  const std::string &s = piece.text;
  size_t offset = 0, from = 0;
  while (from < s.size()) {
    size_t start;
    const AddedToken *best = findAdded(s, from, normalizedPass, start);
    if (!best)
      break;
    size_t stop = start + best->content.size();
    from = stop;
    if (best->singleWord && !isSingleWord(s, start, stop))
      continue;
    if (best->lstrip)
      start = stripLeft(s, start, offset);
    if (best->rstrip)
      from = stop = stripRight(s, stop);
    if (start > offset)
      out.push_back(
          {{s.substr(offset, start - offset), piece.first && offset == 0}, -1});
    out.push_back({{s.substr(start, stop - start), false}, best->id});
    offset = stop;
  }
  if (offset < s.size())
    out.push_back({{s.substr(offset), piece.first && offset == 0}, -1});
}

//===----------------------------------------------------------------------===//
// Encoding and decoding
//===----------------------------------------------------------------------===//

bool HFTokenizer::encodeText(std::string_view text, std::vector<int64_t> &ids,
                             std::string *, bool addSpecial) const {
  const Impl &m = *impl;
  ids = addSpecial ? m.before : std::vector<int64_t>{};
  std::vector<std::pair<Piece, int64_t>> raw;
  m.splitAdded({std::string(text), true}, false, raw);
  for (auto &[piece, id] : raw) {
    if (id >= 0) {
      ids.push_back(id);
      continue;
    }
    Piece normalized = piece;
    if (m.normalizer)
      normalized.text = m.normalizer(piece.text);
    std::vector<std::pair<Piece, int64_t>> parts;
    m.splitAdded(normalized, true, parts);
    for (auto &[part, partId] : parts) {
      if (partId >= 0) {
        ids.push_back(partId);
        continue;
      }
      std::vector<Piece> words = {part};
      if (m.preTokenizer)
        m.preTokenizer(words);
      for (const Piece &w : words)
        m.model.encode(w.text, ids);
    }
  }
  if (addSpecial)
    ids.insert(ids.end(), m.after.begin(), m.after.end());
  return true;
}

std::string HFTokenizer::decode(const std::vector<int64_t> &ids) const {
  const Impl &m = *impl;
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    if (id < 0 || id >= int64_t(m.tokenOf.size()) || m.special[size_t(id)])
      continue;
    tokens.push_back(m.tokenOf[size_t(id)]);
  }
  if (!m.decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i)
      out += (i ? " " : "") + tokens[i];
    return out;
  }
  m.decoder(tokens);
  std::string out;
  for (const std::string &t : tokens)
    out += t;
  return out;
}

int64_t HFTokenizer::vocabSize() const { return int64_t(impl->tokenOf.size()); }
