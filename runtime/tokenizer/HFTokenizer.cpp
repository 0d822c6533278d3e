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
//===----------------------------------------------------------------------===//

#include "HFTokenizer.h"
#include "Unicode.h"

#include "mfrt/io/Json.h"
#include "mfrt/io/Utf8.h"
#include "mfrt/tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>
#include <oniguruma.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <queue>
#include <stdexcept>
#include <unordered_map>

using namespace mfrt;
using json = nlohmann::json;

namespace {

/// A load error: one line, the file name added by the caller.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string &message) { throw LoadError(message); }

/// The string field \p key of \p object, or \p fallback when absent or null.
std::string stringField(const json &object, const char *key,
                        const std::string &where,
                        const std::string &fallback = "") {
  auto it = object.find(key);
  if (it == object.end() || it->is_null())
    return fallback;
  if (!it->is_string())
    fail(where + "." + key + " is not a string");
  return it->get<std::string>();
}

bool boolField(const json &object, const char *key, const std::string &where,
               bool fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null())
    return fallback;
  if (!it->is_boolean())
    fail(where + "." + key + " is not true or false");
  return it->get<bool>();
}

int64_t intField(const json &object, const char *key, const std::string &where,
                 int64_t fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null())
    return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
      it->get<int64_t>() > INT32_MAX)
    fail(where + "." + key + " is not a whole number from 0 to 2^31-1");
  return it->get<int64_t>();
}

const json &objectField(const json &object, const char *key,
                        const std::string &where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_object())
    fail(where + "." + key + " is missing or not an object");
  return *it;
}

const json &arrayField(const json &object, const char *key,
                       const std::string &where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_array())
    fail(where + "." + key + " is missing or not a list");
  return *it;
}

/// The one-character string field \p key (Metaspace's replacement, Strip's
/// content).
int32_t charField(const json &object, const char *key, const std::string &where,
                  int32_t fallback) {
  std::string s = stringField(object, key, where, "");
  if (s.empty())
    return fallback;
  size_t n = 0;
  int32_t cp = unicode::codePoint(s, 0, &n);
  if (n != s.size())
    fail(where + "." + key + " is not one character");
  return cp;
}

std::string typeOf(const json &component, const std::string &where) {
  if (!component.is_object())
    fail(where + " is not an object");
  auto it = component.find("type");
  if (it == component.end() || !it->is_string())
    fail(where + ".type is missing");
  return it->get<std::string>();
}

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

/// Metaspace's `prepend_scheme` (always, first or never; older files say
/// `add_prefix_space`), for the pre-tokenizer and the decoder alike.
std::string prependScheme(const json &spec, const std::string &where) {
  std::string scheme = "always";
  if (spec.contains("prepend_scheme"))
    scheme = stringField(spec, "prepend_scheme", where, "always");
  else if (!boolField(spec, "add_prefix_space", where, true))
    scheme = "never";
  if (scheme != "always" && scheme != "first" && scheme != "never")
    fail(where + ".prepend_scheme '" + scheme +
         "' is not always, first or never");
  return scheme;
}

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
// Patterns: a literal string or an Oniguruma regular expression
//===----------------------------------------------------------------------===//

class Regex {
public:
  explicit Regex(const std::string &pattern, const std::string &where) {
    static std::once_flag once;
    std::call_once(once, [] {
      OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
      onig_initialize(encodings, 1);
    });
    OnigErrorInfo info;
    const auto *begin = reinterpret_cast<const OnigUChar *>(pattern.data());
    int rc = onig_new(&regex, begin, begin + pattern.size(), ONIG_OPTION_NONE,
                      ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
    if (rc != ONIG_NORMAL) {
      OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(message, rc, &info);
      regex = nullptr;
      fail(where + ": the regular expression does not compile: " +
           reinterpret_cast<const char *>(message));
    }
  }
  Regex(const Regex &) = delete;
  Regex &operator=(const Regex &) = delete;
  ~Regex() {
    if (regex)
      onig_free(regex);
  }

  /// The non-overlapping matches in \p text, left to right: after an empty
  /// match the search goes on one character further.
  std::vector<std::pair<size_t, size_t>> findAll(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> matches;
    OnigRegion *region = onig_region_new();
    const auto *str = reinterpret_cast<const OnigUChar *>(text.data());
    const OnigUChar *end = str + text.size();
    size_t from = 0;
    while (from <= text.size()) {
      int at = onig_search(regex, str, end, str + from, end, region,
                           ONIG_OPTION_NONE);
      if (at < 0)
        break;
      size_t b = size_t(region->beg[0]), e = size_t(region->end[0]);
      matches.emplace_back(b, e);
      if (e > b)
        from = e;
      else if (b < text.size())
        from = b + unicode::charLength(text, b);
      else
        break;
    }
    onig_region_free(region, 1);
    return matches;
  }

private:
  regex_t *regex = nullptr;
};

class Pattern {
public:
  /// A `{"String": s}` or `{"Regex": r}` pattern.
  Pattern(const json &spec, const std::string &where) {
    if (!spec.is_object() || spec.size() != 1)
      fail(where + " is not {\"String\": ...} or {\"Regex\": ...}");
    auto it = spec.begin();
    if (!it.value().is_string())
      fail(where + "." + it.key() + " is not a string");
    if (it.key() == "String")
      literal = it.value().get<std::string>();
    else if (it.key() == "Regex")
      regex = std::make_unique<Regex>(it.value().get<std::string>(), where);
    else
      fail(where + ": pattern kind '" + it.key() +
           "' is not supported (String, Regex)");
  }
  explicit Pattern(std::string s) : literal(std::move(s)) {}
  explicit Pattern(std::unique_ptr<Regex> r) : regex(std::move(r)) {}

  std::vector<std::pair<size_t, size_t>> findAll(std::string_view text) const {
    if (regex)
      return regex->findAll(text);
    std::vector<std::pair<size_t, size_t>> matches;
    if (literal.empty())
      return matches;
    for (size_t at = text.find(literal); at != std::string_view::npos;
         at = text.find(literal, at + literal.size()))
      matches.emplace_back(at, at + literal.size());
    return matches;
  }

  std::string replaceAll(std::string_view text,
                         const std::string &content) const {
    std::string out;
    size_t last = 0;
    for (auto [b, e] : findAll(text)) {
      out.append(text.substr(last, b - last));
      out += content;
      last = e;
    }
    out.append(text.substr(last));
    return out;
  }

private:
  std::string literal;
  std::unique_ptr<Regex> regex;
};

//===----------------------------------------------------------------------===//
// Splitting with a delimiter behavior
//===----------------------------------------------------------------------===//

/// A piece of the input on its way to the model: its text, and whether it
/// starts the input (Metaspace's `prepend_scheme: first`).
struct Piece {
  std::string text;
  bool first = false;
};

enum class Behavior {
  Removed,
  Isolated,
  MergedWithPrevious,
  MergedWithNext,
  Contiguous
};

Behavior behaviorOf(const std::string &name, const std::string &where) {
  if (name == "Removed")
    return Behavior::Removed;
  if (name == "Isolated")
    return Behavior::Isolated;
  if (name == "MergedWithPrevious")
    return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext")
    return Behavior::MergedWithNext;
  if (name == "Contiguous")
    return Behavior::Contiguous;
  fail(where + ".behavior '" + name + "' is not a split behavior");
}

/// Splits \p piece at \p matches (sorted, non-overlapping) as `tokenizers`'
/// NormalizedString::split does; empty pieces are dropped.
void splitPiece(const Piece &piece,
                const std::vector<std::pair<size_t, size_t>> &matches,
                Behavior behavior, bool invert, std::vector<Piece> &out) {
  // (range, is delimiter), covering the piece.
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev)
      parts.push_back({{prev, b}, invert});
    parts.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev < piece.text.size())
    parts.push_back({{prev, piece.text.size()}, invert});

  std::vector<std::pair<size_t, size_t>> ranges;
  switch (behavior) {
  case Behavior::Isolated:
    for (auto &p : parts)
      ranges.push_back(p.first);
    break;
  case Behavior::Removed:
    for (auto &p : parts)
      if (!p.second)
        ranges.push_back(p.first);
    break;
  case Behavior::Contiguous: {
    bool lastDelimiter = false;
    for (auto &p : parts) {
      if (p.second && lastDelimiter && !ranges.empty())
        ranges.back().second = p.first.second;
      else
        ranges.push_back(p.first);
      lastDelimiter = p.second;
    }
    break;
  }
  case Behavior::MergedWithPrevious: {
    bool lastDelimiter = false;
    for (auto &p : parts) {
      if (p.second && !lastDelimiter && !ranges.empty())
        ranges.back().second = p.first.second;
      else
        ranges.push_back(p.first);
      lastDelimiter = p.second;
    }
    break;
  }
  case Behavior::MergedWithNext: {
    bool previousDelimiter = false;
    for (auto &p : parts) {
      if (!p.second && previousDelimiter && !ranges.empty())
        ranges.back().second = p.first.second;
      else
        ranges.push_back(p.first);
      previousDelimiter = p.second;
    }
    break;
  }
  }
  bool first = piece.first;
  for (auto [b, e] : ranges) {
    if (e <= b)
      continue;
    out.push_back({piece.text.substr(b, e - b), first && b == 0});
  }
}

//===----------------------------------------------------------------------===//
// Normalizers
//===----------------------------------------------------------------------===//

using Normalizer = std::function<std::string(const std::string &)>;

std::string unicodeForm(const std::string &text,
                        utf8proc_uint8_t *(*form)(const utf8proc_uint8_t *)) {
  // utf8proc stops at a NUL: normalize between them.
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nul = text.find('\0', start);
    size_t end = nul == std::string::npos ? text.size() : nul;
    std::string part = text.substr(start, end - start);
    utf8proc_uint8_t *normalized =
        form(reinterpret_cast<const utf8proc_uint8_t *>(part.c_str()));
    if (normalized) {
      out += reinterpret_cast<const char *>(normalized);
      std::free(normalized);
    } else {
      out += part;
    }
    if (nul == std::string::npos)
      break;
    out += '\0';
    start = nul + 1;
  }
  return out;
}

Normalizer makeNormalizer(const json &spec, const std::string &where) {
  if (spec.is_null())
    return nullptr;
  std::string type = typeOf(spec, where);
  if (type == "Sequence") {
    auto parts =
        sequenceParts<Normalizer>(spec, "normalizers", where, makeNormalizer);
    return [parts](const std::string &text) {
      std::string out = text;
      for (const Normalizer &n : parts)
        out = n(out);
      return out;
    };
  }
  if (type == "NFC")
    return [](const std::string &t) { return unicodeForm(t, utf8proc_NFC); };
  if (type == "NFD")
    return [](const std::string &t) { return unicodeForm(t, utf8proc_NFD); };
  if (type == "NFKC")
    return [](const std::string &t) { return unicodeForm(t, utf8proc_NFKC); };
  if (type == "NFKD")
    return [](const std::string &t) { return unicodeForm(t, utf8proc_NFKD); };
  if (type == "Lowercase")
    return [](const std::string &t) {
      std::string out;
      for (size_t i = 0, n = 0; i < t.size(); i += n)
        unicode::append(out, utf8proc_tolower(unicode::codePoint(t, i, &n)));
      return out;
    };
  if (type == "Prepend") {
    std::string prepend = stringField(spec, "prepend", where);
    return
        [prepend](const std::string &t) { return t.empty() ? t : prepend + t; };
  }
  if (type == "Replace") {
    auto pattern = std::make_shared<Pattern>(
        objectField(spec, "pattern", where), where + ".pattern");
    std::string content = stringField(spec, "content", where);
    return [pattern, content](const std::string &t) {
      return pattern->replaceAll(t, content);
    };
  }
  if (type == "Strip") {
    bool left = boolField(spec, "strip_left", where, false);
    bool right = boolField(spec, "strip_right", where, false);
    return [left, right](const std::string &t) {
      return trimChars(t, left ? SIZE_MAX : 0, right ? SIZE_MAX : 0,
                       unicode::isWhitespace);
    };
  }
  fail(where + ": normalizer '" + type +
       "' is not supported (NFC, NFD, NFKC, NFKD, Lowercase, Prepend, "
       "Replace, Strip, Sequence)");
}

//===----------------------------------------------------------------------===//
// Pre-tokenizers
//===----------------------------------------------------------------------===//

using PreTokenizer = std::function<void(std::vector<Piece> &)>;

/// GPT-2's byte-to-character table: printable bytes stand for themselves,
/// the others for U+0100 onwards.
const std::vector<std::string> &byteChars() {
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

const char *gpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                          "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

PreTokenizer makePreTokenizer(const json &spec, const std::string &where) {
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
  if (type == "ByteLevel") {
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
  if (type == "Split") {
    auto pattern = std::make_shared<Pattern>(
        objectField(spec, "pattern", where), where + ".pattern");
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
  if (type == "Metaspace") {
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
  if (type == "Digits") {
    bool individual = boolField(spec, "individual_digits", where, false);
    return [individual](std::vector<Piece> &pieces) {
      std::vector<Piece> out;
      for (const Piece &p : pieces) {
        std::vector<std::pair<size_t, size_t>> matches;
        for (size_t i = 0, n = 0; i < p.text.size(); i += n)
          if (unicode::isNumeric(unicode::codePoint(p.text, i, &n)))
            matches.emplace_back(i, i + n);
        splitPiece(p, matches,
                   individual ? Behavior::Isolated : Behavior::Contiguous,
                   false, out);
      }
      pieces = std::move(out);
    };
  }
  if (type == "Whitespace") {
    auto regex = std::make_shared<Regex>("\\w+|[^\\w\\s]+", where);
    return [regex](std::vector<Piece> &pieces) {
      std::vector<Piece> out;
      for (const Piece &p : pieces)
        splitPiece(p, regex->findAll(p.text), Behavior::Removed, true, out);
      pieces = std::move(out);
    };
  }
  if (type == "WhitespaceSplit") {
    return [](std::vector<Piece> &pieces) {
      std::vector<Piece> out;
      for (const Piece &p : pieces) {
        std::vector<std::pair<size_t, size_t>> matches;
        for (size_t i = 0, n = 0; i < p.text.size(); i += n)
          if (unicode::isWhitespace(unicode::codePoint(p.text, i, &n)))
            matches.emplace_back(i, i + n);
        splitPiece(p, matches, Behavior::Removed, false, out);
      }
      pieces = std::move(out);
    };
  }
  fail(where + ": pre-tokenizer '" + type +
       "' is not supported (ByteLevel, Split, Metaspace, Digits, Whitespace, "
       "WhitespaceSplit, Sequence)");
}

//===----------------------------------------------------------------------===//
// Decoders: a list of token strings to a list of strings, joined at the end
//===----------------------------------------------------------------------===//

using Decoder = std::function<void(std::vector<std::string> &)>;

Decoder makeDecoder(const json &spec, const std::string &where) {
  if (spec.is_null())
    return nullptr;
  std::string type = typeOf(spec, where);
  if (type == "Sequence") {
    auto parts = sequenceParts<Decoder>(spec, "decoders", where, makeDecoder);
    return [parts](std::vector<std::string> &tokens) {
      for (const Decoder &d : parts)
        d(tokens);
    };
  }
  if (type == "ByteLevel") {
    return [](std::vector<std::string> &tokens) {
      static const std::unordered_map<int32_t, char> bytes = [] {
        std::unordered_map<int32_t, char> m;
        const std::vector<std::string> &table = byteChars();
        for (int b = 0; b < 256; ++b)
          m[unicode::codePoint(table[size_t(b)], 0)] = char(b);
        return m;
      }();
      std::string all;
      for (const std::string &t : tokens) {
        std::string mapped;
        bool ok = true;
        for (size_t i = 0, n = 0; i < t.size() && ok; i += n) {
          auto it = bytes.find(unicode::codePoint(t, i, &n));
          if (it == bytes.end())
            ok = false;
          else
            mapped += it->second;
        }
        all += ok ? mapped : t;
      }
      tokens = {unicode::lossy(all)};
    };
  }
  if (type == "Metaspace") {
    int32_t replacement = charField(spec, "replacement", where, 0x2581);
    std::string scheme = prependScheme(spec, where);
    bool strip = scheme != "never";
    return [replacement, strip](std::vector<std::string> &tokens) {
      for (size_t k = 0; k < tokens.size(); ++k) {
        std::string out;
        const std::string &t = tokens[k];
        for (size_t i = 0, n = 0; i < t.size(); i += n) {
          int32_t cp = unicode::codePoint(t, i, &n);
          if (cp != replacement)
            out.append(t, i, n);
          else if (!(k == 0 && strip))
            out += ' ';
        }
        tokens[k] = std::move(out);
      }
    };
  }
  if (type == "Replace") {
    auto pattern = std::make_shared<Pattern>(
        objectField(spec, "pattern", where), where + ".pattern");
    std::string content = stringField(spec, "content", where);
    return [pattern, content](std::vector<std::string> &tokens) {
      for (std::string &t : tokens)
        t = pattern->replaceAll(t, content);
    };
  }
  if (type == "ByteFallback") {
    return [](std::vector<std::string> &tokens) {
      std::vector<std::string> out;
      std::string pending;
      size_t pendingCount = 0;
      auto flush = [&] {
        if (pendingCount == 0)
          return;
        size_t bad;
        if (isUtf8(pending, bad))
          out.push_back(pending);
        else
          for (size_t i = 0; i < pendingCount; ++i)
            out.push_back("\xEF\xBF\xBD");
        pending.clear();
        pendingCount = 0;
      };
      for (std::string &t : tokens) {
        bool isByte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 &&
                      t[5] == '>' && std::isxdigit((unsigned char)t[3]) &&
                      std::isxdigit((unsigned char)t[4]);
        if (isByte) {
          pending += char(std::strtol(t.substr(3, 2).c_str(), nullptr, 16));
          ++pendingCount;
          continue;
        }
        flush();
        out.push_back(std::move(t));
      }
      flush();
      tokens = std::move(out);
    };
  }
  if (type == "Fuse") {
    return [](std::vector<std::string> &tokens) {
      std::string all;
      for (const std::string &t : tokens)
        all += t;
      tokens = {all};
    };
  }
  if (type == "Strip") {
    int32_t content = charField(spec, "content", where, ' ');
    int64_t start = intField(spec, "start", where, 0);
    int64_t stop = intField(spec, "stop", where, 0);
    return [content, start, stop](std::vector<std::string> &tokens) {
      for (std::string &t : tokens)
        t = trimChars(t, size_t(start), size_t(stop),
                      [content](int32_t cp) { return cp == content; });
    };
  }
  fail(where + ": decoder '" + type +
       "' is not supported (ByteLevel, Metaspace, Replace, ByteFallback, "
       "Fuse, Strip, Sequence)");
}

} // namespace

//===----------------------------------------------------------------------===//
// The tokenizer
//===----------------------------------------------------------------------===//

namespace mfrt {

struct HFTokenizer::AddedToken {
  int64_t id;
  std::string content;
  bool singleWord, lstrip, rstrip, normalized, special;
};

struct HFTokenizer::Impl {
  // The BPE model.
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::string> tokenOf; // id -> token ("" for a hole)
  /// (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges;
  int64_t unk = -1;
  bool byteFallback = false, fuseUnk = false, ignoreMerges = false;
  std::vector<AddedToken> added;
  /// Ids of special added tokens (left out when decoding).
  std::vector<bool> special;
  Normalizer normalizer;
  PreTokenizer preTokenizer;
  Decoder decoder;
  /// The post-processor's ids before and after the sequence.
  std::vector<int64_t> before, after;

  static uint64_t pairKey(int64_t a, int64_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }

  void bpe(const std::string &word, std::vector<int64_t> &ids) const;
  void splitAdded(const Piece &piece, bool normalizedPass,
                  std::vector<std::pair<Piece, int64_t>> &out) const;
};

} // namespace mfrt

HFTokenizer::HFTokenizer() : impl(std::make_unique<Impl>()) {}
HFTokenizer::~HFTokenizer() = default;

/// The BPE model on one word (HF's BPE::merge_word and Word::merge_all).
void HFTokenizer::Impl::bpe(const std::string &word,
                            std::vector<int64_t> &ids) const {
  if (ignoreMerges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int64_t id;
    int64_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  auto add = [&](int64_t id) {
    int64_t index = int64_t(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  bool pendingUnk = false;
  for (size_t i = 0, n = 0; i < word.size(); i += n) {
    n = unicode::charLength(word, i);
    std::string ch = word.substr(i, n);
    auto it = vocab.find(ch);
    if (it != vocab.end()) {
      if (pendingUnk)
        add(unk);
      pendingUnk = false;
      add(it->second);
      continue;
    }
    if (byteFallback) {
      std::vector<int64_t> byteIds;
      for (char c : ch) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", (unsigned char)c);
        auto b = vocab.find(name);
        if (b == vocab.end())
          break;
        byteIds.push_back(b->second);
      }
      if (byteIds.size() == ch.size()) {
        // Like HF, a pending unk is not flushed before byte tokens.
        for (int64_t id : byteIds)
          add(id);
        continue;
      }
    }
    if (unk >= 0) {
      if (pendingUnk && !fuseUnk)
        add(unk);
      pendingUnk = true;
    }
  }
  if (pendingUnk)
    add(unk);
  if (symbols.empty())
    return;
  symbols.back().next = -1;

  struct Merge {
    int64_t pos, rank, id;
    bool operator<(const Merge &o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Merge> queue;
  auto consider = [&](int64_t pos) {
    if (pos < 0 || symbols[size_t(pos)].next < 0)
      return;
    auto it =
        merges.find(pairKey(symbols[size_t(pos)].id,
                            symbols[size_t(symbols[size_t(pos)].next)].id));
    if (it != merges.end())
      queue.push({pos, it->second.first, it->second.second});
  };
  for (int64_t i = 0; i + 1 < int64_t(symbols.size()); ++i)
    consider(i);
  while (!queue.empty()) {
    Merge top = queue.top();
    queue.pop();
    Symbol &s = symbols[size_t(top.pos)];
    if (!s.alive || s.next < 0)
      continue;
    Symbol &right = symbols[size_t(s.next)];
    auto it = merges.find(pairKey(s.id, right.id));
    if (it == merges.end() || it->second.second != top.id)
      continue;
    s.id = top.id;
    right.alive = false;
    s.next = right.next;
    if (s.next >= 0)
      symbols[size_t(s.next)].prev = top.pos;
    consider(s.prev);
    consider(top.pos);
  }
  for (const Symbol &s : symbols)
    if (s.alive)
      ids.push_back(s.id);
}

namespace {
bool isWordChar(int32_t cp) {
  return cp == '_' || unicode::isLetter(cp) || unicode::isNumeric(cp);
}
} // namespace

/// Splits \p piece at the added tokens of one pass (leftmost-longest, as
/// HF's AddedVocabulary does): pieces with id -1 are text to go on with.
void HFTokenizer::Impl::splitAdded(
    const Piece &piece, bool normalizedPass,
    std::vector<std::pair<Piece, int64_t>> &out) const {
  const std::string &s = piece.text;
  size_t offset = 0, from = 0;
  while (from < s.size()) {
    // The leftmost start of a match, then the longest there.
    size_t bestAt = std::string::npos, bestLen = 0;
    const AddedToken *best = nullptr;
    for (const AddedToken &t : added) {
      if (t.normalized != normalizedPass || t.content.empty())
        continue;
      size_t at = s.find(t.content, from);
      if (at == std::string::npos)
        continue;
      if (at < bestAt || (at == bestAt && t.content.size() > bestLen)) {
        bestAt = at;
        bestLen = t.content.size();
        best = &t;
      }
    }
    if (!best)
      break;
    size_t start = bestAt, stop = bestAt + bestLen;
    from = stop;
    if (best->singleWord) {
      bool before = start > 0 && [&] {
        size_t k = start - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
          --k;
        return isWordChar(unicode::codePoint(s, k));
      }();
      bool after = stop < s.size() && isWordChar(unicode::codePoint(s, stop));
      if (before || after)
        continue;
    }
    if (best->lstrip) {
      size_t k = start;
      while (k > offset) {
        size_t b = k - 1;
        while (b > offset && ((unsigned char)s[b] & 0xC0) == 0x80)
          --b;
        if (!unicode::isWhitespace(unicode::codePoint(s, b)))
          break;
        k = b;
      }
      start = k;
    }
    if (best->rstrip) {
      size_t n = 0;
      while (stop < s.size() &&
             unicode::isWhitespace(unicode::codePoint(s, stop, &n)))
        stop += n;
      from = stop;
    }
    if (start > offset)
      out.push_back(
          {{s.substr(offset, start - offset), piece.first && offset == 0}, -1});
    out.push_back({{s.substr(start, stop - start), false}, best->id});
    offset = stop;
  }
  if (offset < s.size())
    out.push_back({{s.substr(offset), piece.first && offset == 0}, -1});
}

bool HFTokenizer::encodeText(std::string_view text, std::vector<int64_t> &ids,
                             std::string *) const {
  const Impl &m = *impl;
  ids = m.before;
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
        m.bpe(w.text, ids);
    }
  }
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

std::unique_ptr<HFTokenizer> HFTokenizer::parse(const std::string &text,
                                                const std::string &name,
                                                std::string *error) {
  auto tokenizer = std::unique_ptr<HFTokenizer>(new HFTokenizer());
  tokenizer->file = name;
  try {
    tokenizer->build(text);
  } catch (const LoadError &e) {
    if (error)
      *error = name + ": " + e.what();
    return nullptr;
  } catch (const json::exception &e) {
    // A value of an unexpected type that a check above did not catch.
    if (error)
      *error = name + ": not a tokenizer.json: " + e.what();
    return nullptr;
  }
  return tokenizer;
}

void HFTokenizer::build(const std::string &text) {
  json root;
  std::string reason;
  if (!parseJson(text, root, reason))
    fail("not a tokenizer.json: " + reason);
  if (!root.is_object())
    fail("not a tokenizer.json: the top level is not an object");
  Impl &m = *impl;
  const json &model = objectField(root, "model", "tokenizer");
  std::string type = stringField(model, "type", "model", "BPE");
  if (type != "BPE")
    fail("model.type '" + type +
         "' is not supported (BPE; WordPiece, Unigram and WordLevel are not)");
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0))
    fail("model.dropout: BPE dropout is not supported");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!stringField(model, key, "model").empty())
      fail(std::string("model.") + key + " is not supported");
  m.byteFallback = boolField(model, "byte_fallback", "model", false);
  m.fuseUnk = boolField(model, "fuse_unk", "model", false);
  m.ignoreMerges = boolField(model, "ignore_merges", "model", false);

  const json &vocab = objectField(model, "vocab", "model");
  int64_t size = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= (int64_t(1) << 24))
      fail("model.vocab['" + it.key() + "'] is not an id from 0 to 2^24-1");
    int64_t id = it.value().get<int64_t>();
    m.vocab[it.key()] = id;
    size = std::max(size, id + 1);
  }
  // Added tokens.
  auto addedList = root.find("added_tokens");
  if (addedList != root.end() && !addedList->is_null()) {
    if (!addedList->is_array())
      fail("added_tokens is not a list");
    for (size_t i = 0; i < addedList->size(); ++i) {
      const json &a = (*addedList)[i];
      std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object())
        fail(where + " is not an object");
      AddedToken t;
      t.id = intField(a, "id", where, -1);
      if (t.id < 0 || t.id >= (int64_t(1) << 24))
        fail(where + ".id is missing or not an id from 0 to 2^24-1");
      t.content = stringField(a, "content", where);
      if (t.content.empty())
        fail(where + ".content is missing or empty");
      t.singleWord = boolField(a, "single_word", where, false);
      t.lstrip = boolField(a, "lstrip", where, false);
      t.rstrip = boolField(a, "rstrip", where, false);
      t.special = boolField(a, "special", where, false);
      t.normalized = boolField(a, "normalized", where, !t.special);
      size = std::max(size, t.id + 1);
      m.added.push_back(std::move(t));
    }
  }
  m.tokenOf.assign(size_t(size), "");
  m.special.assign(size_t(size), false);
  for (auto &[token, id] : m.vocab)
    m.tokenOf[size_t(id)] = token;
  for (const AddedToken &t : m.added) {
    m.tokenOf[size_t(t.id)] = t.content;
    m.special[size_t(t.id)] = t.special;
  }
  std::string unk = stringField(model, "unk_token", "model");
  if (!unk.empty()) {
    auto it = m.vocab.find(unk);
    if (it == m.vocab.end())
      fail("model.unk_token '" + unk + "' is not in the vocabulary");
    m.unk = it->second;
  }

  const json &merges = arrayField(model, "merges", "model");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json &entry = merges[rank];
    std::string where = "model.merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (entry.is_string()) {
      std::string s = entry.get<std::string>();
      size_t space = s.find(' ');
      if (space == std::string::npos ||
          s.find(' ', space + 1) != std::string::npos)
        fail(where + " is not two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      fail(where + " is not \"a b\" or [\"a\", \"b\"]");
    }
    auto a = m.vocab.find(left), b = m.vocab.find(right),
         ab = m.vocab.find(left + right);
    if (a == m.vocab.end() || b == m.vocab.end() || ab == m.vocab.end())
      fail(where + ": '" +
           (a == m.vocab.end()   ? left
            : b == m.vocab.end() ? right
                                 : left + right) +
           "' is not in the vocabulary");
    m.merges.emplace(Impl::pairKey(a->second, b->second),
                     std::make_pair(int64_t(rank), ab->second));
  }

  auto field = [&](const char *key) -> const json & {
    static const json null;
    auto it = root.find(key);
    return it == root.end() ? null : *it;
  };
  m.normalizer = makeNormalizer(field("normalizer"), "normalizer");
  m.preTokenizer = makePreTokenizer(field("pre_tokenizer"), "pre_tokenizer");
  m.decoder = makeDecoder(field("decoder"), "decoder");
  buildPostProcessor(field("post_processor"), "post_processor");
  if (!field("truncation").is_null())
    fail("truncation is set: truncating prompts is not supported (remove it "
         "or set it to null)");
  if (!field("padding").is_null())
    fail("padding is set: padding is not supported (remove it or set it to "
         "null)");
}

void HFTokenizer::buildPostProcessor(const nlohmann::json &spec,
                                     const std::string &where) {
  if (spec.is_null())
    return;
  Impl &m = *impl;
  std::string type = typeOf(spec, where);
  auto idOf = [&](const json &pair, const std::string &at) {
    if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer())
      fail(at + " is not [token, id]");
    int64_t id = pair[1].get<int64_t>();
    if (id < 0 || id >= int64_t(m.tokenOf.size()))
      fail(at + ": id " + std::to_string(id) + " is not in the vocabulary");
    return id;
  };
  if (type == "Sequence") {
    const json &list = arrayField(spec, "processors", where);
    for (size_t i = 0; i < list.size(); ++i)
      buildPostProcessor(list[i],
                         where + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type == "ByteLevel")
    return; // Offsets only.
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    m.before.push_back(idOf(spec.value("cls", json()), where + ".cls"));
    m.after.push_back(idOf(spec.value("sep", json()), where + ".sep"));
    return;
  }
  if (type == "TemplateProcessing") {
    const json &single = arrayField(spec, "single", where);
    const json &specials = objectField(spec, "special_tokens", where);
    bool seenSequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json &item = single[i];
      std::string at = where + ".single[" + std::to_string(i) + "]";
      if (item.is_object() && item.contains("Sequence")) {
        if (seenSequence)
          fail(at + ": the sequence appears twice");
        seenSequence = true;
        continue;
      }
      if (!item.is_object() || !item.contains("SpecialToken") ||
          !item["SpecialToken"].is_object())
        fail(at + " is not a SpecialToken or a Sequence");
      std::string name = stringField(item["SpecialToken"], "id", at);
      auto it = specials.find(name);
      if (it == specials.end() || !it->is_object() || !it->contains("ids") ||
          !(*it)["ids"].is_array())
        fail(at + ": special token '" + name +
             "' is not in special_tokens with its ids");
      for (const json &id : (*it)["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() >= int64_t(m.tokenOf.size()))
          fail(where + ".special_tokens['" + name +
               "']: an id is not in the vocabulary");
        (seenSequence ? m.after : m.before).push_back(id.get<int64_t>());
      }
    }
    if (!seenSequence)
      fail(where + ".single has no Sequence");
    return;
  }
  fail(where + ": post-processor '" + type +
       "' is not supported (TemplateProcessing, ByteLevel, RobertaProcessing, "
       "BertProcessing, Sequence)");
}
