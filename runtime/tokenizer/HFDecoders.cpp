//===- HFDecoders.cpp - The decoders of tokenizer.json --------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence: each
// turns the list of token strings into another list, joined at the end.
// Anything else is refused by name.
//
//===----------------------------------------------------------------------===//

#include "HFTokenizerParts.h"

#include "mfrt/io/Utf8.h"

#include <cctype>
#include <cstdlib>
#include <unordered_map>

using namespace mfrt;
using namespace mfrt::hf;

namespace {

/// The inverse of byteChars: the byte each of its characters stands for.
const std::unordered_map<int32_t, char> &charBytes() {
  static const std::unordered_map<int32_t, char> bytes = [] {
    std::unordered_map<int32_t, char> m;
    const std::vector<std::string> &table = byteChars();
    for (int b = 0; b < 256; ++b)
      m[unicode::codePoint(table[size_t(b)], 0)] = char(b);
    return m;
  }();
  return bytes;
}

/// The tokens' characters as the bytes they stand for (a token with a
/// character outside the table as it is), decoded lossily.
void byteLevel(std::vector<std::string> &tokens) {
  const std::unordered_map<int32_t, char> &bytes = charBytes();
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
}

Decoder makeMetaspace(const json &spec, const std::string &where) {
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

Decoder makeReplace(const json &spec, const std::string &where) {
  auto pattern = std::make_shared<Pattern>(objectField(spec, "pattern", where),
                                           where + ".pattern");
  std::string content = stringField(spec, "content", where);
  return [pattern, content](std::vector<std::string> &tokens) {
    for (std::string &t : tokens)
      t = pattern->replaceAll(t, content);
  };
}

/// Whether \p t is a byte token, `<0xHH>`.
bool isByteToken(const std::string &t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
         std::isxdigit((unsigned char)t[3]) &&
         std::isxdigit((unsigned char)t[4]);
}

/// Each run of byte tokens becomes its bytes when they are UTF-8, else one
/// U+FFFD per byte.
void byteFallback(std::vector<std::string> &tokens) {
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
    if (isByteToken(t)) {
      pending += char(std::strtol(t.substr(3, 2).c_str(), nullptr, 16));
      ++pendingCount;
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens = std::move(out);
}

void fuse(std::vector<std::string> &tokens) {
  std::string all;
  for (const std::string &t : tokens)
    all += t;
  tokens = {all};
}

Decoder makeStrip(const json &spec, const std::string &where) {
  int32_t content = charField(spec, "content", where, ' ');
  int64_t start = intField(spec, "start", where, 0);
  int64_t stop = intField(spec, "stop", where, 0);
  return [content, start, stop](std::vector<std::string> &tokens) {
    for (std::string &t : tokens)
      t = trimChars(t, size_t(start), size_t(stop),
                    [content](int32_t cp) { return cp == content; });
  };
}

} // namespace

Decoder hf::makeDecoder(const json &spec, const std::string &where) {
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
  if (type == "ByteLevel")
    return byteLevel;
  if (type == "Metaspace")
    return makeMetaspace(spec, where);
  if (type == "Replace")
    return makeReplace(spec, where);
  if (type == "ByteFallback")
    return byteFallback;
  if (type == "Fuse")
    return fuse;
  if (type == "Strip")
    return makeStrip(spec, where);
  fail(where + ": decoder '" + type +
       "' is not supported (ByteLevel, Metaspace, Replace, ByteFallback, "
       "Fuse, Strip, Sequence)");
}
