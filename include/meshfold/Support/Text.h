//===- Text.h - Parsing the runtime's small text formats --------*- C++ -*-===//
//
// Numbers and lists in the plan text and the trace and routing options:
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

/// The items of `text` between `sep`s, empty ones included ("a,,b," gives
/// "a", "", "b", ""; "" gives none).
std::vector<std::string> split(const std::string &text, char sep);

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_TEXT_H
