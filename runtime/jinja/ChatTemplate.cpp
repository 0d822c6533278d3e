//===- ChatTemplate.cpp - A checkpoint's chat template --------------------===//

#include "mfrt/jinja/ChatTemplate.h"

#include "mfrt/io/Json.h"

#include <sys/stat.h>

using namespace mfrt::jinja;
using json = nlohmann::ordered_json;

namespace {
bool isFolder(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string folderOf(const std::string &file) {
  size_t slash = file.find_last_of('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

/// tokenizer_config.json's special tokens: strings, or AddedToken objects
/// ({"content": ...}).
json specialTokensOf(const json &config) {
  json tokens = json::object();
  for (const char *name : {"bos_token", "eos_token", "unk_token", "pad_token",
                           "sep_token", "cls_token", "mask_token"}) {
    auto it = config.find(name);
    if (it == config.end())
      continue;
    if (it->is_string())
      tokens[name] = *it;
    else if (it->is_object() && it->contains("content") &&
             (*it)["content"].is_string())
      tokens[name] = (*it)["content"];
  }
  return tokens;
}

/// The chat template of a tokenizer_config.json's object.
bool templateOf(const json &config, const std::string &file,
                std::string &source, std::string *error) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    *error = "";
    return false;
  }
  if (it->is_string()) {
    source = *it;
    return true;
  }
  if (it->is_array())
    for (const json &named : *it)
      if (named.is_object() && named.value("name", "") == "default" &&
          named.contains("template") && named["template"].is_string()) {
        source = named["template"];
        return true;
      }
  *error = file + ": chat_template must be a string or a list with a "
                  "\"default\" template";
  return false;
}

bool readConfig(const std::string &file, json &config, std::string *error) {
  std::string text;
  if (!mfrt::readWholeFile(file, text, *error))
    return false;
  config = json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    *error = file + ": not a JSON object";
    return false;
  }
  return true;
}

/// Reads the template's text and the special tokens (see load()).
bool readTemplate(const std::string &path, ChatTemplate &t,
                  std::string *error) {
  bool folder = isFolder(path);
  bool jsonFile = !folder && path.size() >= 5 &&
                  path.compare(path.size() - 5, 5, ".json") == 0;
  std::string config =
      jsonFile ? path
               : (folder ? path : folderOf(path)) + "/tokenizer_config.json";
  json cfg;
  if (exists(config)) {
    if (!readConfig(config, cfg, error))
      return false;
    t.specialTokens = specialTokensOf(cfg);
  }
  if (folder && exists(path + "/chat_template.jinja"))
    t.file = path + "/chat_template.jinja";
  else if (!folder && !jsonFile)
    t.file = path;
  if (!t.file.empty())
    return mfrt::readWholeFile(t.file, t.source, *error);
  t.file = config;
  if (!exists(config)) {
    *error = jsonFile ? config + ": no such file" : "";
    return false;
  }
  if (templateOf(cfg, config, t.source, error))
    return true;
  if (jsonFile && error->empty())
    *error = config + ": has no chat_template";
  return false;
}
} // namespace

std::unique_ptr<ChatTemplate> ChatTemplate::load(const std::string &path,
                                                 std::string *error) {
  auto t = std::make_unique<ChatTemplate>();
  error->clear();
  if (!readTemplate(path, *t, error))
    return nullptr;
  std::string why;
  t->parsed = Template::parse(t->source, &why);
  std::string probe;
  json messages =
      json::array({{{"role", "user"}, {"content", "Hi"}},
                   {{"role", "assistant"}, {"content", "Hello"}},
                   {{"role", "user"}, {"content", "How are you?"}}});
  if (!t->parsed || !t->render(messages, true, json::object(), probe, &why)) {
    *error = t->file + ": the chat template cannot be rendered: " + why;
    return nullptr;
  }
  return t;
}

bool ChatTemplate::render(const json &messages, bool addGenerationPrompt,
                          const json &variables, std::string &out,
                          std::string *error) const {
  json context = specialTokens;
  context["messages"] = messages;
  context["add_generation_prompt"] = addGenerationPrompt;
  for (const auto &[k, v] : variables.items())
    context[k] = v;
  if (!context.contains("tools"))
    context["tools"] = nullptr;
  return parsed->render(context, out, error);
}
