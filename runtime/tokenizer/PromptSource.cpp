//===- PromptSource.cpp - Prompts as ids, text or JSONL -------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "mfrt/tokenizer/PromptSource.h"

#include "mfrt/io/Json.h"

#include <sys/stat.h>

using namespace mfrt;

namespace {
bool fail(std::string *error, const std::string &message) {
  if (error)
    *error = message;
  return false;
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
} // namespace

std::string mfrt::tokenizerPathFor(const PromptFiles &files) {
  if (!files.tokenizer.empty())
    return files.tokenizer;
  if (files.weights.empty())
    return "";
  if (isDirectory(files.weights))
    return Tokenizer::findIn(files.weights);
  size_t slash = files.weights.find_last_of('/');
  return Tokenizer::findIn(
      slash == std::string::npos ? "." : files.weights.substr(0, slash + 1));
}

bool mfrt::readPrompts(const PromptFiles &files, int64_t vocab, Prompts &out,
                       std::string *error) {
  out = Prompts();
  int given = !files.ids.empty() + !files.text.empty() + !files.jsonl.empty();
  if (given != 1)
    return fail(error, given == 0 ? "no prompts: give --prompts (token ids), "
                                    "--prompts-text or --prompts-jsonl"
                                  : "give one of --prompts, --prompts-text "
                                    "and --prompts-jsonl");
  std::vector<PromptEntry> entries;
  std::string text, reason;
  if (!files.ids.empty()) {
    out.file = files.ids;
    if (!parsePrompts(files.ids, vocab, out.tokens, error))
      return false;
    for (size_t r = 0; r < out.tokens.size(); ++r)
      out.lines.push_back(r + 1);
  } else {
    out.file = files.text.empty() ? files.jsonl : files.text;
    if (!readWholeFile(out.file, text, reason))
      return fail(error, reason);
    bool ok = files.text.empty()
                  ? parsePromptsJsonl(text, out.file, vocab, entries, error)
                  : parsePromptLines(text, out.file, entries, error);
    if (!ok)
      return false;
  }

  bool needTokenizer = false;
  for (const PromptEntry &e : entries)
    needTokenizer |= e.isText;
  std::string tokenizerPath = tokenizerPathFor(files);
  if (needTokenizer && tokenizerPath.empty())
    return fail(error, out.file +
                           ": text prompts need the checkpoint's tokenizer, "
                           "and there is no tokenizer.json or tokenizer.model "
                           "beside the weights (give --tokenizer PATH)");
  if ((needTokenizer || files.wantTokenizer) && !tokenizerPath.empty()) {
    out.tokenizer = Tokenizer::load(tokenizerPath, error);
    if (!out.tokenizer)
      return false;
  }

  for (PromptEntry &e : entries) {
    std::string where = out.file + ": line " + std::to_string(e.line) + ": ";
    out.lines.push_back(e.line);
    out.texts.push_back(e.text);
    if (!e.isText) {
      out.tokens.push_back(std::move(e.ids));
      continue;
    }
    std::vector<int64_t> ids;
    if (!out.tokenizer->encode(e.text, ids, &reason))
      return fail(error, where + reason);
    if (ids.empty())
      return fail(error, where + "the prompt tokenizes to no tokens");
    for (int64_t id : ids)
      if (id < 0 || id >= vocab)
        return fail(error, where + "the tokenizer (" + tokenizerPath +
                               ") gives id " + std::to_string(id) +
                               ", outside the model's vocabulary of " +
                               std::to_string(vocab) +
                               " (a tokenizer of another model?)");
    out.tokens.push_back(std::move(ids));
  }
  return true;
}
