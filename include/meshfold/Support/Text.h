//===- Text.h - Parsing the runtime's small text formats --------*- C++ -*-===//
//
// Numbers, sizes and lists in the plan text and the trace, routing and
// K/V cache options:
// strict (the whole text must be the value) and
// without locale.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_SUPPORT_TEXT_H
#define MESHFOLD_SUPPORT_TEXT_H

#include <cstdint>
#include <string>
#include <vector>

namespace meshfold {

/// Parses a decimal integer with an optional sign; false on anything else,
/// an empty text or an overflow.
bool parseInt(const std::string &text, int64_t &out);

/// Parses a decimal integer without a sign (digits only); false on anything
/// else, an empty text or an overflow.
bool parseUnsignedInt(const std::string &text, int64_t &out);

/// Parses a floating-point number; false on anything else or an empty text.
bool parseDouble(const std::string &text, double &out);

/// Parses a size in bytes: "141GB", "80GiB", "512MB", "64KiB" or a byte
/// count ("4096", "4096B"); -1 on anything else, zero or a negative size.
int64_t parseByteSize(const std::string &text);

/// The items of `text` between `sep`s, empty ones included ("a,,b," gives
/// "a", "", "b", ""; "" gives none).
std::vector<std::string> split(const std::string &text, char sep);

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_TEXT_H
