//===- HFTokenizerParts.h - The parts of a tokenizer.json -------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Private to mfrt_tokenizer: what the files of HFTokenizer share.
//
//   HFLoad.cpp           the field readers, the top level of the file, the
//                        added tokens and the post-processor
//   HFBPE.cpp            the BPE model: `model` read, words to ids
//   HFNormalizers.cpp    `normalizer`
//   HFPreTokenizers.cpp  `pre_tokenizer`
//   HFDecoders.cpp       `decoder`
//   HFPatterns.cpp       literal and regular-expression patterns and the
//                        split behaviors the components above share
//   HFTokenizer.cpp      encode and decode with the parts
//
// Each component is read where it is implemented, so that the fields it
// accepts and what it does with them are in one place.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_TOKENIZER_HFTOKENIZERPARTS_H
#define MFRT_TOKENIZER_HFTOKENIZERPARTS_H

#include "HFTokenizer.h"
#include "Unicode.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

// Oniguruma's compiled expression (its regex_t), kept out of this header.
struct re_pattern_buffer;

namespace mfrt::hf {

using json = nlohmann::json;

//===----------------------------------------------------------------------===//
// Reading fields (HFLoad.cpp)
//===----------------------------------------------------------------------===//

/// A load error: one line, the file name added by the caller.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string &message);

/// The string field \p key of \p object, or \p fallback when absent or null.
/// \p where names \p object in errors.
std::string stringField(const json &object, const char *key,
                        const std::string &where,
                        const std::string &fallback = "");
bool boolField(const json &object, const char *key, const std::string &where,
               bool fallback);
/// A whole number from 0 to 2^31-1.
int64_t intField(const json &object, const char *key, const std::string &where,
                 int64_t fallback);
const json &objectField(const json &object, const char *key,
                        const std::string &where);
const json &arrayField(const json &object, const char *key,
                       const std::string &where);
/// The one-character string field \p key (Metaspace's replacement, Strip's
/// content).
int32_t charField(const json &object, const char *key, const std::string &where,
                  int32_t fallback);
/// The `type` of \p component, which must be an object.
std::string typeOf(const json &component, const std::string &where);
/// Metaspace's `prepend_scheme` (always, first or never; older files say
/// `add_prefix_space`), for the pre-tokenizer and the decoder alike.
std::string prependScheme(const json &spec, const std::string &where);

/// The parts of a Sequence component: `spec[key]`, each made by \p make
/// (null parts, the components that do nothing, left out).
template <class Part, class Make>
std::vector<Part> sequenceParts(const json &spec, const char *key,
                                const std::string &where, Make make) {
  std::vector<Part> parts;
  const json &list = arrayField(spec, key, where);
  for (size_t i = 0; i < list.size(); ++i)
    if (Part part =
            make(list[i], where + "." + key + "[" + std::to_string(i) + "]"))
      parts.push_back(std::move(part));
  return parts;
}

//===----------------------------------------------------------------------===//
// Patterns and splitting (HFPatterns.cpp)
//===----------------------------------------------------------------------===//

/// A byte range [first, second) of a text.
using Range = std::pair<size_t, size_t>;

/// An Oniguruma regular expression, the engine `tokenizers` itself uses.
class Regex {
public:
  /// Compiles \p pattern; fails naming \p where when it does not compile.
  explicit Regex(const std::string &pattern, const std::string &where);
  Regex(const Regex &) = delete;
  Regex &operator=(const Regex &) = delete;
  ~Regex();

  /// The non-overlapping matches in \p text, left to right: after an empty
  /// match the search goes on one character further.
  std::vector<Range> findAll(std::string_view text) const;

private:
  re_pattern_buffer *regex = nullptr;
};

/// A literal string or a regular expression.
class Pattern {
public:
  /// A `{"String": s}` or `{"Regex": r}` pattern.
  Pattern(const json &spec, const std::string &where);
  explicit Pattern(std::string s) : literal(std::move(s)) {}
  explicit Pattern(std::unique_ptr<Regex> r) : regex(std::move(r)) {}

  std::vector<Range> findAll(std::string_view text) const;
  /// \p text with every match replaced by \p content.
  std::string replaceAll(std::string_view text,
                         const std::string &content) const;

private:
  std::string literal;
  std::unique_ptr<Regex> regex;
};

/// A piece of the input on its way to the model: its text, and whether it
/// starts the input (Metaspace's `prepend_scheme: first`).
struct Piece {
  std::string text;
  bool first = false;
};

/// What a split does with the delimiters (`tokenizers`'
/// SplitDelimiterBehavior).
enum class Behavior {
  Removed,
  Isolated,
  MergedWithPrevious,
  MergedWithNext,
  Contiguous
};

/// The behavior named \p name (the `behavior` field of \p where).
Behavior behaviorOf(const std::string &name, const std::string &where);

/// Splits \p piece at \p matches (sorted, non-overlapping) as `tokenizers`'
/// NormalizedString::split does, appending the pieces to \p out; empty
/// pieces are dropped. With \p invert the matches are what is kept and the
/// text between them the delimiters.
void splitPiece(const Piece &piece, const std::vector<Range> &matches,
                Behavior behavior, bool invert, std::vector<Piece> &out);

/// \p t without up to \p left leading and \p right trailing characters
/// that satisfy \p drop (the Strip normalizer and decoder).
template <class Drop>
std::string trimChars(const std::string &t, size_t left, size_t right,
                      Drop drop) {
  std::vector<size_t> offsets = unicode::charOffsets(t);
  size_t b = 0, e = offsets.size();
  while (b < e && b < left && drop(unicode::codePoint(t, offsets[b])))
    ++b;
  while (e > b && offsets.size() - e < right &&
         drop(unicode::codePoint(t, offsets[e - 1])))
    --e;
  size_t from = b < offsets.size() ? offsets[b] : t.size();
  size_t to = e < offsets.size() ? offsets[e] : t.size();
  return t.substr(from, to - from);
}

//===----------------------------------------------------------------------===//
// Components: each made from its JSON, null for a null spec (none)
//===----------------------------------------------------------------------===//

/// Text to text (HFNormalizers.cpp).
using Normalizer = std::function<std::string(const std::string &)>;
Normalizer makeNormalizer(const json &spec, const std::string &where);

/// Pieces to words, in place (HFPreTokenizers.cpp).
using PreTokenizer = std::function<void(std::vector<Piece> &)>;
PreTokenizer makePreTokenizer(const json &spec, const std::string &where);

/// A list of token strings to a list of strings, joined at the end
/// (HFDecoders.cpp).
using Decoder = std::function<void(std::vector<std::string> &)>;
Decoder makeDecoder(const json &spec, const std::string &where);

/// GPT-2's byte-to-character table: printable bytes stand for themselves,
/// the others for U+0100 onwards (the ByteLevel pre-tokenizer and decoder).
const std::vector<std::string> &byteChars();

//===----------------------------------------------------------------------===//
// The BPE model (HFBPE.cpp)
//===----------------------------------------------------------------------===//

struct BpeModel {
  std::unordered_map<std::string, int64_t> vocab;
  /// (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges;
  int64_t unk = -1;
  bool byteFallback = false, fuseUnk = false, ignoreMerges = false;

  static uint64_t pairKey(int64_t a, int64_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }

  // Reading `model`, in this order (the added tokens are read between the
  // vocabulary and the unk token).
  /// The type and the options.
  void readOptions(const json &model);
  /// The vocabulary; returns one more than its largest id.
  int64_t readVocab(const json &model);
  void readUnk(const json &model);
  void readMerges(const json &model);

  /// Appends the ids of \p word (HF's BPE::merge_word and Word::merge_all).
  void encode(const std::string &word, std::vector<int64_t> &ids) const;
};

} // namespace mfrt::hf

//===----------------------------------------------------------------------===//
// The tokenizer's state
//===----------------------------------------------------------------------===//

namespace mfrt {

struct HFTokenizer::AddedToken {
  int64_t id;
  std::string content;
  bool singleWord, lstrip, rstrip, normalized, special;
};

struct HFTokenizer::Impl {
  hf::BpeModel model;
  std::vector<std::string> tokenOf; // id -> token ("" for a hole)
  std::vector<AddedToken> added;
  /// Ids of special added tokens (left out when decoding).
  std::vector<bool> special;
  hf::Normalizer normalizer;
  hf::PreTokenizer preTokenizer;
  hf::Decoder decoder;
  /// The post-processor's ids before and after the sequence.
  std::vector<int64_t> before, after;

  // Reading (HFLoad.cpp).
  /// `added_tokens`; raises \p size past their ids.
  void readAddedTokens(const hf::json &root, int64_t &size);
  static AddedToken readAddedToken(const hf::json &spec,
                                   const std::string &where);
  /// tokenOf and special, from the vocabulary and the added tokens.
  void buildTables(int64_t size);
  /// The id of a post-processor's `[token, id]` pair.
  int64_t postProcessorId(const hf::json &pair, const std::string &at) const;
  void readTemplate(const hf::json &spec, const std::string &where);

  // Encoding (HFTokenizer.cpp).
  /// Splits \p piece at the added tokens of one pass (leftmost-longest, as
  /// HF's AddedVocabulary does): pieces with id -1 are text to go on with.
  void splitAdded(const hf::Piece &piece, bool normalizedPass,
                  std::vector<std::pair<hf::Piece, int64_t>> &out) const;
  /// The added token of one pass found leftmost from \p from in \p s, the
  /// longest there; null when none. Sets \p at to where it starts.
  const AddedToken *findAdded(const std::string &s, size_t from,
                              bool normalizedPass, size_t &at) const;
};

} // namespace mfrt

#endif // MFRT_TOKENIZER_HFTOKENIZERPARTS_H
