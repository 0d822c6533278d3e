//===- Json.h - JSON of bounded depth ---------------------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The runtime's JSON inputs (a checkpoint index, a tokenizer and its
/// config, JSONL prompts) parsed with nlohmann's iterative parser, nesting
/// bounded so that no input builds a tree deep enough to overflow the stack
/// when it is destroyed. No LLVM dependency: linked into emitted executables.
///
//===----------------------------------------------------------------------===//

#ifndef MFRT_IO_JSON_H
#define MFRT_IO_JSON_H

#include <nlohmann/json.hpp>

#include <string>

namespace mfrt {

/// The deepest nesting of arrays and objects the runtime's JSON inputs may
/// have (real files nest a few levels).
constexpr int kMaxJsonDepth = 64;

/// Parses \p text. On failure returns false and sets \p error to the reason
/// in one line ("syntax error at byte 12: ..." or "nested deeper than 64
/// levels"), without a file name.
bool parseJson(const std::string &text, nlohmann::json &out,
               std::string &error);

/// The contents of the file \p path, or false with \p error set to one line
/// naming it.
bool readWholeFile(const std::string &path, std::string &out,
                   std::string &error);

/// Writes \p text to \p path through a temporary file (PATH.tmp, then
/// renamed), so that a failed write leaves no partial file; false with
/// \p error set to one line naming the file otherwise.
bool writeWholeFile(const std::string &path, const std::string &text,
                    std::string &error);

} // namespace mfrt

#endif // MFRT_IO_JSON_H
