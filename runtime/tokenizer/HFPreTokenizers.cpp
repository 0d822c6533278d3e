//===- HFPreTokenizers.cpp - The pre-tokenizers of tokenizer.json ---------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// ByteLevel (GPT-2's expression and byte-to-character table), Split,
// Metaspace, Digits, Whitespace, WhitespaceSplit and Sequence, each a split
// of the pieces with one of `tokenizers`' delimiter behaviors. Anything else
// is refused by name.
//
//===----------------------------------------------------------------------===//

#include "HFTokenizerParts.h"

using namespace mfrt;
using namespace mfrt::hf;

const std::vector<std::string> &hf::byteChars() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                       (b >= 0xAE && b <= 0xFF);
      unicode::append(t[size_t(b)], printable ? b : 256 + next++);
    }
    return t;
  }();
  return table;
}

namespace {

const char *gpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                          "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/// The matches of the characters of \p text that satisfy \p keep, one each.
template <class Keep>
std::vector<Range> charMatches(const std::string &text, Keep keep) {
  std::vector<Range> matches;
  for (size_t i = 0, n = 0; i < text.size(); i += n)
    if (keep(unicode::codePoint(text, i, &n)))
      matches.emplace_back(i, i + n);
  return matches;
}

PreTokenizer makeByteLevel(const json &spec, const std::string &where) {
  bool prefix = boolField(spec, "add_prefix_space", where, true);
  bool useRegex = boolField(spec, "use_regex", where, true);
  std::shared_ptr<Regex> regex;
  if (useRegex)
    regex = std::make_shared<Regex>(gpt2Pattern, where);
  return [prefix, regex](std::vector<Piece> &pieces) {
    std::vector<Piece> out;
    for (Piece &p : pieces) {
      if (prefix && (p.text.empty() || p.text[0] != ' '))
        p.text = " " + p.text;
      if (regex)
        splitPiece(p, regex->findAll(p.text), Behavior::Isolated, false, out);
      else if (!p.text.empty())
        out.push_back(p);
    }
    const std::vector<std::string> &table = byteChars();
    for (Piece &p : out) {
      std::string mapped;
      for (char c : p.text)
        mapped += table[(unsigned char)c];
      p.text = std::move(mapped);
    }
    pieces = std::move(out);
  };
}

PreTokenizer makeSplit(const json &spec, const std::string &where) {
  auto pattern = std::make_shared<Pattern>(objectField(spec, "pattern", where),
                                           where + ".pattern");
  Behavior behavior =
      behaviorOf(stringField(spec, "behavior", where, "Isolated"), where);
  bool invert = boolField(spec, "invert", where, false);
  return [pattern, behavior, invert](std::vector<Piece> &pieces) {
    std::vector<Piece> out;
    for (const Piece &p : pieces)
      splitPiece(p, pattern->findAll(p.text), behavior, invert, out);
    pieces = std::move(out);
  };
}

PreTokenizer makeMetaspace(const json &spec, const std::string &where) {
  int32_t replacement = charField(spec, "replacement", where, 0x2581);
  std::string scheme = prependScheme(spec, where);
  bool split = boolField(spec, "split", where, true);
  std::string rep;
  unicode::append(rep, replacement);
  return [rep, scheme, split](std::vector<Piece> &pieces) {
    std::vector<Piece> out;
    for (Piece &p : pieces) {
      p.text = Pattern(std::string(" ")).replaceAll(p.text, rep);
      bool prepend = scheme == "always" || (scheme == "first" && p.first);
      if (prepend && p.text.compare(0, rep.size(), rep) != 0)
        p.text = rep + p.text;
      if (split)
        splitPiece(p, Pattern(rep).findAll(p.text), Behavior::MergedWithNext,
                   false, out);
      else if (!p.text.empty())
        out.push_back(p);
    }
    pieces = std::move(out);
  };
}

PreTokenizer makeDigits(const json &spec, const std::string &where) {
  bool individual = boolField(spec, "individual_digits", where, false);
  return [individual](std::vector<Piece> &pieces) {
    std::vector<Piece> out;
    for (const Piece &p : pieces)
      splitPiece(p, charMatches(p.text, unicode::isNumeric),
                 individual ? Behavior::Isolated : Behavior::Contiguous, false,
                 out);
    pieces = std::move(out);
  };
}

PreTokenizer makeWhitespace(const std::string &where) {
  auto regex = std::make_shared<Regex>("\\w+|[^\\w\\s]+", where);
  return [regex](std::vector<Piece> &pieces) {
    std::vector<Piece> out;
    for (const Piece &p : pieces)
      splitPiece(p, regex->findAll(p.text), Behavior::Removed, true, out);
    pieces = std::move(out);
  };
}

void whitespaceSplit(std::vector<Piece> &pieces) {
  std::vector<Piece> out;
  for (const Piece &p : pieces)
    splitPiece(p, charMatches(p.text, unicode::isWhitespace), Behavior::Removed,
               false, out);
  pieces = std::move(out);
}

} // namespace

PreTokenizer hf::makePreTokenizer(const json &spec, const std::string &where) {
  if (spec.is_null())
    return nullptr;
  std::string type = typeOf(spec, where);
  if (type == "Sequence") {
    auto parts = sequenceParts<PreTokenizer>(spec, "pretokenizers", where,
                                             makePreTokenizer);
    return [parts](std::vector<Piece> &pieces) {
      for (const PreTokenizer &p : parts)
        p(pieces);
    };
  }
  if (type == "ByteLevel")
    return makeByteLevel(spec, where);
  if (type == "Split")
    return makeSplit(spec, where);
  if (type == "Metaspace")
    return makeMetaspace(spec, where);
  if (type == "Digits")
    return makeDigits(spec, where);
  if (type == "Whitespace")
    return makeWhitespace(where);
  if (type == "WhitespaceSplit")
    return whitespaceSplit;
  fail(where + ": pre-tokenizer '" + type +
       "' is not supported (ByteLevel, Split, Metaspace, Digits, Whitespace, "
       "WhitespaceSplit, Sequence)");
}
