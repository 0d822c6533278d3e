//===- Utf8.h - Well-formed UTF-8 -------------------------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Well-formed UTF-8 as Unicode defines it (table 3-7: no overlong forms, no
/// surrogates, nothing above U+10FFFF): what text prompts and tokenizers
/// accept. No LLVM dependency: linked into emitted executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_IO_UTF8_H
#define MFRT_IO_UTF8_H

#include <cstddef>
#include <string_view>

namespace mfrt {

/// The length of the well-formed UTF-8 sequence at \p s[i], or 0 when none
/// starts there.
size_t utf8SequenceLength(std::string_view s, size_t i);

/// Whether \p text is well-formed UTF-8; if not, \p badOffset is the offset
/// of the first byte that starts no well-formed sequence.
bool isUtf8(std::string_view text, size_t &badOffset);

} // namespace mfrt

#endif // MFRT_IO_UTF8_H
