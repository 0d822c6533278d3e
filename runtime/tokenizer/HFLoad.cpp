//===- HFLoad.cpp - Reading a tokenizer.json ------------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The top level of a tokenizer.json read into an HFTokenizer: the model, the
// added tokens, the normalizer, pre-tokenizer and decoder (each read by its
// own file), the post-processor's special tokens, and the refusal of
// truncation and padding. The fields are read in one fixed order, so that a
// file with several faults always gets the same error. The field readers
// every component uses are here too: an error is one line naming the field,
// the file name added by HFTokenizer::parse.
//
//===----------------------------------------------------------------------===//

#include "HFTokenizerParts.h"

#include "mfrt/io/Json.h"

#include <algorithm>

using namespace mfrt;
using namespace mfrt::hf;

//===----------------------------------------------------------------------===//
// Field readers
//===----------------------------------------------------------------------===//

void hf::fail(const std::string &message) { throw LoadError(message); }

std::string hf::stringField(const json &object, const char *key,
                            const std::string &where,
                            const std::string &fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null())
    return fallback;
  if (!it->is_string())
    fail(where + "." + key + " is not a string");
  return it->get<std::string>();
}

bool hf::boolField(const json &object, const char *key,
                   const std::string &where, bool fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null())
    return fallback;
  if (!it->is_boolean())
    fail(where + "." + key + " is not true or false");
  return it->get<bool>();
}

int64_t hf::intField(const json &object, const char *key,
                     const std::string &where, int64_t fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null())
    return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
      it->get<int64_t>() > INT32_MAX)
    fail(where + "." + key + " is not a whole number from 0 to 2^31-1");
  return it->get<int64_t>();
}

const json &hf::objectField(const json &object, const char *key,
                            const std::string &where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_object())
    fail(where + "." + key + " is missing or not an object");
  return *it;
}

const json &hf::arrayField(const json &object, const char *key,
                           const std::string &where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_array())
    fail(where + "." + key + " is missing or not a list");
  return *it;
}

int32_t hf::charField(const json &object, const char *key,
                      const std::string &where, int32_t fallback) {
  std::string s = stringField(object, key, where, "");
  if (s.empty())
    return fallback;
  size_t n = 0;
  int32_t cp = unicode::codePoint(s, 0, &n);
  if (n != s.size())
    fail(where + "." + key + " is not one character");
  return cp;
}

std::string hf::typeOf(const json &component, const std::string &where) {
  if (!component.is_object())
    fail(where + " is not an object");
  auto it = component.find("type");
  if (it == component.end() || !it->is_string())
    fail(where + ".type is missing");
  return it->get<std::string>();
}

std::string hf::prependScheme(const json &spec, const std::string &where) {
  std::string scheme = "always";
  if (spec.contains("prepend_scheme"))
    scheme = stringField(spec, "prepend_scheme", where, "always");
  else if (!boolField(spec, "add_prefix_space", where, true))
    scheme = "never";
  if (scheme != "always" && scheme != "first" && scheme != "never")
    fail(where + ".prepend_scheme '" + scheme +
         "' is not always, first or never");
  return scheme;
}

//===----------------------------------------------------------------------===//
// The tokenizer
//===----------------------------------------------------------------------===//

std::unique_ptr<HFTokenizer> HFTokenizer::parse(const std::string &text,
                                                const std::string &name,
                                                std::string *error) {
  auto tokenizer = std::unique_ptr<HFTokenizer>(new HFTokenizer());
  tokenizer->file = name;
  try {
    tokenizer->build(text);
  } catch (const LoadError &e) {
    if (error)
      *error = name + ": " + e.what();
    return nullptr;
  } catch (const json::exception &e) {
    // A value of an unexpected type that a check did not catch.
    if (error)
      *error = name + ": not a tokenizer.json: " + e.what();
    return nullptr;
  }
  return tokenizer;
}

void HFTokenizer::build(const std::string &text) {
  json root;
  std::string reason;
  if (!parseJson(text, root, reason))
    fail("not a tokenizer.json: " + reason);
  if (!root.is_object())
    fail("not a tokenizer.json: the top level is not an object");
  Impl &m = *impl;
  const json &model = objectField(root, "model", "tokenizer");
  m.model.readOptions(model);
  int64_t size = m.model.readVocab(model);
  m.readAddedTokens(root, size);
  m.buildTables(size);
  m.model.readUnk(model);
  m.model.readMerges(model);

  auto field = [&](const char *key) -> const json & {
    static const json null;
    auto it = root.find(key);
    return it == root.end() ? null : *it;
  };
  m.normalizer = makeNormalizer(field("normalizer"), "normalizer");
  m.preTokenizer = makePreTokenizer(field("pre_tokenizer"), "pre_tokenizer");
  m.decoder = makeDecoder(field("decoder"), "decoder");
  buildPostProcessor(field("post_processor"), "post_processor");
  if (!field("truncation").is_null())
    fail("truncation is set: truncating prompts is not supported (remove it "
         "or set it to null)");
  if (!field("padding").is_null())
    fail("padding is set: padding is not supported (remove it or set it to "
         "null)");
}

//===----------------------------------------------------------------------===//
// Added tokens
//===----------------------------------------------------------------------===//

void HFTokenizer::Impl::readAddedTokens(const json &root, int64_t &size) {
  auto list = root.find("added_tokens");
  if (list == root.end() || list->is_null())
    return;
  if (!list->is_array())
    fail("added_tokens is not a list");
  for (size_t i = 0; i < list->size(); ++i) {
    AddedToken t =
        readAddedToken((*list)[i], "added_tokens[" + std::to_string(i) + "]");
    size = std::max(size, t.id + 1);
    added.push_back(std::move(t));
  }
}

HFTokenizer::AddedToken
HFTokenizer::Impl::readAddedToken(const json &spec, const std::string &where) {
  if (!spec.is_object())
    fail(where + " is not an object");
  AddedToken t;
  t.id = intField(spec, "id", where, -1);
  if (t.id < 0 || t.id >= (int64_t(1) << 24))
    fail(where + ".id is missing or not an id from 0 to 2^24-1");
  t.content = stringField(spec, "content", where);
  if (t.content.empty())
    fail(where + ".content is missing or empty");
  t.singleWord = boolField(spec, "single_word", where, false);
  t.lstrip = boolField(spec, "lstrip", where, false);
  t.rstrip = boolField(spec, "rstrip", where, false);
  t.special = boolField(spec, "special", where, false);
  t.normalized = boolField(spec, "normalized", where, !t.special);
  return t;
}

void HFTokenizer::Impl::buildTables(int64_t size) {
  tokenOf.assign(size_t(size), "");
  special.assign(size_t(size), false);
  for (auto &[token, id] : model.vocab)
    tokenOf[size_t(id)] = token;
  // An added token with the id of a vocabulary token names it.
  for (const AddedToken &t : added) {
    tokenOf[size_t(t.id)] = t.content;
    special[size_t(t.id)] = t.special;
  }
}

//===----------------------------------------------------------------------===//
// The post-processor: the special tokens around the sequence
//===----------------------------------------------------------------------===//

void HFTokenizer::buildPostProcessor(const nlohmann::json &spec,
                                     const std::string &where) {
  if (spec.is_null())
    return;
  Impl &m = *impl;
  std::string type = typeOf(spec, where);
  if (type == "Sequence") {
    const json &list = arrayField(spec, "processors", where);
    for (size_t i = 0; i < list.size(); ++i)
      buildPostProcessor(list[i],
                         where + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type == "ByteLevel")
    return; // Offsets only.
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    m.before.push_back(
        m.postProcessorId(spec.value("cls", json()), where + ".cls"));
    m.after.push_back(
        m.postProcessorId(spec.value("sep", json()), where + ".sep"));
    return;
  }
  if (type == "TemplateProcessing") {
    m.readTemplate(spec, where);
    return;
  }
  fail(where + ": post-processor '" + type +
       "' is not supported (TemplateProcessing, ByteLevel, RobertaProcessing, "
       "BertProcessing, Sequence)");
}

int64_t HFTokenizer::Impl::postProcessorId(const json &pair,
                                           const std::string &at) const {
  if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer())
    fail(at + " is not [token, id]");
  int64_t id = pair[1].get<int64_t>();
  if (id < 0 || id >= int64_t(tokenOf.size()))
    fail(at + ": id " + std::to_string(id) + " is not in the vocabulary");
  return id;
}

/// TemplateProcessing's `single`: the special tokens' ids before its
/// Sequence go before the text, the others after it.
void HFTokenizer::Impl::readTemplate(const json &spec,
                                     const std::string &where) {
  const json &single = arrayField(spec, "single", where);
  const json &specials = objectField(spec, "special_tokens", where);
  bool seenSequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const json &item = single[i];
    std::string at = where + ".single[" + std::to_string(i) + "]";
    if (item.is_object() && item.contains("Sequence")) {
      if (seenSequence)
        fail(at + ": the sequence appears twice");
      seenSequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken") ||
        !item["SpecialToken"].is_object())
      fail(at + " is not a SpecialToken or a Sequence");
    std::string name = stringField(item["SpecialToken"], "id", at);
    auto it = specials.find(name);
    if (it == specials.end() || !it->is_object() || !it->contains("ids") ||
        !(*it)["ids"].is_array())
      fail(at + ": special token '" + name +
           "' is not in special_tokens with its ids");
    for (const json &id : (*it)["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() >= int64_t(tokenOf.size()))
        fail(where + ".special_tokens['" + name +
             "']: an id is not in the vocabulary");
      (seenSequence ? after : before).push_back(id.get<int64_t>());
    }
  }
  if (!seenSequence)
    fail(where + ".single has no Sequence");
}
