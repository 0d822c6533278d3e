//===- ChatTemplate.h - A checkpoint's chat template ------------*- C++ -*-===//
//
// Finds a checkpoint's chat template and renders conversations with it as
// Hugging Face's apply_chat_template does: the variables `messages`,
// `add_generation_prompt`, `tools` (when given), the special tokens of
// tokenizer_config.json (`bos_token`, `eos_token`, ...) and any extra
// variables (chat_template_kwargs, e.g. enable_thinking).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_JINJA_CHATTEMPLATE_H
#define MFRT_JINJA_CHATTEMPLATE_H

#include "mfrt/jinja/Template.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace mfrt::jinja {

struct ChatTemplate {
  /// Where it came from, and its text.
  std::string file, source;
  std::unique_ptr<Template> parsed;
  /// tokenizer_config.json's special tokens (name -> text), when found.
  nlohmann::ordered_json specialTokens = nlohmann::ordered_json::object();

  /// Loads the chat template at `path`: a template file (.jinja), a
  /// tokenizer_config.json (its chat_template, a string or the "default" of
  /// a list), or a folder holding chat_template.jinja or
  /// tokenizer_config.json. The special tokens come from the
  /// tokenizer_config.json of the same folder. Parses it and renders a probe
  /// conversation (user, assistant, user): a template it cannot render fails
  /// in one line naming the file and the construct. Returns null on failure
  /// with `error`; "" in `error` and null when `path` (a folder) has none.
  static std::unique_ptr<ChatTemplate> load(const std::string &path,
                                            std::string *error);
  /// Renders `messages` (an array of {role, content, ...} objects) with
  /// `variables` (an object: tools, chat_template_kwargs' entries); fails
  /// with one line (raise_exception's message, an undefined value).
  bool render(const nlohmann::ordered_json &messages, bool addGenerationPrompt,
              const nlohmann::ordered_json &variables, std::string &out,
              std::string *error) const;
};

} // namespace mfrt::jinja

#endif // MFRT_JINJA_CHATTEMPLATE_H
