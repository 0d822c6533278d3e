//===- Unicode.cpp - UTF-8 and character classes for tokenizers -----------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "Unicode.h"

#include "mfrt/io/Utf8.h"

#include <utf8proc.h>

using namespace mfrt;

namespace {
/// The length of the maximal subpart of an ill-formed sequence at \p i: the
/// bytes that start a well-formed sequence but do not complete it (at least
/// one).
size_t invalidLength(std::string_view s, size_t i) {
  unsigned b0 = (unsigned char)s[i];
  size_t need = b0 >= 0xC2 && b0 <= 0xDF   ? 2
                : b0 >= 0xE0 && b0 <= 0xEF ? 3
                : b0 >= 0xF0 && b0 <= 0xF4 ? 4
                                           : 1;
  size_t n = 1;
  for (; n < need && i + n < s.size(); ++n) {
    unsigned b = (unsigned char)s[i + n];
    unsigned lo = 0x80, hi = 0xBF;
    if (n == 1) {
      if (b0 == 0xE0)
        lo = 0xA0;
      else if (b0 == 0xED)
        hi = 0x9F;
      else if (b0 == 0xF0)
        lo = 0x90;
      else if (b0 == 0xF4)
        hi = 0x8F;
    }
    if (b < lo || b > hi)
      break;
  }
  return n;
}
} // namespace

size_t unicode::charLength(std::string_view text, size_t i) {
  size_t n = utf8SequenceLength(text, i);
  return n ? n : 1;
}

int32_t unicode::codePoint(std::string_view text, size_t i, size_t *length) {
  utf8proc_int32_t cp = 0;
  utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t *>(&text[i]),
                       utf8proc_ssize_t(text.size() - i), &cp);
  if (n <= 0) {
    n = 1;
    cp = 0xFFFD;
  }
  if (length)
    *length = size_t(n);
  return cp;
}

void unicode::append(std::string &out, int32_t cp) {
  utf8proc_uint8_t buffer[4];
  utf8proc_ssize_t n = utf8proc_encode_char(cp, buffer);
  out.append(reinterpret_cast<const char *>(buffer), size_t(n));
}

std::vector<size_t> unicode::charOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < text.size(); i += charLength(text, i))
    offsets.push_back(i);
  return offsets;
}

bool unicode::isWhitespace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool unicode::isLetter(int32_t cp) {
  switch (utf8proc_category(cp)) {
  case UTF8PROC_CATEGORY_LU:
  case UTF8PROC_CATEGORY_LL:
  case UTF8PROC_CATEGORY_LT:
  case UTF8PROC_CATEGORY_LM:
  case UTF8PROC_CATEGORY_LO:
    return true;
  default:
    return false;
  }
}

bool unicode::isNumeric(int32_t cp) {
  switch (utf8proc_category(cp)) {
  case UTF8PROC_CATEGORY_ND:
  case UTF8PROC_CATEGORY_NL:
  case UTF8PROC_CATEGORY_NO:
    return true;
  default:
    return false;
  }
}

std::string unicode::lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t n = utf8SequenceLength(bytes, i);
    if (n) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += invalidLength(bytes, i);
    }
  }
  return out;
}
