//===- Unicode.h - UTF-8 and character classes for tokenizers ---*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Private to mfrt_tokenizer: code points of UTF-8 text, the character classes
// the tokenizer formats refer to (Unicode's White_Space, letters, numbers),
// and the lossy decoding of byte strings (each maximal invalid subpart
// becomes U+FFFD, as Hugging Face's decoders do).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_TOKENIZER_UNICODE_H
#define MFRT_TOKENIZER_UNICODE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mfrt::unicode {

/// The length of the (valid) UTF-8 sequence that starts at \p text[i].
size_t charLength(std::string_view text, size_t i);
/// The code point at \p text[i] (valid UTF-8).
int32_t codePoint(std::string_view text, size_t i, size_t *length = nullptr);
/// Appends \p cp as UTF-8.
void append(std::string &out, int32_t cp);
/// The byte offsets of the code points of \p text.
std::vector<size_t> charOffsets(std::string_view text);

/// Unicode White_Space (Rust's char::is_whitespace).
bool isWhitespace(int32_t cp);
/// General category L* / N* (Rust's char::is_alphabetic approximated by the
/// letter categories, char::is_numeric by the number categories).
bool isLetter(int32_t cp);
bool isNumeric(int32_t cp);

/// \p bytes as UTF-8, each maximal invalid subpart replaced by U+FFFD.
std::string lossy(std::string_view bytes);

} // namespace mfrt::unicode

#endif // MFRT_TOKENIZER_UNICODE_H
