//===- Utf8.cpp - Well-formed UTF-8 ---------------------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Utf8.h"

using namespace mfrt;

size_t mfrt::utf8SequenceLength(std::string_view s, size_t i) {
  auto at = [&](size_t k) -> unsigned {
    return i + k < s.size() ? (unsigned char)s[i + k] : 0x100;
  };
  unsigned b0 = at(0);
  if (b0 < 0x80)
    return 1;
  auto cont = [&](size_t k, unsigned lo, unsigned hi) {
    unsigned b = at(k);
    return b >= lo && b <= hi;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF)
    return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4
                                                                         : 0;
  }
  return 0;
}

bool mfrt::isUtf8(std::string_view text, size_t &badOffset) {
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8SequenceLength(text, i);
    if (n == 0) {
      badOffset = i;
      return false;
    }
    i += n;
  }
  return true;
}
