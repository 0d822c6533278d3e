//===- Tokenizer.cpp - Finding and loading a checkpoint's tokenizer -------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "mfrt/tokenizer/Tokenizer.h"

#include "HFTokenizer.h"
#include "SentencePieceTokenizer.h"

#include "mfrt/io/Json.h"
#include "mfrt/io/Utf8.h"

#include <sys/stat.h>

using namespace mfrt;

Tokenizer::~Tokenizer() = default;

bool Tokenizer::encode(std::string_view text, std::vector<int64_t> &ids,
                       std::string *error, bool addSpecial) const {
  ids.clear();
  size_t bad;
  if (!isUtf8(text, bad)) {
    if (error)
      *error = "text is not UTF-8 (byte " + std::to_string(bad) + ")";
    return false;
  }
  return encodeText(text, ids, error, addSpecial);
}

namespace {
bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool isFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::string &dir, const std::string &name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string dirOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash + 1);
}

/// `add_bos_token` / `add_eos_token` of the tokenizer_config.json beside a
/// SentencePiece model (Hugging Face's Llama defaults when absent).
bool readSpecialFlags(const std::string &dir, bool &addBos, bool &addEos,
                      std::string *error) {
  addBos = true;
  addEos = false;
  std::string path = join(dir, "tokenizer_config.json");
  if (!isFile(path))
    return true;
  std::string text, reason;
  nlohmann::json config;
  if (!readWholeFile(path, text, reason) || !parseJson(text, config, reason)) {
    if (error)
      *error = reason.rfind(path, 0) == 0 ? reason
                                          : path + ": invalid JSON: " + reason;
    return false;
  }
  if (!config.is_object()) {
    if (error)
      *error = path + ": the top level is not an object";
    return false;
  }
  for (auto [key, flag] :
       {std::pair<const char *, bool *>{"add_bos_token", &addBos},
        {"add_eos_token", &addEos}}) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null())
      continue;
    if (!it->is_boolean()) {
      if (error)
        *error = path + ": " + key + " is not true or false";
      return false;
    }
    *flag = it->get<bool>();
  }
  return true;
}
} // namespace

std::string Tokenizer::findIn(const std::string &folder) {
  for (const char *name : {"tokenizer.json", "tokenizer.model"}) {
    std::string path = join(folder, name);
    if (isFile(path))
      return path;
  }
  return "";
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string &path,
                                           std::string *error) {
  std::string file = path;
  if (isDirectory(path)) {
    file = findIn(path);
    if (file.empty()) {
      if (error)
        *error = path + ": no tokenizer.json or tokenizer.model in the folder";
      return nullptr;
    }
  } else if (!isFile(path)) {
    if (error)
      *error = path + ": no such file or folder";
    return nullptr;
  }
  std::string text, reason;
  if (!readWholeFile(file, text, reason)) {
    if (error)
      *error = reason;
    return nullptr;
  }
  // A tokenizer.json is a JSON object; a SentencePiece model is a protobuf.
  size_t first = text.find_first_not_of(" \t\r\n");
  bool isJson =
      (first != std::string::npos && text[first] == '{') ||
      (file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0);
  if (isJson)
    return HFTokenizer::parse(text, file, error);
  bool addBos, addEos;
  if (!readSpecialFlags(dirOf(file), addBos, addEos, error))
    return nullptr;
  return SentencePieceTokenizer::load(file, addBos, addEos, error);
}
