//===- Template.h - Chat templates: a compact Jinja interpreter -*- C++ -*-===//
//
// Checkpoints ship their chat format as a Jinja template (the
// `chat_template` of tokenizer_config.json). Debian has no C++ Jinja
// library, so this is a compact interpreter of the subset the supported
// architectures' templates use, with Hugging Face's settings (trim_blocks,
// lstrip_blocks, loop controls, `raise_exception`, `tojson` as json.dumps
// without ASCII escapes): text, {{ }}, {% if/elif/else %}, {% for %} with
// `loop` and an `if` filter, {% set %} (names, namespace attributes, blocks),
// {% break/continue %}, {% generation %}; expressions with Python's
// operators, literals, slices, attribute and item access, filters, tests and
// the str/dict methods templates call. A construct outside the subset fails
// parsing (or, for a method, rendering) in one line naming it: never
// rendered wrong. Checked byte for byte against Python's jinja2 (test/jinja).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_JINJA_TEMPLATE_H
#define MFRT_JINJA_TEMPLATE_H

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace mfrt::jinja {

struct Node;

class Template {
public:
  ~Template();
  /// Parses `source`; on failure returns null with one line in `error`
  /// ("line N: ...").
  static std::unique_ptr<Template> parse(const std::string &source,
                                         std::string *error);
  /// Renders with the variables of the JSON object `context` (JSON values
  /// become Jinja's: objects dicts, arrays lists, null none). On failure
  /// (an undefined value used, a method outside the subset,
  /// raise_exception) returns false with one line in `error`.
  bool render(const nlohmann::ordered_json &context, std::string &out,
              std::string *error) const;

private:
  Template() = default;
  std::shared_ptr<Node> root;
};

} // namespace mfrt::jinja

#endif // MFRT_JINJA_TEMPLATE_H
