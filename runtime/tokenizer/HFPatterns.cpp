//===- HFPatterns.cpp - Patterns and splits of tokenizer.json -------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The patterns of the Split and Replace components (a literal string or an
// Oniguruma regular expression, the engine `tokenizers` itself uses, so that
// a checkpoint's expressions mean the same here) and the split behaviors
// every splitting pre-tokenizer goes through.
//
//===----------------------------------------------------------------------===//

#include "HFTokenizerParts.h"

#include <oniguruma.h>

#include <mutex>

using namespace mfrt;
using namespace mfrt::hf;

//===----------------------------------------------------------------------===//
// Regex and Pattern
//===----------------------------------------------------------------------===//

Regex::Regex(const std::string &pattern, const std::string &where) {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
  OnigErrorInfo info;
  const auto *begin = reinterpret_cast<const OnigUChar *>(pattern.data());
  int rc = onig_new(&regex, begin, begin + pattern.size(), ONIG_OPTION_NONE,
                    ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    regex = nullptr;
    fail(where + ": the regular expression does not compile: " +
         reinterpret_cast<const char *>(message));
  }
}

Regex::~Regex() {
  if (regex)
    onig_free(regex);
}

std::vector<Range> Regex::findAll(std::string_view text) const {
  std::vector<Range> matches;
  OnigRegion *region = onig_region_new();
  const auto *str = reinterpret_cast<const OnigUChar *>(text.data());
  const OnigUChar *end = str + text.size();
  size_t from = 0;
  while (from <= text.size()) {
    int at =
        onig_search(regex, str, end, str + from, end, region, ONIG_OPTION_NONE);
    if (at < 0)
      break;
    size_t b = size_t(region->beg[0]), e = size_t(region->end[0]);
    matches.emplace_back(b, e);
    if (e > b)
      from = e;
    else if (b < text.size())
      from = b + unicode::charLength(text, b);
    else
      break;
  }
  onig_region_free(region, 1);
  return matches;
}

Pattern::Pattern(const json &spec, const std::string &where) {
  if (!spec.is_object() || spec.size() != 1)
    fail(where + " is not {\"String\": ...} or {\"Regex\": ...}");
  auto it = spec.begin();
  if (!it.value().is_string())
    fail(where + "." + it.key() + " is not a string");
  if (it.key() == "String")
    literal = it.value().get<std::string>();
  else if (it.key() == "Regex")
    regex = std::make_unique<Regex>(it.value().get<std::string>(), where);
  else
    fail(where + ": pattern kind '" + it.key() +
         "' is not supported (String, Regex)");
}

std::vector<Range> Pattern::findAll(std::string_view text) const {
  if (regex)
    return regex->findAll(text);
  std::vector<Range> matches;
  if (literal.empty())
    return matches;
  for (size_t at = text.find(literal); at != std::string_view::npos;
       at = text.find(literal, at + literal.size()))
    matches.emplace_back(at, at + literal.size());
  return matches;
}

std::string Pattern::replaceAll(std::string_view text,
                                const std::string &content) const {
  std::string out;
  size_t last = 0;
  for (auto [b, e] : findAll(text)) {
    out.append(text.substr(last, b - last));
    out += content;
    last = e;
  }
  out.append(text.substr(last));
  return out;
}

//===----------------------------------------------------------------------===//
// Splitting with a delimiter behavior
//===----------------------------------------------------------------------===//

Behavior hf::behaviorOf(const std::string &name, const std::string &where) {
  if (name == "Removed")
    return Behavior::Removed;
  if (name == "Isolated")
    return Behavior::Isolated;
  if (name == "MergedWithPrevious")
    return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext")
    return Behavior::MergedWithNext;
  if (name == "Contiguous")
    return Behavior::Contiguous;
  fail(where + ".behavior '" + name + "' is not a split behavior");
}

namespace {

/// A range of a piece and whether it is a delimiter.
using Part = std::pair<Range, bool>;

/// The parts of a piece of \p size bytes at \p matches, covering it.
std::vector<Part> partsOf(size_t size, const std::vector<Range> &matches,
                          bool invert) {
  std::vector<Part> parts;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev)
      parts.push_back({{prev, b}, invert});
    parts.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev < size)
    parts.push_back({{prev, size}, invert});
  return parts;
}

/// The ranges of \p parts, each joined to the range before it when
/// \p joins(is delimiter, the part before is a delimiter) holds.
template <class Joins>
std::vector<Range> joinParts(const std::vector<Part> &parts, Joins joins) {
  std::vector<Range> ranges;
  bool lastDelimiter = false;
  for (const Part &p : parts) {
    if (joins(p.second, lastDelimiter) && !ranges.empty())
      ranges.back().second = p.first.second;
    else
      ranges.push_back(p.first);
    lastDelimiter = p.second;
  }
  return ranges;
}

/// The ranges \p behavior makes of \p parts.
std::vector<Range> rangesOf(const std::vector<Part> &parts, Behavior behavior) {
  std::vector<Range> ranges;
  switch (behavior) {
  case Behavior::Isolated:
    for (const Part &p : parts)
      ranges.push_back(p.first);
    break;
  case Behavior::Removed:
    for (const Part &p : parts)
      if (!p.second)
        ranges.push_back(p.first);
    break;
  case Behavior::Contiguous:
    return joinParts(parts, [](bool delimiter, bool lastDelimiter) {
      return delimiter && lastDelimiter;
    });
  case Behavior::MergedWithPrevious:
    return joinParts(parts, [](bool delimiter, bool lastDelimiter) {
      return delimiter && !lastDelimiter;
    });
  case Behavior::MergedWithNext:
    return joinParts(parts, [](bool delimiter, bool lastDelimiter) {
      return !delimiter && lastDelimiter;
    });
  }
  return ranges;
}

} // namespace

void hf::splitPiece(const Piece &piece, const std::vector<Range> &matches,
                    Behavior behavior, bool invert, std::vector<Piece> &out) {
  std::vector<Part> parts = partsOf(piece.text.size(), matches, invert);
  bool first = piece.first;
  for (auto [b, e] : rangesOf(parts, behavior)) {
    if (e <= b)
      continue;
    out.push_back({piece.text.substr(b, e - b), first && b == 0});
  }
}
