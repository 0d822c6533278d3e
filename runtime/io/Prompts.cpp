//===- Prompts.cpp - Prompt file parsing ----------------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// No LLVM dependency: this file is linked into emitted executables.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Prompts.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

using namespace mfrt;

static bool setError(std::string *error, const std::string &message) {
  if (error)
    *error = message;
  return false;
}

static bool isBlank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/// Quotes \p token for a message: non-printable bytes are escaped and very
/// long tokens are shortened.
static std::string quoteToken(const std::string &token) {
  std::string out = "'";
  size_t shown = 0;
  for (char ch : token) {
    if (++shown > 32) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\x%02x", c);
      out += buffer;
    }
  }
  return out + "'";
}

/// Parses a decimal integer made only of an optional '-' and digits.
/// Returns false if \p token is not such an integer or does not fit in
/// 64 bits (\p tooLarge is set in the latter case).
static bool parseTokenId(const std::string &token, int64_t &value,
                         bool &tooLarge) {
  tooLarge = false;
  size_t i = 0;
  bool negative = false;
  if (i < token.size() && token[i] == '-') {
    negative = true;
    ++i;
  }
  if (i == token.size())
    return false;
  uint64_t magnitude = 0;
  const uint64_t limit = negative ? uint64_t(1) << 63 : uint64_t(INT64_MAX);
  for (; i < token.size(); ++i) {
    char c = token[i];
    if (c < '0' || c > '9')
      return false;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (magnitude > (limit - digit) / 10)
      tooLarge = true;
    else
      magnitude = magnitude * 10 + digit;
  }
  if (tooLarge)
    return false;
  if (negative)
    value = magnitude == (uint64_t(1) << 63) ? INT64_MIN
                                             : -static_cast<int64_t>(magnitude);
  else
    value = static_cast<int64_t>(magnitude);
  return true;
}

bool mfrt::parsePromptsText(const std::string &text, const std::string &name,
                            int64_t vocab,
                            std::vector<std::vector<int64_t>> &out,
                            std::string *error) {
  out.clear();
  if (vocab <= 0)
    return setError(error, name + ": vocabulary size " + std::to_string(vocab) +
                               " is not positive");
  std::vector<std::vector<int64_t>> requests;
  size_t pos = 0;
  size_t lineNumber = 0;
  while (pos < text.size()) {
    ++lineNumber;
    size_t newline = text.find('\n', pos);
    size_t lineEnd = newline == std::string::npos ? text.size() : newline;
    std::string where = name + ": line " + std::to_string(lineNumber) + ": ";
    std::vector<int64_t> tokens;
    size_t i = pos;
    while (i < lineEnd) {
      if (isBlank(text[i])) {
        ++i;
        continue;
      }
      size_t tokenEnd = i;
      while (tokenEnd < lineEnd && !isBlank(text[tokenEnd]))
        ++tokenEnd;
      std::string token = text.substr(i, tokenEnd - i);
      i = tokenEnd;
      int64_t id;
      bool tooLarge;
      if (!parseTokenId(token, id, tooLarge)) {
        if (tooLarge)
          return setError(error, where + "token " + quoteToken(token) +
                                     " is out of range for vocabulary size " +
                                     std::to_string(vocab));
        return setError(error, where + "token " + quoteToken(token) +
                                   " is not an integer");
      }
      if (id < 0)
        return setError(error,
                        where + "token " + quoteToken(token) + " is negative");
      if (id >= vocab)
        return setError(error, where + "token " + quoteToken(token) +
                                   " is out of range for vocabulary size " +
                                   std::to_string(vocab));
      tokens.push_back(id);
    }
    if (tokens.empty())
      return setError(error, where + "empty prompt");
    requests.push_back(std::move(tokens));
    if (newline == std::string::npos)
      break;
    pos = newline + 1;
  }
  if (requests.empty())
    return setError(error, name + ": no requests (the file is empty)");
  out = std::move(requests);
  return true;
}

bool mfrt::parsePrompts(const std::string &path, int64_t vocab,
                        std::vector<std::vector<int64_t>> &out,
                        std::string *error) {
  out.clear();
  std::FILE *in = std::fopen(path.c_str(), "rb");
  if (!in)
    return setError(error, path + ": cannot open: " + std::strerror(errno));
  std::string text;
  char buffer[65536];
  while (true) {
    size_t n = std::fread(buffer, 1, sizeof(buffer), in);
    text.append(buffer, n);
    if (n < sizeof(buffer))
      break;
  }
  bool readError = std::ferror(in) != 0;
  int savedErrno = errno;
  std::fclose(in);
  if (readError)
    return setError(error,
                    path + ": cannot read: " + std::strerror(savedErrno));
  return parsePromptsText(text, path, vocab, out, error);
}
