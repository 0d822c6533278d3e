//===- HFNormalizers.cpp - The normalizers of tokenizer.json --------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// NFC, NFD, NFKC, NFKD (through utf8proc), Lowercase, Prepend, Replace,
// Strip and Sequence. Anything else is refused by name.
//
//===----------------------------------------------------------------------===//

#include "HFTokenizerParts.h"

#include <utf8proc.h>

#include <cstdlib>

using namespace mfrt;
using namespace mfrt::hf;

namespace {

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

std::string lowercase(const std::string &t) {
  std::string out;
  for (size_t i = 0, n = 0; i < t.size(); i += n)
    unicode::append(out, utf8proc_tolower(unicode::codePoint(t, i, &n)));
  return out;
}

} // namespace

Normalizer hf::makeNormalizer(const json &spec, const std::string &where) {
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
    return lowercase;
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
