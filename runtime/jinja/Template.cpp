//===- Template.cpp - Chat templates: the public interface ----------------===//

#include "mfrt/jinja/Template.h"

#include "Jinja.h"

using namespace mfrt::jinja;

Template::~Template() = default;

std::unique_ptr<Template> Template::parse(const std::string &source,
                                          std::string *error) {
  try {
    std::unique_ptr<Template> t(new Template());
    t->root = parseTemplate(source);
    return t;
  } catch (const Error &e) {
    *error = e.what();
    return nullptr;
  }
}

bool Template::render(const nlohmann::ordered_json &context, std::string &out,
                      std::string *error) const {
  try {
    Value v = fromJson(context);
    if (!v.isDict())
      throw Error("the context must be a JSON object");
    out.clear();
    renderTemplate(*root, v, out);
    return true;
  } catch (const Error &e) {
    *error = e.what();
    return false;
  }
}
