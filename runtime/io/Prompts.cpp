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

#include "mfrt/io/Json.h"
#include "mfrt/io/Utf8.h"

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
  std::string text, reason;
  if (!readWholeFile(path, text, reason))
    return setError(error, reason);
  return parsePromptsText(text, path, vocab, out, error);
}

namespace {
/// Where a line's message starts: "FILE: line N: ".
std::string at(const std::string &name, size_t line) {
  return name + ": line " + std::to_string(line) + ": ";
}

/// Checks that \p text is UTF-8, naming the column (1-based byte) if not.
bool checkUtf8(const std::string &text, const std::string &where,
               std::string *error) {
  size_t bad;
  if (isUtf8(text, bad))
    return true;
  char byte[8];
  std::snprintf(byte, sizeof(byte), "0x%02x", (unsigned char)text[bad]);
  return setError(error, where + "not UTF-8 (byte " + byte + " at column " +
                             std::to_string(bad + 1) + ")");
}
/// The lines of \p text, without their '\n' (a newline at the end of the
/// file ends the last line; it starts no empty one).
std::vector<std::string> splitLines(const std::string &text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t newline = text.find('\n', pos);
    size_t end = newline == std::string::npos ? text.size() : newline;
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}
} // namespace

bool mfrt::parsePromptLines(const std::string &text, const std::string &name,
                            std::vector<PromptEntry> &out, std::string *error) {
  out.clear();
  std::vector<PromptEntry> prompts;
  std::vector<std::string> lines = splitLines(text);
  for (size_t line = 1; line <= lines.size(); ++line) {
    std::string &raw = lines[line - 1];
    if (!raw.empty() && raw.back() == '\r')
      raw.pop_back();
    std::string where = at(name, line);
    if (!checkUtf8(raw, where, error))
      return false;
    PromptEntry e;
    e.isText = true;
    e.line = line;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\') {
        e.text += raw[i];
        continue;
      }
      char next = i + 1 < raw.size() ? raw[i + 1] : '\0';
      switch (next) {
      case 'n':
        e.text += '\n';
        break;
      case 't':
        e.text += '\t';
        break;
      case 'r':
        e.text += '\r';
        break;
      case '\\':
        e.text += '\\';
        break;
      default:
        return setError(error, where + "unknown escape " +
                                   (next ? quoteToken(std::string("\\") + next)
                                         : std::string("'\\' at the end")) +
                                   " at column " + std::to_string(i + 1) +
                                   " (\\n, \\t, \\r and \\\\ are allowed)");
      }
      ++i;
    }
    if (e.text.empty())
      return setError(error, where + "empty prompt");
    prompts.push_back(std::move(e));
  }
  if (prompts.empty())
    return setError(error, name + ": no requests (the file is empty)");
  out = std::move(prompts);
  return true;
}

namespace {
/// Refuses a request field that the program does not honour per request:
/// sampling and length settings (the run's flags apply to every request),
/// chat messages (no chat template), and fields it does not know. Metadata
/// (`model`, `user`, and a batch line's `custom_id`, `method` and `url`) is
/// accepted and not used. \p envelope is the batch line around a `body`
/// request, or null.
bool checkRequestFields(const nlohmann::json &request,
                        const nlohmann::json *envelope,
                        const std::string &where, std::string *error) {
  auto isBatchMetadata = [](const std::string &key) {
    return key == "custom_id" || key == "method" || key == "url";
  };
  if (envelope)
    for (const auto &item : envelope->items())
      if (item.key() != "body" && !isBatchMetadata(item.key()))
        return setError(error, where + "unknown field \"" + item.key() +
                                   "\" beside \"body\" (a batch line has "
                                   "\"custom_id\", \"method\", \"url\" "
                                   "and \"body\")");
  static const std::pair<const char *, const char *> runFlags[] = {
      {"max_tokens", "--max-new-tokens"},
      {"max_new_tokens", "--max-new-tokens"},
      {"max_completion_tokens", "--max-new-tokens"},
      {"temperature", "--temperature"},
      {"top_p", "--top-p"},
      {"top_k", "--top-k"},
      {"seed", "--seed"},
      {"ignore_eos", "--ignore-eos"},
      {"logprobs", "--step-logits"},
      {"prompt_logprobs", "--prompt-logprobs at compile time"}};
  for (const auto &item : request.items()) {
    const std::string &key = item.key();
    if (key == "prompt" || key == "prompt_token_ids" || key == "model" ||
        key == "user" || isBatchMetadata(key))
      continue;
    for (const auto &[field, flag] : runFlags)
      if (key == field)
        return setError(error, where + "field \"" + key +
                                   "\" is not read per request: the run's " +
                                   flag + " applies to every request");
    if (key == "messages")
      return setError(error, where + "field \"messages\": chat requests "
                                     "are not supported (no chat template); "
                                     "give the text as \"prompt\"");
    return setError(error, where + "unknown field \"" + key +
                               "\" (a request has \"prompt\" or "
                               "\"prompt_token_ids\"; \"model\" and "
                               "\"user\" are accepted and not used)");
  }
  return true;
}
} // namespace

bool mfrt::parsePromptsJsonl(const std::string &text, const std::string &name,
                             int64_t vocab, std::vector<PromptEntry> &out,
                             std::string *error) {
  out.clear();
  std::vector<PromptEntry> prompts;
  std::vector<std::string> lines = splitLines(text);
  for (size_t line = 1; line <= lines.size(); ++line) {
    const std::string &raw = lines[line - 1];
    if (raw.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    std::string where = at(name, line);
    if (!checkUtf8(raw, where, error))
      return false;
    nlohmann::json j;
    std::string reason;
    if (!parseJson(raw, j, reason))
      return setError(error, where + "invalid JSON: " + reason);
    if (!j.is_object())
      return setError(error, where + "not a JSON object");
    const nlohmann::json *request = &j;
    if (!j.contains("prompt") && !j.contains("prompt_token_ids") &&
        j.contains("body") && j["body"].is_object())
      request = &j["body"];
    if (!checkRequestFields(*request, request == &j ? nullptr : &j, where,
                            error))
      return false;
    bool hasText = request->contains("prompt");
    bool hasIds = request->contains("prompt_token_ids");
    if (hasText == hasIds)
      return setError(error, where + (hasText ? "both \"prompt\" and "
                                                "\"prompt_token_ids\": give one"
                                              : "no \"prompt\" (text) or "
                                                "\"prompt_token_ids\" (ids)"));
    PromptEntry e;
    e.line = line;
    if (hasText) {
      const nlohmann::json &p = (*request)["prompt"];
      if (!p.is_string())
        return setError(error, where + "\"prompt\" is not a string (a list "
                                       "of prompts: one per line)");
      e.isText = true;
      e.text = p.get<std::string>();
      if (e.text.empty())
        return setError(error, where + "empty prompt");
    } else {
      const nlohmann::json &ids = (*request)["prompt_token_ids"];
      if (!ids.is_array() || ids.empty())
        return setError(error,
                        where + "\"prompt_token_ids\" is not a non-empty list");
      for (size_t k = 0; k < ids.size(); ++k) {
        const nlohmann::json &id = ids[k];
        std::string which =
            where + "prompt_token_ids[" + std::to_string(k) + "] ";
        if (!id.is_number_integer())
          return setError(error, which + "is not an integer");
        if (id.is_number_unsigned()
                ? id.get<uint64_t>() >= uint64_t(vocab)
                : (id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab))
          return setError(error, which + "= " + id.dump() +
                                     " is out of range for vocabulary size " +
                                     std::to_string(vocab));
        e.ids.push_back(id.get<int64_t>());
      }
    }
    prompts.push_back(std::move(e));
  }
  if (prompts.empty())
    return setError(error, name + ": no requests (no prompt in the file)");
  out = std::move(prompts);
  return true;
}

std::string mfrt::escapePromptText(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      out += c;
    }
  }
  return out;
}
